//! Waking exactly one waiter across all processes (issue 3): the waiter
//! queue in Redis, targeted wake-ups on per-client channels, skipping
//! members whose client is gone, passing a wake-up on, and no hidden state
//! left behind. (What a hand-off costs: `wakeup_cost.rs`.)

use std::process::{Command, Stdio};
use std::time::Duration;

use redbell::{Error, MutexGuard};
use redbell_integration_tests::{
    LONG, Monitor, PrivateRedis, client, del, eventually, fence_key, join_within, lock_key,
    lock_pattern, on_own_runtime, raw, redbell_binary, redis_url, renewing_client, scan,
    script_sha, spawn_timed, subscribers, unique, waiters_key, wake_channel, zcard, zrange,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

// ---------------------------------------------------------------- helpers

use redbell_integration_tests::scenes::wakeup::*;

/// Waits (up to 10 s) until the queue of lock `name` holds `members`
/// members and the lock has `subs` subscribed clients.
async fn wait_queued(url: &str, name: &str, members: i64, subs: i64) {
    let conn = raw(url).await;
    let queue = waiters_key(name);
    let ok = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let queue = queue.clone();
        async move {
            zcard(&mut conn, &queue).await == members && subscribers(&mut conn, name).await == subs
        }
    })
    .await;
    assert!(
        ok,
        "lock {name} never had {members} queued waiters and {subs} subscribed clients"
    );
}

/// The wake-up channel of the client that queued `member` for lock `name`.
fn channel_of(name: &str, member: &str) -> String {
    wake_channel(name, member.split(':').next().unwrap())
}

/// Extends the holder's lease to 60 s (so the next waiter's entry, expiry =
/// the holder's PTTL + grace, sorts behind the ones already queued), then
/// queues a waiter of a new client: its lock() task, which notes when it
/// got in, and the queue's members once it is the second waiter.
async fn queue_second_waiter(
    url: &str,
    name: &str,
    guard: &MutexGuard,
) -> (
    JoinHandle<(Instant, Result<MutexGuard, Error>)>,
    Vec<String>,
) {
    guard.extend(Duration::from_secs(60)).await.unwrap();
    let c = client(url).await;
    let mutex = c.mutex(name).with_lease(LONG);
    let task = spawn_timed(async move { mutex.lock().await });
    wait_queued(url, name, 2, 2).await;
    (task, zrange(&mut raw(url).await, &waiters_key(name)).await)
}

/// The index of the first line at or after `from` containing every needle.
fn find(lines: &[String], from: usize, needles: &[&str]) -> Option<usize> {
    lines[from.min(lines.len())..]
        .iter()
        .position(|l| needles.iter().all(|n| l.contains(n)))
        .map(|i| i + from)
}

// ------------------------------------------------- hand-off cost at scale

