//! Leases that outlive slow work: the renewal task (and when it is woken),
//! the lost-lease signal (a tampered key, a paused server), `extend`, and
//! fixed leases running out. (The renewal task's own life: `lease_renewal.rs`.)
//!
//! Tests that kill connections, pause the server or count commands
//! server-wide run on a [`PrivateRedis`] of their own.

use std::time::Duration;

use redbell::{Error, MutexGuard};
use redbell_integration_tests::{
    LONG, PrivateRedis, client, del, exists, get, gone_within, lock_key, pttl, raw, redis_url,
    renewing_client, set_px, unique, warm_up,
};
use tokio::time::{Instant, sleep, timeout};

// ---------------------------------------------------------------- helpers

use redbell_integration_tests::scenes::lease::*;

/// The margin the library keeps off a lease for clock drift: 1% + 2 ms.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Waits for `guard.lost()` at most `limit`; the instant it resolved.
async fn lost_at(guard: &MutexGuard, limit: Duration, what: &str) -> Instant {
    timeout(limit, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() did not resolve within {limit:?} ({what})"));
    Instant::now()
}

// ------------------------------------------------------ renewal keeps it

/// A 1 s lease renewed every ⅓ s, held for 4 s: still ours the whole time
/// (another client's try_lock fails, the key holds our token), never lost;
/// gone soon after the guard is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_outlives_slow_work() {
    let url = redis_url();
    let name = unique("slow-work");
    let key = lock_key(&name);
    let c = renewing_client(&url, Duration::from_secs(1), Duration::from_millis(333)).await;
    let other = client(&url).await;
    let mut conn = raw(&url).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    let token = guard.token().to_owned();
    let started = Instant::now();
    let mut checks = 0;
    let work = async {
        while started.elapsed() < Duration::from_secs(4) {
            let stolen = other
                .mutex(&name)
                .with_lease(LONG)
                .try_lock()
                .await
                .unwrap();
            assert!(
                stolen.is_none(),
                "another client took the lock {:?} into a renewed 1 s lease",
                started.elapsed()
            );
            assert_eq!(
                get(&mut conn, &key).await.as_deref(),
                Some(token.as_str()),
                "the key does not hold our token {:?} in",
                started.elapsed()
            );
            assert!(!guard.is_lost(), "is_lost() {:?} in", started.elapsed());
            checks += 1;
            sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        () = work => {}
        () = guard.lost() => panic!("lost() resolved {:?} into a healthy renewed lease", started.elapsed()),
    }
    assert!(checks >= 10, "only {checks} checks in 4 s");
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 0 && ttl <= 1000, "pttl {ttl} of a 1 s lease");

    drop(guard);
    let released = gone_within(&conn, &key, Duration::from_secs(2)).await;
    assert!(released, "the key outlived the dropped guard");
    assert!(!exists(&mut conn, &key).await);
}

/// The renewal task is woken by a new lock only when that lock's first
/// renewal falls due before the task's next look at its queue. Both other
/// cases must still renew: a lock taken while the task sleeps until an
/// earlier lock's renewal (released since, so the task wakes to find the
/// later one), and a lock taken once the task has gone idle after renewing
/// (it must be woken then). A 600 ms lease renewed every 200 ms, each lock
/// held 1.5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_without_waking_the_renewal_task_is_renewed() {
    let url = redis_url();
    let c = renewing_client(&url, Duration::from_millis(600), Duration::from_millis(200)).await;
    let other = client(&url).await;
    let first = unique("renew-first");
    c.mutex(&first)
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    sleep(Duration::from_millis(50)).await; // the task sleeps until 200 ms
    let second = unique("renew-asleep");
    let guard = c.mutex(&second).lock().await.unwrap();
    keeps(
        &guard,
        &other,
        &second,
        Duration::from_millis(1500),
        "taken while the task slept",
    )
    .await;
    guard.unlock().await.expect("unlock after 1.5 s");

    sleep(Duration::from_millis(500)).await; // the task has gone idle
    let third = unique("renew-idle");
    let guard = c.mutex(&third).lock().await.unwrap();
    keeps(
        &guard,
        &other,
        &third,
        Duration::from_millis(1500),
        "taken once the task was idle",
    )
    .await;
    guard.unlock().await.expect("unlock after 1.5 s");
}

