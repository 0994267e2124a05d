//! A frozen host (a paused VM or container, a SIGSTOP of a process tree)
//! freezes every worker process on it at once; a host cut off the network
//! leaves its connections open on the server, which still counts them as
//! receivers. These tests queue `n` such worker processes at the head of
//! a lock's queue, behind a holder, and a live waiter of another client
//! behind them; the holder releases. The live waiter must get the free
//! lock within a few standby windows of the release, not the holder's
//! lease ([`LEASE`]): a release sends standbys to the seven members after
//! the one it wakes (`wake_next.lua`: the n-th parks at most n × 200 ms;
//! `fair_common.lua`: a claim and a margin; `sem_common.lua`: 500 ms), so
//! up to seven frozen clients in a row cost the live waiter behind them
//! its window. Asserted: under [`BOUND`], generous for a loaded machine.
//!
//! Cases: three frozen single-task workers for each kind (RwLock writers
//! queue one intent per task), one frozen process whose three tasks each
//! made a `Client` of its own (one place per client, not per process),
//! seven frozen workers (the most the standbys cover), two (the old
//! bound), three partitioned, and three ahead of a hold its client renews.
//! With standbys to the next two only, a live waiter behind three waited
//! out the lease: 14.5 s (Mutex), 15.3 s (FairMutex), 14.9 s (Semaphore).

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use redbell_integration_tests::{
    PoolKind as Kind, Proxy, Stoppable, client, raw, redis_url, unique, wait_for_members,
    waiters_key,
};

/// The most any case may take: the longest window (a Mutex's seventh,
/// 1.4 s), with slack for a loaded machine.
const BOUND: Duration = Duration::from_millis(2500);

/// The holder's lease when the live waiter queues: what a stall costs.
const LEASE: Duration = Duration::from_secs(15);

type Guard = Box<dyn std::any::Any + Send>;

async fn acquire(c: &redbell::Client, kind: Kind, name: &str, lease: Option<Duration>) -> Guard {
    match kind {
        Kind::Mutex => {
            let m = lease.map_or(c.mutex(name), |l| c.mutex(name).with_lease(l));
            Box::new(m.lock().await.unwrap())
        }
        Kind::Fair => {
            let m = lease.map_or(c.fair_mutex(name), |l| c.fair_mutex(name).with_lease(l));
            Box::new(m.lock().await.unwrap())
        }
        Kind::Write => {
            let m = lease.map_or(c.rwlock(name), |l| c.rwlock(name).with_lease(l));
            Box::new(m.write().await.unwrap())
        }
        Kind::Semaphore(permits) => {
            let s = lease.map_or(c.semaphore(name, permits), |l| {
                c.semaphore(name, permits).with_lease(l)
            });
            Box::new(s.acquire().await.unwrap())
        }
    }
}

/// `n` worker processes of `k` tasks each queue behind the holder, are
/// frozen together, then a live waiter of another client queues; the
/// holder releases. Returns how long the live waiter waited.
async fn frozen_workers_ahead(kind: Kind, n: usize, k: usize) -> Duration {
    frozen_ahead(kind, n, k, false).await
}

/// As [`frozen_workers_ahead`]; with `per_task`, each task of a worker
/// has a `Client` of its own.
async fn frozen_ahead(kind: Kind, n: usize, k: usize, per_task: bool) -> Duration {
    frozen_or_cut_ahead(kind, n, k, per_task, None).await
}

/// As [`frozen_ahead`]; with `cut`, the workers connect through that
/// proxy, which is partitioned (every connection open and silent both
/// ways, as a host cut off the network) instead of the workers frozen.
async fn frozen_or_cut_ahead(
    kind: Kind,
    n: usize,
    k: usize,
    per_task: bool,
    cut: Option<&Proxy>,
) -> Duration {
    let url = redis_url();
    let name = unique(&format!("host-{}-{n}x{k}", kind.arg()));
    let (conn, holder) = (raw(&url).await, client(&url).await);
    let queue = kind.queue(&name);
    // A Mutex queue is ordered by expiry: the workers queue during a
    // shorter lease than the live waiter's (extended below).
    let first = if let Kind::Mutex = kind {
        LEASE - Duration::from_secs(3)
    } else {
        LEASE
    };
    let held = acquire(&holder, kind, &name, Some(first)).await;
    let (k_arg, mode) = (k.to_string(), if per_task { "per-task" } else { "shared" });
    let worker_url = cut.map_or(url.clone(), Proxy::url);
    let permits = match kind {
        Kind::Semaphore(p) => p.to_string(),
        _ => "1".to_owned(),
    };
    let args = [kind.arg(), &name, &k_arg, &permits, mode, &worker_url];
    let bin = env!("CARGO_BIN_EXE_pool_waiter").as_ref();
    let mut workers = Vec::new();
    let per = if matches!(kind, Kind::Write) || per_task {
        k
    } else {
        1
    };
    for i in 0..n {
        let mut w = Stoppable::start(bin, &args);
        w.wait_for_line(&format!("waiting {k}"));
        let want = i64::try_from((i + 1) * per).unwrap();
        wait_for_members(&conn, &queue, want, Duration::from_millis(10)).await;
        workers.push(w);
    }
    if let Kind::Mutex = kind {
        let g = held.downcast_ref::<redbell::MutexGuard>().unwrap();
        g.extend(LEASE).await.unwrap();
    }
    sleep(Duration::from_millis(200)).await;
    match cut {
        Some(proxy) => proxy.partition().await,
        None => {
            for w in &workers {
                w.stop();
            }
        }
    }
    let live_client = client(&url).await;
    let live = {
        let (c, name) = (live_client.clone(), name.clone());
        tokio::spawn(async move { acquire(&c, kind, &name, None).await })
    };
    let before = i64::try_from(n * per + 1).unwrap();
    wait_for_members(&conn, &queue, before, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    drop(held);
    let got = timeout(LEASE + Duration::from_secs(10), live).await;
    let waited = released.elapsed();
    eprintln!(
        "{kind:?}, {n} {} workers of {k} task(s) ahead: the live waiter waited {waited:?} \
         (ok: {})",
        if cut.is_some() {
            "partitioned"
        } else {
            "frozen"
        },
        got.is_ok()
    );
    // Let the frozen workers die with the test (Stoppable kills on drop).
    drop(workers);
    let guard = got
        .expect("the live waiter got nothing within the lease")
        .expect("the live waiter's acquire failed");
    drop(guard);
    waited
}

fn check(kind: Kind, n: usize, k: usize, waited: Duration) {
    assert!(
        waited < BOUND,
        "{kind:?}: a live waiter behind {n} frozen worker processes ({k} task(s) each) got the \
         free lock {waited:?} after the release (bound: its standby window, {BOUND:?} at most)"
    );
}

#[tokio::test]
async fn mutex_three_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Mutex, 3, 1).await;
    check(Kind::Mutex, 3, 1, w);
}

