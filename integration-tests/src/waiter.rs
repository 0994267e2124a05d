//! Waiters that contend for a lock through a failover: each retries the
//! retryable errors a failover causes, checks that nobody else is inside,
//! and reports when it got in and what went wrong on the way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::retryable;

/// What a [`spawn_waiter`] task reports.
#[derive(Debug)]
pub struct WaiterReport {
    /// When `lock()` returned the guard.
    pub at: Instant,
    /// The guard's fence.
    pub fence: u64,
    /// Retryable errors from `lock()`, and from `unlock()` (prefixed
    /// `unlock: `), with when they came, before it got through.
    pub errors: Vec<(Instant, String)>,
}

/// A task that waits for `mutex` (retrying retryable errors every 50 ms),
/// asserts that nobody else counted in `inside` is inside, holds the lock
/// 50 ms and unlocks (a retryable unlock error is reported, not retried).
/// Any other error panics the task, naming `label`.
pub fn spawn_waiter(
    label: String,
    mutex: redbell::Mutex,
    inside: Arc<AtomicUsize>,
) -> JoinHandle<WaiterReport> {
    tokio::spawn(async move {
        let mut errors = Vec::new();
        let guard = loop {
            match mutex.lock().await {
                Ok(g) => break g,
                Err(e) if retryable(&e) => {
                    errors.push((Instant::now(), e.to_string()));
                    sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{label}: {e}"),
            }
        };
        let at = Instant::now();
        assert_eq!(
            inside.fetch_add(1, Ordering::SeqCst),
            0,
            "{label} got the lock while another holder was inside"
        );
        sleep(Duration::from_millis(50)).await;
        inside.fetch_sub(1, Ordering::SeqCst);
        let fence = guard.fence();
        match guard.unlock().await {
            Ok(()) => {}
            Err(e) if retryable(&e) => errors.push((Instant::now(), format!("unlock: {e}"))),
            Err(e) => panic!("{label}'s unlock: {e}"),
        }
        WaiterReport { at, fence, errors }
    })
}

/// A task that waits for lock `name` on `client` (retrying retryable
/// errors every 50 ms) and unlocks it at once; when it got the lock. Any
/// other error panics the task.
pub fn spawn_passing_waiter(client: &redbell::Client, name: &str) -> JoinHandle<Instant> {
    let mutex = client.mutex(name);
    let name = name.to_owned();
    tokio::spawn(async move {
        let guard = loop {
            match mutex.lock().await {
                Ok(g) => break g,
                Err(e) if retryable(&e) => sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("waiter for {name}: {e}"),
            }
        };
        let at = Instant::now();
        let _ = guard.unlock().await;
        at
    })
}

/// Waits (up to `within` in all) for every waiter task; their reports, in
/// order.
///
/// # Panics
///
/// When a waiter panicked or did not get the lock in time.
pub async fn join_waiters(
    waiters: Vec<JoinHandle<WaiterReport>>,
    within: Duration,
) -> Vec<WaiterReport> {
    try_join_waiters(waiters, within)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits (up to `within` in all) for every waiter task; their reports, in
/// order, or what went wrong (the tasks left are aborted then).
pub async fn try_join_waiters(
    mut waiters: Vec<JoinHandle<WaiterReport>>,
    within: Duration,
) -> Result<Vec<WaiterReport>, String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut failure = None;
    for (i, w) in waiters.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, w).await {
            Ok(Ok(g)) => got.push(g),
            Ok(Err(e)) => failure = Some(format!("waiter {i}: {e}")),
            Err(_) => {
                failure = Some(format!(
                    "waiter {i} did not get the lock within {within:?} ({} others did)",
                    got.len()
                ));
            }
        }
        if failure.is_some() {
            break;
        }
    }
    match failure {
        None => Ok(got),
        Some(e) => {
            for w in &waiters {
                w.abort();
            }
            Err(e)
        }
    }
}

/// (first, last) of the waiters' acquisition times after `since`.
pub fn spread(got: &[WaiterReport], since: Instant) -> (Duration, Duration) {
    let times = got.iter().map(|g| g.at.saturating_duration_since(since));
    (times.clone().min().unwrap(), times.max().unwrap())
}

/// All retryable errors the waiters saw, as times after `since`, sorted.
pub fn waiter_errors(got: &[WaiterReport], since: Instant) -> Vec<(Duration, String)> {
    let mut errors: Vec<(Duration, String)> = got
        .iter()
        .flat_map(|g| &g.errors)
        .map(|(at, e)| (at.saturating_duration_since(since), e.clone()))
        .collect();
    errors.sort();
    errors
}
