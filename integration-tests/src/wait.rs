//! Waiting for things to happen, with a bound: polling ([`eventually`]),
//! deadlines ([`promptly`], [`join_within`]), and retrying through a
//! failover ([`recovering`]).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use crate::{exists, raw, subscribers};

/// How long an operation that should answer at once may take before the
/// test calls it hung: 5 s.
pub const PROMPT: Duration = Duration::from_secs(5);

/// Polls `check` every 20 ms until it returns true or `within` has passed;
/// returns its last answer.
pub async fn eventually<F, Fut>(within: Duration, check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_every(within, Duration::from_millis(20), check).await
}

/// Polls `check` every `every` until it returns true or `within` has
/// passed; returns its last answer.
pub async fn eventually_every<F, Fut>(within: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Whether `key` is gone (or goes) within `within`: [`eventually`] not
/// [`exists`]. The caller asserts on the answer.
pub async fn gone_within(conn: &MultiplexedConnection, key: &str, within: Duration) -> bool {
    eventually(within, || {
        let mut conn = conn.clone();
        async move { !exists(&mut conn, key).await }
    })
    .await
}

/// Waits (up to 10 s, checking every `every`) until the sorted set `key`
/// holds at least `n` members: `n` waiters queued.
///
/// # Panics
///
/// When it does not happen within 10 s.
pub async fn wait_for_members(conn: &MultiplexedConnection, key: &str, n: i64, every: Duration) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = conn.clone();
    loop {
        // Scores below 0 are no waiters (a fair queue's long-park marker).
        let have: i64 = redis::cmd("ZCOUNT")
            .arg(key)
            .arg(0)
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .expect("ZCOUNT");
        if have >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {have} of {n} members after 10 s"
        );
        tokio::time::sleep(every).await;
    }
}

/// Awaits `fut` for at most [`PROMPT`].
///
/// # Panics
///
/// When it takes longer: `what` hung.
pub async fn promptly<F: Future>(what: &str, fut: F) -> F::Output {
    timeout(PROMPT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung (no answer within {PROMPT:?})"))
}

/// Awaits `fut`, which must fail within [`PROMPT`]; its error.
///
/// # Panics
///
/// When `what` hung or succeeded.
pub async fn fails_promptly<T: Debug>(
    what: &str,
    fut: impl Future<Output = Result<T, redbell::Error>>,
) -> redbell::Error {
    match promptly(what, fut).await {
        Ok(v) => panic!("{what} succeeded: {v:?}"),
        Err(e) => e,
    }
}

/// Spawns `fut` and notes when it finished: the task's output is
/// `(the instant fut completed, its output)`, for measuring how soon a
/// waiter got in after a release.
pub fn spawn_timed<F>(fut: F) -> JoinHandle<(Instant, F::Output)>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(async move {
        let out = fut.await;
        (Instant::now(), out)
    })
}

/// Waits for every task, for at most `within` in all; their outputs in
/// order.
///
/// # Panics
///
/// With `on_timeout` when they did not all finish within `within`, and
/// when a task panicked.
pub async fn join_within<T>(
    within: Duration,
    tasks: Vec<JoinHandle<T>>,
    on_timeout: &str,
) -> Vec<T> {
    timeout(within, futures_util::future::join_all(tasks))
        .await
        .expect(on_timeout)
        .into_iter()
        .map(|t| t.expect("task panicked"))
        .collect()
}

/// Waits (up to 10 s) until lock `name` has at least `n` subscriptions, i.e.
/// `n` clients are ready to be woken.
///
/// # Panics
///
/// When it does not happen within 10 s.
pub async fn wait_for_subscribers(url: &str, name: &str, n: i64) {
    let conn = raw(url).await;
    let ok = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { subscribers(&mut conn, name).await >= n }
    })
    .await;
    assert!(ok, "lock {name} never had {n} subscribed clients");
}

/// Whether `e` is a connection-level Redis failure worth retrying (what a
/// failover causes for a moment), as opposed to any other error.
pub fn retryable(e: &redbell::Error) -> bool {
    matches!(e, redbell::Error::Redis(_)) && e.is_retryable()
}

/// Calls `f` until it succeeds, for up to `within`: right after a failover
/// a command may fail with a retryable connection error for a moment.
/// Panics on any other error, and when the client has not recovered within
/// `within`. Returns the value and how many failed calls came before it.
pub async fn recovering<T, F, Fut>(what: &str, within: Duration, mut f: F) -> (T, u32)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, redbell::Error>>,
{
    let started = Instant::now();
    let deadline = started + within;
    let mut failed = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = timeout(left, f()).await.unwrap_or_else(|_| {
            panic!("{what}: no answer within {within:?} ({failed} failed calls before)")
        });
        match outcome {
            Ok(v) => return (v, failed),
            Err(e) if retryable(&e) => {
                failed += 1;
                assert!(
                    Instant::now() < deadline,
                    "{what}: the client did not recover within {within:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what}: {e} ({:?} in)", started.elapsed()),
        }
    }
}

/// Awaits `waiter` (a task parked before the release at `released`) and
/// asserts it got the lock within `bound` of that release; its guard.
///
/// # Panics
///
/// When the waiter took `bound` or longer (10 s at most are waited), or
/// failed.
pub async fn got_within<G>(
    waiter: JoinHandle<Result<G, redbell::Error>>,
    released: Instant,
    bound: Duration,
    what: &str,
) -> G {
    let got = timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap_or_else(|_| panic!("{what} did not get the lock within 10 s of the release"))
        .expect("the waiter task")
        .expect("the waiter's lock");
    let waited = released.elapsed();
    assert!(
        waited < bound,
        "{what} got the free lock {waited:?} after the release"
    );
    got
}

/// Waits (up to 10 s) until client `c` has at least `n` waiters parked
/// (its `waiters` gauge): each made its first attempt. A client queues one
/// waiter per lock at a time, so the queue alone does not tell.
///
/// # Panics
///
/// When it does not happen within 10 s.
pub async fn wait_for_parked(c: &redbell::Client, n: i64) {
    let ok = eventually(Duration::from_secs(10), || {
        let c = c.clone();
        async move { c.stats().waiters >= n }
    })
    .await;
    assert!(ok, "{} of {n} waiters parked after 10 s", c.stats().waiters);
}