#[tokio::test]
async fn fair_three_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Fair, 3, 1).await;
    check(Kind::Fair, 3, 1, w);
}

#[tokio::test]
async fn semaphore_three_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Semaphore(1), 3, 1).await;
    check(Kind::Semaphore(1), 3, 1, w);
}

/// RwLock writers: a release cuts every intent's window, however many.
#[tokio::test]
async fn rwlock_writer_three_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Write, 3, 1).await;
    check(Kind::Write, 3, 1, w);
}

/// One frozen process whose 3 tasks each have a `Client` of their own:
/// one place per client, so three places.
#[tokio::test]
async fn mutex_one_frozen_process_of_three_clients_ahead() {
    let w = frozen_ahead(Kind::Mutex, 1, 3, true).await;
    check(Kind::Mutex, 1, 3, w);
}

/// As above, for the FairMutex.
#[tokio::test]
async fn fair_one_frozen_process_of_three_clients_ahead() {
    let w = frozen_ahead(Kind::Fair, 1, 3, true).await;
    check(Kind::Fair, 1, 3, w);
}

/// Seven frozen workers ahead: the most the standbys cover (the live
/// waiter's window: 7 × 200 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_seven_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Mutex, 7, 1).await;
    check(Kind::Mutex, 7, 1, w);
}

/// Two frozen workers ahead (covered before the standbys reached seven).
#[tokio::test]
async fn mutex_two_frozen_workers_ahead() {
    let w = frozen_workers_ahead(Kind::Mutex, 2, 1).await;
    check(Kind::Mutex, 2, 1, w);
}

/// A host cut off the network (not frozen) with three single-task workers
/// waiting: their connections stay open on the server (no FIN, no RST),
/// so PUBLISH still counts them as receivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_three_partitioned_workers_ahead() {
    let proxy = Proxy::start(0, redbell_integration_tests::redis_port())
        .await
        .expect("a proxy");
    let w = frozen_or_cut_ahead(Kind::Mutex, 3, 1, false, Some(&proxy)).await;
    check(Kind::Mutex, 3, 1, w);
}

/// As `mutex_three_frozen_workers_ahead`, with the holder's lease renewed
/// by its client (12 s, every 4 s) instead of a fixed lease extended once:
/// the live waiter queues after a renewal, so behind the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_three_frozen_workers_ahead_of_a_renewed_hold() {
    let url = redis_url();
    let name = unique("host-renewed");
    let conn = raw(&url).await;
    let lease = Duration::from_secs(12);
    let holder = redbell::Client::builder(url.as_str())
        .default_lease(lease)
        .renew_every(lease / 3)
        .connect()
        .await
        .expect("connect");
    let held = holder.mutex(&name).lock().await.expect("hold");
    let bin = env!("CARGO_BIN_EXE_pool_waiter").as_ref();
    let mut workers = Vec::new();
    for i in 0..3 {
        let mut w = Stoppable::start(bin, &["mutex", &name, "1"]);
        w.wait_for_line("waiting 1");
        wait_for_members(&conn, &waiters_key(&name), i + 1, Duration::from_millis(10)).await;
        workers.push(w);
    }
    sleep(Duration::from_millis(500)).await;
    for w in &workers {
        w.stop();
    }
    sleep(lease / 3 + Duration::from_millis(500)).await;
    let live_client = client(&url).await;
    let live = {
        let name = name.clone();
        tokio::spawn(async move { live_client.mutex(&name).lock().await })
    };
    wait_for_members(&conn, &waiters_key(&name), 4, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    let got = timeout(lease + Duration::from_secs(5), live).await;
    let waited = released.elapsed();
    eprintln!(
        "renewed hold, 3 frozen workers ahead: the live waiter waited {waited:?} ({})",
        got.is_ok()
    );
    drop(workers);
    let _guard = got
        .expect("the live waiter got nothing within the lease")
        .expect("the live waiter's task panicked")
        .expect("the live waiter's lock() failed");
    check(Kind::Mutex, 3, 1, waited);
}