/// A waiting `redbell run` process is SIGKILLed (no cleanup: its queue
/// member stays). The release finds no receiver on its channel, drops the
/// member and wakes the live waiter queued behind it, which gets the lock
/// at once — not after the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_waiter_process_is_skipped() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("vanished");
    let queue = waiters_key(&name);
    let mut conn = raw(&url).await;
    let monitor = Monitor::start(&url).await;
    let holder = client(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();

    let mut process = Command::new(redbell_binary())
        .arg("--url")
        .arg(&url)
        .args(["run", "--ttl", "30s", &name, "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redbell run");
    wait_queued(&url, &name, 1, 1).await;
    let dead = zrange(&mut conn, &queue).await.remove(0);
    let dead_channel = channel_of(&name, &dead);

    // A live waiter queues behind the process's.
    let (task, order) = queue_second_waiter(&url, &name, &guard).await;
    assert_eq!(order[0], dead, "the process's waiter is not the head");
    let live_member = order[1].clone();

    process.kill().expect("SIGKILL redbell run");
    process.wait().expect("reap redbell run");
    let gone = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let name = name.clone();
        async move { subscribers(&mut conn, &name).await == 1 }
    })
    .await;
    assert!(
        gone,
        "the server still counts the killed process's subscription"
    );
    assert_eq!(
        zrange(&mut conn, &queue).await,
        vec![dead.clone(), live_member.clone()],
        "the killed process's member should still be queued (no cleanup)"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "the live waiter took a held lock");

    monitor.sync().await;
    let mark = monitor.mark();
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (acquired_at, got) = timeout(Duration::from_secs(10), task)
        .await
        .expect("the live waiter was stranded behind the vanished one (lease 30 s)")
        .unwrap();
    let got = got.expect("live waiter lock");
    let delay = acquired_at - released_at;
    eprintln!("live waiter acquired {delay:?} after the release (vanished head skipped)");
    assert!(
        delay < Duration::from_secs(1),
        "the live waiter got the lock {delay:?} after the release"
    );

    monitor.sync().await;
    let lines = monitor.lines();
    let publish_dead = find(&lines, mark, &["\"PUBLISH\"", &dead_channel])
        .expect("the release did not try the vanished head's channel");
    let zrem_dead = find(&lines, publish_dead, &["\"ZREM\"", &queue, &dead])
        .expect("the vanished head's member was not removed after 0 receivers");
    let live_channel = channel_of(&name, &live_member);
    let publish_live = find(&lines, zrem_dead, &["\"PUBLISH\"", &live_channel])
        .expect("the live waiter was not woken after the vanished head");
    // The release script call that did it (the last one before: the first
    // call on a fresh server is a NOSCRIPT, retried after SCRIPT LOAD).
    let release = (mark..publish_dead)
        .rev()
        .find(|&i| lines[i].contains("\"EVALSHA\"") && lines[i].contains(script_sha("release")))
        .expect("no release script call before the skip");
    // All of it inside the one release script: no client command between.
    assert!(
        lines[release + 1..=publish_live]
            .iter()
            .all(|l| l.contains("lua")),
        "the skip was not done by the release script itself: {:#?}",
        &lines[release..=publish_live]
    );
    let members = zrange(&mut conn, &queue).await;
    assert!(
        !members.contains(&dead),
        "the vanished member is still queued"
    );
    got.unlock().await.unwrap();
}

// ------------------------------------------------------------- pass-on

/// Commands for waiter A, whose client runs on a runtime of its own that
/// the test can freeze.
enum Cmd {
    /// Freeze A's runtime: acknowledge, block until the receiver yields,
    /// then cancel A's waiter at once (before it can attempt).
    FreezeThenCancel(
        tokio::sync::oneshot::Sender<()>,
        std::sync::mpsc::Receiver<()>,
    ),
}

