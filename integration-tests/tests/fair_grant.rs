//! The FairMutex's hand-off without a round trip: the granted head returns
//! its guard on the grant message, holding the lock on the grant's claim
//! until its first renewal confirms it (or never, if it releases first).
//!
//! Each test checks one side of that shortcut against a real Redis: no
//! command of the head's client between the grant and its guard; the
//! confirm that follows; `lost()` when the confirm finds the lock gone or
//! cannot reach Redis before the claim ends; a grant read after its claim
//! lapsed is not taken; and the grants still send standbys when a waiter
//! parked on an earlier long hold is behind a frozen head.

use std::time::Duration;

use redbell::MutexGuard;
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, Side, client, del, fifo_key, lock_key, pttl, raw,
    redis_url, spawn_timed, unique, wait_for_members, wait_for_subscribers,
};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

/// Waits until `n` waiters are queued for lock `name` and listen on it.
async fn wait_parked(conn: &MultiplexedConnection, url: &str, name: &str, n: i64) {
    wait_for_members(conn, &fifo_key(name), n, Duration::from_millis(2)).await;
    wait_for_subscribers(url, name, n).await;
}

/// Three waiters queue behind a holder; each release grants the next, who
/// returns with no command of its own client in between: the only script
/// call from the release to the guard is the release itself (MONITOR). They
/// are served in arrival order with increasing fences, and a guard kept
/// past the confirm holds the full lease, not the 500 ms claim.
///
/// Before (the head confirmed its grant with an acquire call before
/// returning): each hand-off showed one more EVALSHA, carrying the head's
/// token, before its guard came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_granted_head_returns_without_a_round_trip() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-no-round-trip");
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
        eprintln!(
            "waiter {i} returned {:?} after the release",
            returned - released_at
        );
        monitor.sync().await; // before the confirm, due 100 ms after the grant
        assert!(
            returned.elapsed() < Duration::from_millis(80),
            "set-up too slow to tell the confirm apart"
        );
        let calls = monitor.matching_since(mark, &["evalsha"]);
        let mine = monitor.matching_since(mark, &["evalsha", next.token()]);
        assert!(
            calls.len() == 1 && mine.is_empty(),
            "waiter {i}: script calls from the release to the guard (only the release \
             expected): {calls:#?}"
        );
        fences.push(next.fence());
        guard = next;
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences {fences:?}");
    // The last guard, kept: its confirm turned the claim into the lease.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let left = pttl(&mut conn, &lock_key(&name)).await;
    assert!(
        left > 1_000,
        "a guard held past its confirm still has the claim: pttl {left} ms"
    );
    assert!(!guard.is_lost());
    let confirms = monitor.count(&["evalsha", guard.token()]);
    assert_eq!(confirms, 1, "one confirm of the kept guard: {confirms}");
    guard.unlock().await.unwrap();
}

/// The grant's lock key is deleted between the grant and the confirm (as an
/// operator's DEL, a failover that lost the write, or an eviction would):
/// the confirm finds it gone and `lost()` fires then, well before the claim
/// would have ended. Then Redis stops answering (CLIENT PAUSE) between a
/// grant and its confirm: `lost()` fires when the claim's local deadline
/// passes, unconfirmed.
///
/// Before (the guard came back confirmed, with the full fixed lease, which
/// nothing renews): `lost()` did not fire within a second in either case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_confirm_fires_lost() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-failed-confirm");
    let mut conn = raw(&url).await;
    let (h, a) = (client(&url).await, client(&url).await);
    for pause in [false, true] {
        let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
        let am = a.fair_mutex(&name).with_lease(LONG);
        let a_task = tokio::spawn(async move { am.lock().await });
        wait_parked(&conn, &url, &name, 1).await;
        let mut admin = raw(&url).await;
        guard.unlock().await.unwrap();
        let g = timeout(PROMPT, a_task)
            .await
            .expect("A not served")
            .unwrap()
            .unwrap();
        let got = Instant::now();
        if pause {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(1500)
                .arg("ALL")
                .query_async(&mut admin)
                .await
                .unwrap();
        } else {
            del(&mut conn, &[&lock_key(&name)]).await;
        }
        let lost_within = timeout(Duration::from_secs(1), g.lost()).await;
        let after = got.elapsed();
        eprintln!(
            "{}: lost() {} {after:?} after the guard",
            if pause { "CLIENT PAUSE" } else { "DEL" },
            if lost_within.is_ok() {
                "fired"
            } else {
                "had not fired"
            }
        );
        assert!(lost_within.is_ok(), "lost() did not fire within {after:?}");
        assert!(g.is_lost());
        // DEL: found by the confirm (due 100 ms after the grant); pause:
        // the claim's deadline (just under 500 ms after the grant).
        let bound = Duration::from_millis(if pause { 700 } else { 300 });
        assert!(after < bound, "lost() fired {after:?} after the guard");
        if pause {
            tokio::time::sleep(Duration::from_millis(1200)).await; // the pause ends
        }
        let _ = timeout(PROMPT, g.unlock()).await.expect("unlock hung");
    }
}

/// The granted head's client is frozen (its runtime stops with its sockets
/// open) past the claim, so the next waiter takes over; when it runs again
/// and reads its grant, the claim is over: it must not return a guard
/// while the other holds, but attempt and wait its turn again.
///
/// The shortcut without its check (a grant taken whatever is left of its
/// claim) returns a guard already past its deadline, beside the holder.
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
