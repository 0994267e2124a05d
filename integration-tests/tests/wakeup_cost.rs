//! What a wake-up costs (issue 3): at most two acquire attempts per
//! hand-off with 16 contending clients, no more per hand-off with 64, and
//! two script calls and no pub/sub for a lock nobody else wants.
//!
//! Costs are counted exactly, so those tests run on a [`PrivateRedis`]:
//! acquire attempts with [`Monitor`] (filtered by script SHA and lock key),
//! server-wide command counts with `INFO commandstats`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::future::join_all;
use redbell_integration_tests::{
    LONG, Monitor, PrivateRedis, client, commandstats, counter_key, counter_value, del, eventually,
    exists, fence_key, join_within, lock_key, non_atomic_increment, raw, reset_stats, script_sha,
    subscribers, unique, waiters_key, warm_up, zcard,
};
use tokio::time::Instant;

// ---------------------------------------------------------------- helpers

use redbell_integration_tests::scenes::wakeup::*;

/// What one contention run measured, over its steady-state window.
#[derive(Debug)]
struct Contention {
    clients: usize,
    handoffs: usize,
    /// Acquire script calls in the window.
    attempts: usize,
    /// Release script calls in the window.
    releases: usize,
    /// Pass script calls in the window.
    passes: usize,
    /// Hand-offs per second in the window.
    rate: f64,
}

impl Contention {
    fn per_handoff(&self) -> f64 {
        self.attempts as f64 / self.handoffs as f64
    }
}

/// A monitor mark and when it was taken.
type Mark = (usize, Instant);

struct Shared {
    /// Critical sections entered so far.
    taken: AtomicUsize,
    /// Holders inside the critical section right now (must stay <= 1).
    inside: AtomicUsize,
    /// Acquisitions per client.
    per_client: Vec<AtomicUsize>,
    /// The acquisition number that opened the window (`usize::MAX`: not yet).
    start_n: AtomicUsize,
    /// Monitor marks at the window's start and end, and when.
    marks: StdMutex<(Option<Mark>, Option<Mark>)>,
    stop: AtomicBool,
}

/// `clients` clients (one task each) take turns on one lock, each critical
/// section a non-atomic GET/SET increment plus a short hold. After a
/// warm-up (every client acquired twice and is subscribed to its wake
/// channel), a window of exactly `handoffs` hand-offs is measured: it opens
/// and closes while a holder holds the lock and every other client is
/// parked in the queue, so no attempt straddles its edges.
async fn contend(url: &str, clients: usize, handoffs: usize) -> Contention {
    let name = unique(&format!("herd-{clients}"));
    let key = lock_key(&name);
    let queue = waiters_key(&name);
    let counter = counter_key(&name);
    let monitor = Arc::new(Monitor::start(url).await);
    let conn = raw(url).await;
    let all = join_all((0..clients).map(|_| client(url))).await;
    let shared = Arc::new(Shared {
        taken: AtomicUsize::new(0),
        inside: AtomicUsize::new(0),
        per_client: (0..clients).map(|_| AtomicUsize::new(0)).collect(),
        start_n: AtomicUsize::new(usize::MAX),
        marks: StdMutex::new((None, None)),
        stop: AtomicBool::new(false),
    });

    let mut tasks = Vec::new();
    for (i, c) in all.iter().enumerate() {
        let mutex = c.mutex(&name).with_lease(LONG);
        let (shared, monitor, mut conn) = (shared.clone(), monitor.clone(), conn.clone());
        let (name, queue, counter) = (name.clone(), queue.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            while !shared.stop.load(Ordering::SeqCst) {
                let guard = mutex.lock().await.expect("lock");
                assert_eq!(
                    shared.inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                let n = shared.taken.fetch_add(1, Ordering::SeqCst);
                shared.per_client[i].fetch_add(1, Ordering::SeqCst);
                non_atomic_increment(&mut conn, &counter, Duration::from_micros(200)).await;

                // The window's edges, taken while we hold the lock and
                // everyone else is parked.
                let start = shared.start_n.load(Ordering::SeqCst);
                let edge = if start == usize::MAX {
                    let warm = shared
                        .per_client
                        .iter()
                        .all(|c| c.load(Ordering::SeqCst) >= 2);
                    warm && subscribers(&mut conn, &name).await == clients as i64
                } else {
                    n == start + handoffs
                };
                if edge {
                    let parked = eventually(Duration::from_secs(20), || {
                        let mut conn = conn.clone();
                        let queue = queue.clone();
                        async move { zcard(&mut conn, &queue).await == clients as i64 - 1 }
                    })
                    .await;
                    assert!(parked, "the other {} clients never all parked", clients - 1);
                    monitor.sync().await;
                    let mark = (monitor.mark(), Instant::now());
                    let mut marks = shared.marks.lock().unwrap();
                    if start == usize::MAX {
                        marks.0 = Some(mark);
                        shared.start_n.store(n, Ordering::SeqCst);
                    } else {
                        marks.1 = Some(mark);
                        shared.stop.store(true, Ordering::SeqCst);
                    }
                }
                shared.inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.expect("unlock of a 30 s lease");
            }
        }));
    }
    join_within(
        Duration::from_secs(90),
        tasks,
        &format!("{clients} clients did not finish within 90 s"),
    )
    .await;

    let mut conn = conn.clone();
    let total = counter_value(&mut conn, &counter).await;
    let taken = shared.taken.load(Ordering::SeqCst);
    assert_eq!(total, taken as i64, "lost increments: two holders at once");
    assert!(!exists(&mut conn, &key).await, "lock key left behind");

    let (start, end) = *shared.marks.lock().unwrap();
    let ((start, started), (end, ended)) = (start.unwrap(), end.unwrap());
    let window = &monitor.lines()[start..end];
    let count = |sha: &str| {
        window
            .iter()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("\"evalsha\"") && l.contains(sha) && l.contains(&key)
            })
            .count()
    };
    let result = Contention {
        clients,
        handoffs,
        attempts: count(script_sha("acquire")),
        releases: count(script_sha("release")),
        passes: count(script_sha("pass")),
        rate: handoffs as f64 / (ended - started).as_secs_f64(),
    };
    eprintln!(
        "{clients} clients, {handoffs} hand-offs: {} acquire calls ({:.3} per hand-off), {} releases, \
         {} passes, {:.0} hand-offs/s ({taken} critical sections in all)",
        result.attempts,
        result.per_handoff(),
        result.releases,
        result.passes,
        result.rate,
    );
    assert_eq!(
        result.releases, handoffs,
        "the window should hold exactly one release per hand-off"
    );
    del(&mut conn, &[&counter, &fence_key(&name)]).await;
    result
}