/// A's waiter is the head of the queue, B's (another client) second. The
/// release wakes A (the hand-off names A), and A's waiter is cancelled
/// before it could attempt: A's client passes the wake-up on and B gets the
/// lock at once (lease 30 s, so a lost wake-up shows as a timeout).
///
/// A runs on a current-thread runtime of its own thread, frozen from before
/// the release until the cancellation, so the release certainly woke A and
/// A certainly never attempted. `frozen_after_release` is how long A stays
/// frozen after the release: shorter than the 100 ms hand-off reservation
/// (the pass-on must clear it) or longer (it expired unused).
async fn woken_then_cancelled_passes_on(frozen_after_release: Duration) {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("woken-cancelled");
    let queue = waiters_key(&name);
    let mut conn = raw(&url).await;
    let monitor = Monitor::start(&url).await;
    let holder = client(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();

    // Waiter A, on its own runtime and thread.
    let (cmd_tx, mut cmd_rx) = tokio::sync::mpsc::unbounded_channel::<Cmd>();
    let (outcome_tx, outcome_rx) = tokio::sync::oneshot::channel::<bool>();
    let a_thread = {
        let (url, name) = (url.clone(), name.clone());
        on_own_runtime(move || async move {
            let a = client(&url).await;
            let mutex = a.mutex(&name).with_lease(LONG);
            let waiter = tokio::spawn(async move { mutex.lock().await });
            if let Some(Cmd::FreezeThenCancel(ack, thaw)) = cmd_rx.recv().await {
                let _ = ack.send(());
                let _ = thaw.recv(); // blocks the whole runtime
                waiter.abort();
            }
            let cancelled = matches!(waiter.await, Err(e) if e.is_cancelled());
            // Let the pass-on go out before the client is dropped.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = outcome_tx.send(cancelled);
            drop(a);
        })
    };
    wait_queued(&url, &name, 1, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // A parked
    let a_member = zrange(&mut conn, &queue).await.remove(0);

    // B queues behind A.
    let (b_task, order) = queue_second_waiter(&url, &name, &guard).await;
    assert_eq!(order[0], a_member, "A is not the head of the queue");
    let b_member = order[1].clone();

    let (ack_tx, ack_rx) = tokio::sync::oneshot::channel();
    let (thaw_tx, thaw_rx) = std::sync::mpsc::channel();
    assert!(cmd_tx.send(Cmd::FreezeThenCancel(ack_tx, thaw_rx)).is_ok());
    ack_rx.await.expect("A froze");

    monitor.sync().await;
    let mark = monitor.mark();
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    tokio::time::sleep(frozen_after_release.saturating_sub(released_at.elapsed())).await;
    let cancelled_at = Instant::now();
    thaw_tx.send(()).unwrap();

    let (acquired_at, got) = timeout(Duration::from_secs(10), b_task)
        .await
        .expect("B was stranded: the cancelled woken waiter did not pass the wake-up on")
        .unwrap();
    let got = got.expect("B's lock");
    let after_cancel = acquired_at.saturating_duration_since(cancelled_at);
    let after_release = acquired_at - released_at;
    eprintln!(
        "A frozen {frozen_after_release:?} after the release: B acquired {after_cancel:?} after A's \
         cancellation ({after_release:?} after the release)"
    );
    assert!(
        after_cancel < Duration::from_secs(1),
        "B got the lock {after_cancel:?} after A's waiter was cancelled"
    );
    assert!(
        timeout(Duration::from_secs(10), outcome_rx)
            .await
            .expect("A's thread hung")
            .expect("A's outcome"),
        "A's waiter was not cancelled before acquiring"
    );
    a_thread.join().expect("A's thread panicked");

    // The release woke A (and reserved the lock for it), then A's pass-on
    // woke B.
    monitor.sync().await;
    let lines = monitor.lines();
    let a_channel = channel_of(&name, &a_member);
    let b_channel = channel_of(&name, &b_member);
    let woke_a =
        find(&lines, mark, &["\"PUBLISH\"", &a_channel]).expect("the release did not wake A");
    let reservation = format!("m:{a_member}");
    find(&lines, woke_a, &["\"SET\"", &lock_key(&name), &reservation])
        .expect("the release did not reserve the lock for A");
    let pass = find(
        &lines,
        woke_a,
        &["\"EVALSHA\"", script_sha("pass"), &a_member],
    )
    .expect("A's client did not pass the wake-up on");
    if frozen_after_release < STANDBY_WINDOW {
        find(&lines, pass, &["\"PUBLISH\"", &b_channel]).expect("the pass-on did not wake B");
    } else {
        // B, next in line, was told to stand by when A was woken, and took
        // the lock when the window ended, without waiting for the pass-on.
        find(&lines, woke_a, &["\"PUBLISH\"", &b_channel, "::s"])
            .expect("the release did not tell B to stand by");
        assert!(
            after_release < STANDBY_WINDOW + Duration::from_millis(800),
            "B got the lock {after_release:?} after the release"
        );
    }
    assert!(
        find(
            &lines,
            mark,
            &["\"EVALSHA\"", script_sha("acquire"), &a_member]
        )
        .is_none(),
        "A attempted after the release although it was frozen until cancelled"
    );
    assert!(zrange(&mut conn, &queue).await.is_empty());
    got.unlock().await.unwrap();
}

/// Cancelled while the hand-off reservation for it still stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_cancelled_at_once_passes_on() {
    woken_then_cancelled_passes_on(Duration::from_millis(20)).await;
}

/// Cancelled after the reservation for it expired unused and after the
/// standby window of B, next in line: B took the lock when its window ended
/// (before the fix B parked on the holder's 60 s lease and only the pass-on
/// could wake it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_cancelled_late_passes_on() {
    woken_then_cancelled_passes_on(Duration::from_millis(400)).await;
}

