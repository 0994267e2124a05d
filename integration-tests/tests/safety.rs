//! Safety of the local lease view (issue 16): the guard must never believe
//! it holds a lock that another client can take.
//!
//! - A cancelled shortening `extend` (applied on the server, its reply never
//!   seen) must count locally too.
//!
//! Tests that pause the server run on a [`PrivateRedis`] of their own.

use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{LONG, PrivateRedis, client, raw, redis_url, unique, warm_up};
use tokio::time::{Instant, sleep, sleep_until, timeout};

/// `CLIENT PAUSE ms mode` on `conn`'s server.
async fn pause(conn: &mut redis::aio::MultiplexedConnection, ms: u64, mode: &str) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg(mode)
        .query_async(conn)
        .await
        .expect("CLIENT PAUSE");
}

// ------------------------------------------------- cancelled extend

/// A 60 s fixed lease; the server pauses writes for 300 ms; `extend(1 s)`
/// is sent and dropped after 50 ms (its reply never seen). The server
/// applies the 1 s expiry when the pause ends, so another client can take
/// the lock about 1.3 s later: by then the holder must report the lease
/// lost. Never "not lost" while another client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shortening_extend_never_leaves_two_holders() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("cancelled-extend");
    let holder = client(&url).await;
    let other = client(&url).await;
    warm_up(&holder).await;
    warm_up(&other).await;
    let mut admin = raw(&url).await;
    let guard = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(60))
        .lock()
        .await
        .unwrap();
    // Loads the extend script: an EVALSHA answered NOSCRIPT after the
    // pause would never be retried by the dropped future.
    guard.extend(Duration::from_secs(60)).await.unwrap();

    pause(&mut admin, 300, "WRITE").await;
    let paused_at = Instant::now();
    let extend = timeout(
        Duration::from_millis(50),
        guard.extend(Duration::from_secs(1)),
    )
    .await;
    assert!(
        extend.is_err(),
        "extend answered during a pause: {extend:?}"
    );
    let extend_sent = paused_at;

    sleep_until(paused_at + Duration::from_millis(350)).await;
    let mut taken = None;
    while extend_sent.elapsed() < Duration::from_secs(3) {
        let attempt = other
            .mutex(&name)
            .with_lease(LONG)
            .try_lock()
            .await
            .unwrap();
        if let Some(theirs) = attempt {
            // Another client holds the lock: ours must be known lost.
            let lost = guard.is_lost();
            let at = extend_sent.elapsed();
            eprintln!("another client took the lock {at:?} after the extend; is_lost() = {lost}");
            assert!(
                lost,
                "two holders: another client holds the lock {at:?} after the cancelled \
                 extend(1 s), and our guard still says is_lost() = false"
            );
            taken = Some(theirs);
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    let theirs = taken.expect("the 1 s expiry of the cancelled extend was never applied");
    timeout(Duration::from_millis(100), guard.lost())
        .await
        .expect("lost() did not resolve although is_lost() is true");
    theirs.unlock().await.unwrap();
    let r = guard.unlock().await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
}

// ---------------------------------------------------- renewal period

/// A renewal period at or above `lease − drift(lease)` (1 s − 12 ms) could
/// only ever renew after the local deadline: refused by `connect`. One
/// comfortably inside it is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_period_inside_the_drift_margin_is_refused() {
    let url = redis_url();
    let r = redbell::Client::builder(&url)
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(995))
        .connect()
        .await;
    assert!(
        matches!(r, Err(Error::InvalidLease { .. })),
        "renew_every 995 ms for a 1 s lease: {r:?}"
    );
    let r = redbell::Client::builder(&url)
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(980))
        .connect()
        .await;
    assert!(r.is_ok(), "renew_every 980 ms for a 1 s lease: {r:?}");
}
