//! One rule for every lease (issue 29): a lease below 1 ms, zero, or over
//! `MAX_LEASE` is refused with the same typed error wherever it is given —
//! a handle's `with_lease` (when the handle is used), the builder's
//! `default_lease`, `renew_every` and `max_hold` (at `connect`), a guard's
//! or permit's `extend` (before anything is sent) — and changes nothing on
//! the server.

use std::time::Duration;

use redbell::{Client, Error, MAX_LEASE};
use redbell_integration_tests::{
    LONG, client, exists, fence_key, get, lock_key, pttl, raw, readers_key, redis_url, unique,
};
use redis::aio::MultiplexedConnection;

/// Durations every lease rule refuses.
fn refused() -> [Duration; 5] {
    [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
        MAX_LEASE + Duration::from_secs(1),
        Duration::MAX,
    ]
}

/// `e` is the invalid-lease error for `given`, naming it (not some other
/// duration derived from it) and saying what is wrong with it.
fn assert_refuses(what: &str, given: Duration, e: Error) {
    match e {
        Error::InvalidLease { duration, reason } => {
            assert_eq!(duration, given, "{what}: the error names another duration");
            let why = if given.is_zero() {
                "zero"
            } else if given < Duration::from_millis(1) {
                "1 ms"
            } else {
                "one year"
            };
            assert!(reason.contains(why), "{what} {given:?}: {reason:?}");
        }
        e => panic!("{what} {given:?}: expected InvalidLease, got {e:?}"),
    }
}

/// The score (expiry, server ms) of `member` in the sorted set `key`.
async fn score(conn: &mut MultiplexedConnection, key: &str, member: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap()
}

/// The key's remaining lease in ms (`pttl`), or for a sorted-set hold the
/// member's expiry less the server's time.
async fn remaining(conn: &mut MultiplexedConnection, key: &str, member: Option<&str>) -> i64 {
    let Some(member) = member else {
        return pttl(conn, key).await;
    };
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    let expiry = score(conn, key, member).await.expect("the hold's member");
    expiry as i64 - (secs * 1000 + micros / 1000)
}

/// Calls `extend` on a guard with every refused duration: each is refused
/// with the invalid-lease error, the hold's expiry on the server stays
/// where the 30 s lease put it, and the guard is not lost.
macro_rules! extend_refuses {
    ($what:expr, $guard:expr, $conn:expr, $key:expr, $member:expr) => {{
        let guard = $guard;
        for d in refused() {
            let e = guard.extend(d).await.expect_err("an invalid extend");
            assert_refuses(concat!($what, ".extend"), d, e);
        }
        let left = remaining($conn, $key, $member).await;
        assert!(
            left > 20_000 && left <= 30_000,
            "{}: a refused extend changed the lease on the server: {left} ms",
            $what
        );
        assert!(
            !guard.is_lost(),
            "{}: a refused extend lost the guard",
            $what
        );
        // A valid extend still works.
        guard.extend(LONG).await.expect("a valid extend");
        guard
    }};
}

#[tokio::test]
async fn extend_refuses_invalid_leases_on_every_guard() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;

    let name = unique("ext-mutex");
    let g = c.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let g = extend_refuses!("MutexGuard", g, &mut conn, &lock_key(&name), None);
    g.unlock().await.unwrap();

    let name = unique("ext-fair");
    let g = c.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let g = extend_refuses!("fair MutexGuard", g, &mut conn, &lock_key(&name), None);
    g.unlock().await.unwrap();

    let name = unique("ext-write");
    let g = c.rwlock(&name).with_lease(LONG).write().await.unwrap();
    let g = extend_refuses!("WriteGuard", g, &mut conn, &lock_key(&name), None);
    g.unlock().await.unwrap();

    let name = unique("ext-read");
    let g = c.rwlock(&name).with_lease(LONG).read().await.unwrap();
    let token = g.token().to_owned();
    let g = extend_refuses!("ReadGuard", g, &mut conn, &readers_key(&name), Some(&token));
    g.unlock().await.unwrap();

    let name = unique("ext-permit");
    let p = c
        .semaphore(&name, 2)
        .with_lease(LONG)
        .acquire()
        .await
        .unwrap();
    let token = p.token().to_owned();
    let holders = format!("redbell:{{{name}}}:holders");
    let p = extend_refuses!("Permit", p, &mut conn, &holders, Some(&token));
    p.unlock().await.unwrap();

    // Leadership has no extend: its lease is the client's, renewed.
}