// ------------------------------------------------------- lost: renewal

/// Lease 3 s renewed every 300 ms, then the key is tampered with from
/// outside: lost() resolves at the next renewal (well before the 3 s local
/// deadline), and a foreign value is left untouched.
async fn tampered_key_is_noticed(overwrite: bool) {
    let url = redis_url();
    let name = unique(if overwrite { "overwritten" } else { "deleted" });
    let key = lock_key(&name);
    let every = Duration::from_millis(300);
    let c = renewing_client(&url, Duration::from_secs(3), every).await;
    let mut conn = raw(&url).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    sleep(Duration::from_millis(450)).await; // past one renewal
    assert!(!guard.is_lost());

    let tampered_at = Instant::now();
    if overwrite {
        set_px(&mut conn, &key, "intruder", 10_000).await;
    } else {
        del(&mut conn, &[&key]).await;
    }
    let at = lost_at(&guard, Duration::from_secs(5), "after tampering").await;
    let took = at - tampered_at;
    eprintln!(
        "{} key: lost() after {took:?} (renewal every {every:?}, lease 3 s)",
        if overwrite { "overwritten" } else { "deleted" }
    );
    assert!(
        took < every + Duration::from_millis(700),
        "lost() took {took:?}: not noticed by the next renewal (every {every:?})"
    );
    assert!(guard.is_lost());

    if overwrite {
        assert_eq!(get(&mut conn, &key).await.as_deref(), Some("intruder"));
        let ttl = pttl(&mut conn, &key).await;
        assert!(
            ttl > 5_000,
            "the foreign key's expiry was touched: pttl {ttl}"
        );
        let r = guard.unlock().await;
        assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
        assert_eq!(get(&mut conn, &key).await.as_deref(), Some("intruder"));
        del(&mut conn, &[&key]).await;
    } else {
        sleep(every * 2).await;
        assert!(
            !exists(&mut conn, &key).await,
            "a lost lease revived the key"
        );
        let r = guard.unlock().await;
        assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    }
}

/// DEL of the key from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_lost_within_a_renewal_period() {
    tampered_key_is_noticed(false).await;
}

/// SET of another value over the key from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_key_is_lost_within_a_renewal_period() {
    tampered_key_is_noticed(true).await;
}

// ------------------------------------------------------- lost: deadline

/// The server pauses (CLIENT PAUSE 3000 ALL) right after a 1 s lease was
/// taken: renewals hang, and lost() resolves by the local deadline
/// (acquire + lease − drift), not later, and long before the pause ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_loses_the_lease_at_the_local_deadline() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("paused");
    let key = lock_key(&name);
    let lease = Duration::from_secs(1);
    let c = renewing_client(&url, lease, lease / 3).await;
    let mut admin = raw(&url).await;
    // Warm up: scripts loaded, connections open.
    warm_up(&c).await;

    let before = Instant::now();
    let guard = c.mutex(&name).lock().await.unwrap();
    let after = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .query_async(&mut admin)
        .await
        .unwrap();
    let paused_at = Instant::now();
    assert!(
        paused_at - before < lease / 3 - Duration::from_millis(50),
        "setup too slow: the pause began {:?} after the acquire, after the first renewal",
        paused_at - before
    );

    let at = lost_at(&guard, Duration::from_secs(5), "server paused").await;
    let earliest = before + lease - drift(lease);
    let latest = after + lease - drift(lease) + Duration::from_millis(300);
    eprintln!(
        "paused server: lost() {:?} after the acquire started (local deadline ~{:?}), {:?} before the pause ends",
        at - before,
        lease - drift(lease),
        (paused_at + Duration::from_secs(3)).saturating_duration_since(at)
    );
    assert!(
        at >= earliest,
        "lost() resolved {:?} before the local deadline",
        earliest - at
    );
    assert!(
        at <= latest,
        "lost() resolved {:?} after the acquire: later than the local deadline (+300 ms)",
        at - before
    );
    assert!(at < paused_at + Duration::from_secs(3));
    assert!(guard.is_lost());

    // Once the pause is over the key has expired, and nothing revives it.
    sleep((paused_at + Duration::from_millis(3200)).saturating_duration_since(Instant::now()))
        .await;
    let mut conn = raw(&url).await;
    let gone = gone_within(&conn, &key, Duration::from_secs(2)).await;
    assert!(gone, "the key outlived a lost lease");
    sleep(Duration::from_millis(700)).await;
    assert!(!exists(&mut conn, &key).await, "the key came back");
    let r = guard.unlock().await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
}

