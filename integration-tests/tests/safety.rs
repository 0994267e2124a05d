//! Safety of the local lease view (issue 16): the guard must never believe
//! it holds a lock that another client can take.
//!
//! - A cancelled shortening `extend` (applied on the server, its reply never
//!   seen) must count locally too.
//!
//! Tests that pause the server run on a [`PrivateRedis`] of their own.

use std::future::Future;
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{
    LONG, PrivateRedis, client, exists, gone_within, lock_key, raw, redis_url, unique, warm_up,
};
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
    let r = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(995))
        .connect()
        .await;
    assert!(
        matches!(r, Err(Error::InvalidLease { .. })),
        "renew_every 995 ms for a 1 s lease: {r:?}"
    );
    let r = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(980))
        .connect()
        .await;
    assert!(r.is_ok(), "renew_every 980 ms for a 1 s lease: {r:?}");
}

// ---------------------------------------------------------- max_hold

/// Checks one guard under `max_hold` 1.5 s (lease 1 s renewed every 300 ms,
/// taken at `taken`): still held at 1.2 s (the watchdog ran past the
/// lease), `lost()` between 1.5 s and 3 s, and another client can take the
/// lock shortly after.
async fn runs_out_after_max_hold<L, T, TF>(what: &str, taken: Instant, lost: L, mut take: T)
where
    L: Future<Output = ()>,
    T: FnMut() -> TF,
    TF: Future<Output = bool>,
{
    tokio::pin!(lost);
    tokio::select! {
        () = sleep_until(taken + Duration::from_millis(1200)) => {}
        () = &mut lost => panic!("{what}: lost() {:?} after the acquire, before max_hold", taken.elapsed()),
    }
    assert!(
        !take().await,
        "{what}: another client took the lock at 1.2 s"
    );
    timeout(
        (taken + Duration::from_secs(3)).saturating_duration_since(Instant::now()),
        &mut lost,
    )
    .await
    .unwrap_or_else(|_| {
        panic!("{what}: lost() did not resolve within 3 s of the acquire (max_hold 1.5 s)")
    });
    let at = taken.elapsed();
    eprintln!("{what}: lost() {at:?} after the acquire (max_hold 1.5 s, lease 1 s)");
    assert!(
        at >= Duration::from_millis(1500),
        "{what}: lost() at {at:?}, before max_hold"
    );
    let deadline = Instant::now() + Duration::from_millis(500);
    while !take().await {
        assert!(
            Instant::now() < deadline,
            "{what}: nobody else could take the lock 500 ms after lost()"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// `ClientBuilder::max_hold`: the watchdog stops after 1.5 s, the lease
/// runs out, `lost()` fires, the key is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_max_hold_stops_the_watchdog() {
    let url = redis_url();
    let name = unique("max-hold-client");
    let key = lock_key(&name);
    let c = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(300))
        .max_hold(Duration::from_millis(1500))
        .connect()
        .await
        .unwrap();
    let other = client(&url).await;
    let conn = raw(&url).await;
    let taken = Instant::now();
    let guard = c.mutex(&name).lock().await.unwrap();
    runs_out_after_max_hold("mutex", taken, guard.lost(), || async {
        let mut conn = conn.clone();
        !exists(&mut conn, &key).await
    })
    .await;
    assert!(guard.is_lost());
    assert!(gone_within(&conn, &key, Duration::from_millis(100)).await);
    let r = other
        .mutex(&name)
        .with_lease(LONG)
        .try_lock()
        .await
        .unwrap();
    assert!(r.is_some(), "the key is gone but try_lock failed");
}

/// The per-lock `max_hold` of `Mutex`, `FairMutex` and `RwLock` (read and
/// write), on a client without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_lock_max_hold_stops_the_watchdog() {
    let url = redis_url();
    let c = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let other = client(&url).await;
    let hold = Duration::from_millis(1500);
    let (m, f, r, w) = (
        unique("max-hold-mutex"),
        unique("max-hold-fair"),
        unique("max-hold-read"),
        unique("max-hold-write"),
    );
    let taken = Instant::now();
    let mg = c.mutex(&m).max_hold(hold).lock().await.unwrap();
    let fg = c.fair_mutex(&f).max_hold(hold).lock().await.unwrap();
    let rg = c.rwlock(&r).max_hold(hold).read().await.unwrap();
    let wg = c.rwlock(&w).max_hold(hold).write().await.unwrap();
    let free = |name: String, kind: &'static str| {
        let other = other.clone();
        move || {
            let (other, name) = (other.clone(), name.clone());
            async move {
                let got = match kind {
                    "fair" => other
                        .fair_mutex(&name)
                        .with_lease(LONG)
                        .try_lock()
                        .await
                        .map(|g| g.is_some()),
                    "rw" => other
                        .rwlock(&name)
                        .with_lease(LONG)
                        .try_write()
                        .await
                        .map(|g| g.is_some()),
                    _ => other
                        .mutex(&name)
                        .with_lease(LONG)
                        .try_lock()
                        .await
                        .map(|g| g.is_some()),
                };
                got.unwrap()
            }
        }
    };
    tokio::join!(
        runs_out_after_max_hold("mutex", taken, mg.lost(), free(m.clone(), "mutex")),
        runs_out_after_max_hold("fair mutex", taken, fg.lost(), free(f.clone(), "fair")),
        runs_out_after_max_hold("read", taken, rg.lost(), free(r.clone(), "rw")),
        runs_out_after_max_hold("write", taken, wg.lost(), free(w.clone(), "rw")),
    );
}

/// A zero `max_hold` is a mistake, refused like a zero lease: by `connect`
/// for the client's, by the first call for a lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_max_hold_is_refused() {
    let url = redis_url();
    let r = redbell::Client::builder(url.as_str())
        .max_hold(Duration::ZERO)
        .connect()
        .await;
    assert!(matches!(r, Err(Error::InvalidLease { .. })), "{r:?}");
    let c = client(&url).await;
    let r = c
        .mutex(&unique("zero-hold"))
        .max_hold(Duration::ZERO)
        .try_lock()
        .await;
    assert!(matches!(r, Err(Error::InvalidLease { .. })), "{r:?}");
}