/// `with_lease` on every kind's handle: refused when the handle is used
/// (the handle is built infallibly), by every acquiring call, with the same
/// error; nothing is written.
#[tokio::test]
async fn with_lease_refuses_the_same_on_every_handle() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("with-lease");
    for d in refused() {
        let m = c.mutex(&name).with_lease(d);
        assert_refuses("Mutex::try_lock", d, m.try_lock().await.unwrap_err());
        assert_refuses("Mutex::lock", d, m.lock().await.unwrap_err());
        let f = c.fair_mutex(&name).with_lease(d);
        assert_refuses("FairMutex::try_lock", d, f.try_lock().await.unwrap_err());
        let t = Duration::from_secs(1);
        let e = f.lock_timeout(t).await.unwrap_err();
        assert_refuses("FairMutex::lock_timeout", d, e);
        let rw = c.rwlock(&name).with_lease(d);
        assert_refuses("RwLock::try_read", d, rw.try_read().await.unwrap_err());
        assert_refuses("RwLock::try_write", d, rw.try_write().await.unwrap_err());
        assert_refuses("RwLock::read", d, rw.read().await.unwrap_err());
        let s = c.semaphore(&name, 3).with_lease(d);
        assert_refuses(
            "Semaphore::try_acquire",
            d,
            s.try_acquire().await.unwrap_err(),
        );
        assert_refuses("Semaphore::acquire", d, s.acquire().await.unwrap_err());
        // max_hold on a handle: the same rule, the same error.
        let m = c.mutex(&name).max_hold(d);
        assert_refuses("Mutex::max_hold", d, m.try_lock().await.unwrap_err());
        let s = c.semaphore(&name, 3).max_hold(d);
        assert_refuses("Semaphore::max_hold", d, s.try_acquire().await.unwrap_err());
    }
    assert!(!exists(&mut conn, &lock_key(&name)).await);
    assert!(!exists(&mut conn, &fence_key(&name)).await);
    assert!(!exists(&mut conn, &readers_key(&name)).await);

    // The shortest lease the rule allows is taken as given.
    let g = c
        .mutex(&name)
        .with_lease(Duration::from_millis(1))
        .try_lock()
        .await
        .expect("a 1 ms lease");
    drop(g);
}

/// The builder's lease and its renewal settings: refused at `connect`, with
/// the error naming the duration given (not one derived from it).
#[tokio::test]
async fn builder_refuses_the_same_at_connect() {
    let url = redis_url();
    for d in refused() {
        let e = Client::builder(url.as_str())
            .default_lease(d)
            .connect()
            .await
            .expect_err("an invalid default lease");
        assert_refuses("default_lease", d, e);
        let e = Client::builder(url.as_str())
            .max_hold(d)
            .connect()
            .await
            .expect_err("an invalid max_hold");
        assert_refuses("max_hold", d, e);
        let e = Client::builder(url.as_str())
            .renew_every(d)
            .connect()
            .await
            .expect_err("an invalid renewal period");
        if d < Duration::from_millis(1) {
            assert_refuses("renew_every", d, e);
        } else {
            // Over a year: longer than the lease, the relation refuses it.
            assert!(matches!(e, Error::InvalidLease { .. }), "{e:?}");
        }
    }
    // Valid settings still connect and are used.
    let c = Client::builder(url.as_str())
        .default_lease(Duration::from_millis(900))
        .renew_every(Duration::from_millis(300))
        .connect()
        .await
        .expect("a 900 ms lease renewed every 300 ms");
    let name = unique("builder-min");
    let g = c.mutex(&name).lock().await.unwrap();
    let mut conn = raw(&url).await;
    assert_eq!(
        get(&mut conn, &lock_key(&name)).await.as_deref(),
        Some(g.token())
    );
    g.unlock().await.unwrap();
}