// --------------------------------------------------- no orphan renewals

/// A's lease ran out and B holds the lock: A's extend is NotHeld, marks A's
/// lease lost, and leaves B's key and expiry alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_is_owner_checked_and_reports_the_loss() {
    let url = redis_url();
    let name = unique("extend-owner");
    let key = lock_key(&name);
    let (a, b) = (client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let a_guard = a
        .mutex(&name)
        .with_lease(Duration::from_millis(150))
        .lock()
        .await
        .unwrap();
    let b_guard = timeout(
        Duration::from_secs(5),
        b.mutex(&name).with_lease(Duration::from_secs(20)).lock(),
    )
    .await
    .expect("B never got the expired lock")
    .unwrap();
    let r = a_guard.extend(Duration::from_secs(100)).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert!(
        a_guard.is_lost(),
        "a failed extend must mark the lease lost"
    );
    timeout(Duration::from_millis(100), a_guard.lost())
        .await
        .expect("lost() of a guard whose extend failed did not resolve at once");
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some(b_guard.token()));
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        ttl > 0 && ttl <= 20_000,
        "A's extend touched B's lease: pttl {ttl}"
    );
    assert!(!b_guard.is_lost());
    b_guard.unlock().await.unwrap();
}

/// extend() of a fixed 300 ms lease to 2 s moves its local deadline: not
/// lost at 500 ms, lost at about 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_deadline_of_a_fixed_lease() {
    let url = redis_url();
    let name = unique("extend-fixed");
    let key = lock_key(&name);
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let guard = c
        .mutex(&name)
        .with_lease(Duration::from_millis(300))
        .lock()
        .await
        .unwrap();
    let acquired = Instant::now();
    let extend_sent = Instant::now();
    guard.extend(Duration::from_secs(2)).await.unwrap();
    let extended = Instant::now();
    assert!(
        extended - acquired < Duration::from_millis(250),
        "setup too slow: extend returned {:?} after the acquire",
        extended - acquired
    );

    tokio::select! {
        () = tokio::time::sleep_until(acquired + Duration::from_millis(500)) => {}
        () = guard.lost() => panic!("lost() resolved {:?} after the acquire, despite the extend", acquired.elapsed()),
    }
    assert!(!guard.is_lost());
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 1000, "extend did not reach the key: pttl {ttl}");

    let at = lost_at(&guard, Duration::from_secs(5), "extended fixed lease").await;
    let since = at - extend_sent;
    eprintln!("extended fixed lease: lost() {since:?} after the extend was sent (lease 2 s)");
    assert!(
        since >= Duration::from_secs(2) - drift(Duration::from_secs(2)),
        "lost() at {since:?}, before the extended deadline"
    );
    assert!(
        at <= extended + Duration::from_millis(2300),
        "lost() {since:?} after the extend: later than the extended deadline"
    );
}

// ---------------------------------------------------------- fixed lease

/// A fixed 300 ms lease: lost() resolves when it runs out (250 ms – 1 s),
/// although Redis is healthy; the key expires too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_runs_out() {
    let url = redis_url();
    let name = unique("fixed");
    let key = lock_key(&name);
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let before = Instant::now();
    let guard = c
        .mutex(&name)
        .with_lease(Duration::from_millis(300))
        .lock()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let at = lost_at(&guard, Duration::from_secs(5), "fixed 300 ms lease").await;
    let took = at - before;
    eprintln!("fixed 300 ms lease: lost() after {took:?}");
    assert!(
        took >= Duration::from_millis(250) && took <= Duration::from_secs(1),
        "lost() after {took:?}"
    );
    assert!(guard.is_lost());
    let expired = gone_within(&conn, &key, Duration::from_secs(2)).await;
    assert!(expired, "the key outlived its fixed lease");
    let r = guard.unlock().await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert!(!exists(&mut conn, &key).await);
}
