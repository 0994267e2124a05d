//! The FairMutex's hand-off: the release grants the lock to the head waiter
//! on a short claim, and the head's own attempt confirms it (sets its full
//! lease) before its `lock()` returns.
//!
//! Each test checks one side of it against a real Redis: one script call of
//! the head's client between the grant and its guard, which then holds the
//! full lease; a grant read after its claim lapsed is not taken; and the
//! grants still send standbys when a waiter parked on an earlier long hold
//! is behind a frozen head. (A holder stalling right after `lock()`:
//! `fair_stall.rs`.)

use std::time::Duration;

use redbell::MutexGuard;
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, Side, client, fifo_key, lock_key, pttl, raw, redis_url,
    spawn_timed, unique, wait_for_members, wait_for_subscribers,
};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

/// Waits until `n` waiters are queued for lock `name` and listen on it.
async fn wait_parked(conn: &MultiplexedConnection, url: &str, name: &str, n: i64) {
    wait_for_members(conn, &fifo_key(name), n, Duration::from_millis(2)).await;
    wait_for_subscribers(url, name, n).await;
}

/// Three waiters queue behind a holder; each release grants the next, whose
/// `lock()` returns only once its own attempt has confirmed the grant: from
/// the release to the guard, MONITOR shows the release and exactly one
/// script call carrying the head's token, and the key then holds the head's
/// full lease, not the 500 ms claim. They are served in arrival order with
/// increasing fences, and no renewal or confirm follows a fixed lease.
///
/// Before (the head returned its guard on the grant message, on the claim,
/// and confirmed it 100 ms later): no call carried the head's token before
/// its guard came back ("script calls from the release to the guard"), and
/// the key had at most 500 ms left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_granted_head_returns_holding_its_full_lease() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-full-lease");
    let mut conn = raw(&url).await;
    let holder = client(&url).await;
    let mut guard = holder
        .fair_mutex(&name)
        .with_lease(LONG)
        .lock()
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let mutex = client(&url).await.fair_mutex(&name).with_lease(LONG);
        tasks.push(spawn_timed(async move { mutex.lock().await }));
        wait_parked(&conn, &url, &name, i + 1).await;
    }
    let monitor = Monitor::start(&url).await;
    let mut fences = vec![guard.fence()];
    for (i, task) in tasks.into_iter().enumerate() {
        let mark = monitor.mark();
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let (returned, next): (Instant, Result<MutexGuard, _>) =
            timeout(PROMPT, task).await.expect("not served").unwrap();
        let next = next.unwrap();
        let left = pttl(&mut conn, &lock_key(&name)).await;
        monitor.sync().await;
        eprintln!(
            "waiter {i} returned {:?} after the release, its key with {left} ms left",
            returned - released_at
        );
        // The waiters behind stand by for the claim plus 100 ms, then attempt.
        assert!(
            returned.elapsed() < Duration::from_millis(500),
            "set-up too slow to tell the standbys' attempts apart"
        );
        let calls = monitor.matching_since(mark, &["evalsha"]);
        let mine = monitor.matching_since(mark, &["evalsha", next.token()]);
        assert!(
            calls.len() == 2 && mine.len() == 1,
            "waiter {i}: script calls from the release to the guard (the release and the \
             head's own attempt expected): {calls:#?}"
        );
        assert!(
            left > 1_000,
            "waiter {i}'s guard came back with {left} ms on its key: the claim, not its lease"
        );
        fences.push(next.fence());
        guard = next;
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences {fences:?}");
    // The last guard, kept: nothing renews or confirms a fixed lease.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!guard.is_lost());
    let calls = monitor.count(&["evalsha", guard.token()]);
    assert_eq!(calls, 1, "the kept guard's script calls: {calls}");
    guard.unlock().await.unwrap();
}

/// The granted head's client is frozen (its runtime stops with its sockets
/// open) past the claim, so the next waiter takes over; when it runs again
/// and reads its grant, the claim is over: it must not return a guard
/// while the other holds; its attempt finds the other's token and queues it
/// again, to wait its turn.
///
/// A grant taken on its message whatever is left of its claim (an earlier
/// shortcut, without its check) returned a guard already past its
/// deadline, beside the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_read_after_its_claim_lapsed_is_not_taken() {
    let url = redis_url();
    let name = unique("fair-stale-grant");
    let conn = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let side = Side::start();
    let a = side.client(&url).await;
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let a_task = side.spawn(async move {
        let g = am.lock().await.expect("A's lock");
        (Instant::now(), g.is_lost(), g)
    });
    wait_parked(&conn, &url, &name, 1).await;
    let bm = b.fair_mutex(&name).with_lease(LONG);
    let b_task = spawn_timed(async move { bm.lock().await });
    wait_parked(&conn, &url, &name, 2).await;

    let frozen = side.freeze().await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap(); // granted to the frozen A
    let (b_in, g) = timeout(Duration::from_secs(5), b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    eprintln!("B in {:?} after the release", b_in - released_at);
    drop(frozen); // A reads its grant now, its claim long over
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !a_task.is_finished(),
        "A returned a guard from a lapsed grant while B holds the lock"
    );
    let b_left = Instant::now();
    g.unlock().await.unwrap();
    let (a_in, a_lost, a_guard) = timeout(PROMPT, a_task)
        .await
        .expect("A was never served after B")
        .unwrap();
    assert!(a_in >= b_left, "A in before B released");
    assert!(!a_lost, "A's guard was lost on arrival");
    a_guard.unlock().await.unwrap();
}

/// Waiters queued behind a long hold park for its whole lease. Once it is
/// released, the lock passes quickly through two short holds (no standbys
/// needed for them), and is then granted to a frozen waiter: the waiter
/// behind it, still parked on the long hold's lease, must be told to stand
/// by, or it sits out that lease on a lock that is free after the claim.
///
/// The shortcut without its marker (grants send standbys only when some
/// queued waiter is known to park longer than a claim; that waiter never
/// marked the queue): the last waiter got the lock only at the end of its
/// 30 s park (the test timed out at 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_head_after_short_holds_does_not_strand_a_waiter_parked_long() {
    let url = redis_url();
    let name = unique("fair-long-then-short");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let guard = holder
        .fair_mutex(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .await
        .unwrap();
    let side = Side::start();
    let frozen_client = side.client(&url).await;
    let mut quick = Vec::new();
    for i in 0..2 {
        let mutex = client(&url).await.fair_mutex(&name).with_lease(LONG);
        quick.push(tokio::spawn(async move {
            mutex
                .lock()
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock")
        }));
        wait_parked(&conn, &url, &name, i + 1).await;
    }
    let fm = frozen_client.fair_mutex(&name).with_lease(LONG);
    let _frozen_task = side.spawn(async move { fm.lock().await.map(std::mem::forget) });
    wait_parked(&conn, &url, &name, 3).await;
    let last = client(&url).await.fair_mutex(&name).with_lease(LONG);
    let last_task = spawn_timed(async move { last.lock().await });
    wait_parked(&conn, &url, &name, 4).await;

    let _frozen = side.freeze().await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (got, g) = timeout(Duration::from_secs(10), last_task)
        .await
        .expect("the last waiter did not get the lock within 10 s of the release")
        .unwrap();
    let waited = got - released_at;
    eprintln!("the last waiter got the lock {waited:?} after the release");
    assert!(
        waited < Duration::from_secs(2),
        "the last waiter got the lock {waited:?} after the release"
    );
    for task in quick {
        timeout(PROMPT, task)
            .await
            .expect("a quick holder hung")
            .unwrap();
    }
    g.unwrap().unlock().await.unwrap();
}