fn assert_at_most_two(c: &Contention) {
    // The next ones in line stand by after each wake-up (in case the woken
    // waiter froze) and attempt when their window ends, so each costs at
    // most one attempt per standby window, whatever the hand-off rate.
    let seconds = c.handoffs as f64 / c.rate;
    let standby = 2 * ((seconds / STANDBY_WINDOW.as_secs_f64()).ceil() as usize + 1);
    assert!(
        c.attempts <= 2 * c.handoffs + standby,
        "{} clients: {} acquire calls for {} hand-offs ({:.3} per hand-off, more than 2 plus the standby attempts): \
         a release woke more than one waiter",
        c.clients,
        c.attempts,
        c.handoffs,
        c.per_handoff()
    );
}

/// 16 clients, 300 hand-offs in steady state: at most 2 acquire calls per
/// hand-off on average (the woken waiter's attempt, and the releaser's own
/// next attempt that queues it), and the counter is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_cost_at_most_two_attempts_per_handoff() {
    let redis = PrivateRedis::start().await;
    let c16 = contend(&redis.url(), 16, 300).await;
    assert_at_most_two(&c16);
}

/// 64 clients cost no more per hand-off than 16 (within 10%), measured in
/// the same test: the cost does not grow with the number of waiting
/// processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_cost_no_more_per_handoff_than_sixteen() {
    let redis = PrivateRedis::start().await;
    let c16 = contend(&redis.url(), 16, 300).await;
    let c64 = contend(&redis.url(), 64, 300).await;
    assert_at_most_two(&c16);
    assert_at_most_two(&c64);
    assert!(
        c64.per_handoff() <= c16.per_handoff() * 1.1,
        "acquire calls per hand-off grew from {:.3} (16 clients) to {:.3} (64 clients)",
        c16.per_handoff(),
        c64.per_handoff()
    );
}

// ------------------------------------------------------ vanished waiters

/// 1,000 uncontended lock/unlock pairs: exactly 2,000 script calls
/// server-wide, no SUBSCRIBE and no PUBLISH.
#[tokio::test]
async fn uncontended_pairs_cost_two_script_calls_and_no_pubsub() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let c = client(&url).await;
    let mutex = c.mutex(&unique("alone"));
    warm_up(&c).await;

    let mut admin = raw(&url).await;
    reset_stats(&mut admin).await;
    for _ in 0..1000 {
        let guard = mutex.lock().await.unwrap();
        guard.unlock().await.unwrap();
    }
    let stats = commandstats(&mut admin).await;
    let calls = |cmd: &str| stats.get(cmd).copied().unwrap_or(0);
    eprintln!(
        "1,000 uncontended pairs: evalsha {}, eval {}, subscribe {}, publish {}",
        calls("evalsha"),
        calls("eval"),
        calls("subscribe"),
        calls("publish")
    );
    assert_eq!(calls("evalsha"), 2000, "{stats:?}");
    for cmd in [
        "eval",
        "evalsha_ro",
        "eval_ro",
        "subscribe",
        "ssubscribe",
        "publish",
        "spublish",
    ] {
        assert_eq!(calls(cmd), 0, "{cmd} was called: {stats:?}");
    }
}

// -------------------------------------------------------- hidden state