// ---------------------------------------------------- cost when alone

/// A short contended run with 300 ms leases (including waiters that time
/// out while queued), then a vanished holder and a vanished waiter, then
/// idle: once longer than the queue entries' expiry (holder PTTL + 2 s
/// grace) has passed, only the fence key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_queue_state_remains_once_idle() {
    let url = redis_url();
    let name = unique("hidden");
    let queue = waiters_key(&name);
    let conn = raw(&url).await;
    let short = Duration::from_millis(300);
    // The first holder's 300 ms lease is renewed, so the queue fills up
    // while it holds.
    let holder = renewing_client(&url, short, Duration::from_millis(100)).await;
    let guard = holder.mutex(&name).lock().await.unwrap();

    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = client(&url).await;
        let mutex = c.mutex(&name).with_lease(short);
        tasks.push(tokio::spawn(async move {
            for round in 0..5 {
                if i == 3 && round % 2 == 0 {
                    // Gives up while queued: its member must go too.
                    let r = mutex.lock_timeout(Duration::from_millis(30)).await;
                    if let Ok(g) = r {
                        g.unlock().await.expect("unlock");
                    }
                    continue;
                }
                let g = mutex.lock().await.expect("lock");
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.unlock().await.expect("unlock");
            }
            drop(c);
        }));
    }
    let queued = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        let queue = queue.clone();
        async move { zcard(&mut conn, &queue).await >= 3 }
    })
    .await;
    assert!(queued, "the waiters never queued");
    guard.unlock().await.unwrap();
    join_within(
        Duration::from_secs(30),
        tasks,
        "the contended run did not finish",
    )
    .await;
    let mut admin = conn.clone();
    assert_eq!(
        zcard(&mut admin, &queue).await,
        0,
        "members left after the run"
    );

    // Then a holder that vanishes without releasing (1 s fixed lease) and a
    // waiter behind it that vanishes without clean-up: its runtime is
    // dropped, so its pass-on never reaches Redis and its member stays
    // queued until it expires (the holder's PTTL + 2 s grace). With no
    // release, nothing skips it either.
    let abandoned = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(1))
        .lock()
        .await
        .unwrap();
    let abandoned_at = Instant::now();
    std::mem::forget(abandoned);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Dropping its runtime drops the waiter without running its clean-up.
    let vanishing = {
        let (url, name) = (url.clone(), name.clone());
        on_own_runtime(move || async move {
            let c = client(&url).await;
            let mutex = c.mutex(&name).with_lease(short);
            let _waiter = tokio::spawn(async move { mutex.lock().await });
            let _ = stop_rx.await;
        })
    };
    wait_queued(&url, &name, 1, 1).await;
    stop_tx.send(()).unwrap();
    vanishing
        .join()
        .expect("the vanishing waiter's thread panicked");
    assert!(
        abandoned_at.elapsed() < Duration::from_millis(800),
        "setup too slow: the abandoned 1 s lease may have run out before the waiter vanished"
    );
    assert_eq!(
        zcard(&mut admin, &queue).await,
        1,
        "the vanished waiter's member should still be queued"
    );
    let idle_since = Instant::now();

    // Entries expire at most 1 s + 2 s after their last refresh; give it
    // a generous margin, then nothing but the fence may remain.
    let fence_only = vec![fence_key(&name)];
    let clean = eventually(Duration::from_secs(6), || {
        let mut conn = conn.clone();
        let name = name.clone();
        let fence_only = fence_only.clone();
        async move { scan(&mut conn, &lock_pattern(&name)).await == fence_only }
    })
    .await;
    let mut conn = conn.clone();
    let left = scan(&mut conn, &lock_pattern(&name)).await;
    eprintln!("keys left {:?} after idle: {left:?}", idle_since.elapsed());
    assert!(
        clean,
        "hidden state left {:?} after the lock went idle: {left:?}",
        idle_since.elapsed()
    );
    del(&mut conn, &[&fence_key(&name)]).await;
}
