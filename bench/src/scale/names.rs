//! Part 2, cost flat in the number of locks: the same operations spread
//! over K distinct names (K = 1, 100, 10,000, 100,000), the server's CPU
//! and commands per operation.
//!
//! - **Uncontended**: one task, one client, sequential `lock()` +
//!   `unlock()` on name `i % K`. One task, so every K runs at the same
//!   concurrency (eight tasks cannot share one name without contending).
//! - **Contended**: two tasks on two clients meet at a barrier on name
//!   `step % K`, both call `lock()`, each takes the lock twice (hold
//!   100 µs, spun), then they move on together: every name sees the same
//!   two-way contention whatever K is, and the loser of each race queues
//!   (its client subscribes to that lock's wake channel unless it still
//!   is, from a previous step within the 2 s linger: with K = 1 always,
//!   with K ≥ 100 never).
//!
//! Before each run the K names' fence keys are set, as earlier locks of
//! those names would have left them (they live for the fence TTL): the
//! server holds the keyspace of K names even when the run takes fewer
//! locks than K, and no lock in the run is the first of its name.
//!
//! Measured per run: `CONFIG RESETSTAT`, `INFO cpu`, the operations,
//! `INFO commandstats`, `INFO cpu`. After it, the run's keys are counted
//! (`SCAN`): lock keys and queues must be gone; fence keys stay by design
//! (each expires after the fence TTL, 7 days by default, so one-off names
//! do not leak forever), one per name used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;

use super::callgrind;
use super::server::{Server, script_calls};
use crate::fail::{EX_FAILURE, Failure};

/// One (kind, K) run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NamesRow {
    pub contended: bool,
    pub names: u32,
    /// Acquisitions.
    pub ops: u64,
    pub ops_per_s: f64,
    /// Redis CPU µs per acquisition.
    pub cpu_us_per_op: f64,
    /// Every command per acquisition (those inside scripts included), and
    /// the script calls among them.
    pub cmds_per_op: f64,
    pub scripts_per_op: f64,
    /// (P|S)SUBSCRIBE and UNSUBSCRIBE per acquisition.
    pub subs_per_op: f64,
    /// The run's keys left after it, and the fence keys among them.
    pub keys_left: u64,
    pub fence_keys_left: u64,
    /// Under Callgrind (the counted part only): the server's instructions
    /// and simulated last-level cache misses per acquisition.
    #[serde(default)]
    pub counted: Option<[f64; 2]>,
}

/// Runs one (kind, K).
pub async fn row(
    url: &str,
    srv: &mut Server,
    run: &str,
    contended: bool,
    names: u32,
    ops: u64,
) -> Result<NamesRow, Failure> {
    let base = format!("scale-{run}-{}{names}", if contended { 'c' } else { 'u' });
    let connect = || async {
        redbell::Client::connect(url)
            .await
            .map_err(|e| Failure::lock(url, "cannot connect", &e))
    };
    srv.prefill_fences(&base, names).await?;
    let a = connect().await?;
    let b = connect().await?;
    srv.reset_stats().await?;
    let cpu0 = srv.cpu_us().await?;
    let _ = callgrind::take(srv).await;
    let started = Instant::now();
    let done = if contended {
        contend(url, &a, &b, &base, names, ops).await?
    } else {
        uncontended(url, &a, &base, names, ops).await?
    };
    let secs = started.elapsed().as_secs_f64();
    let counts = callgrind::take(srv).await;
    let calls = srv.calls().await?;
    let cpu1 = srv.cpu_us().await?;
    let _ = a.shutdown().await;
    let _ = b.shutdown().await;
    let n = done as f64;
    let total: u64 = calls.iter().map(|(_, c)| c).sum();
    let subs: u64 = calls
        .iter()
        .filter(|(name, _)| name.ends_with("subscribe"))
        .map(|(_, c)| c)
        .sum();
    // Lock keys and queues go with the last unlock; give a lingering
    // subscription and a background release a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pattern = format!("redbell:{{{base}-*");
    let keys_left = srv.count_keys(&pattern).await?;
    let fence_keys_left = srv.count_keys(&format!("{pattern}:fence")).await?;
    srv.delete_keys(&pattern).await;
    Ok(NamesRow {
        contended,
        names,
        ops: done,
        ops_per_s: n / secs,
        cpu_us_per_op: (cpu1 - cpu0) / n,
        cmds_per_op: total as f64 / n,
        scripts_per_op: script_calls(&calls) as f64 / n,
        subs_per_op: subs as f64 / n,
        keys_left,
        fence_keys_left,
        counted: counts.map(|c| c.per_op(done)),
    })
}

pub(super) async fn uncontended(
    url: &str,
    client: &redbell::Client,
    base: &str,
    names: u32,
    ops: u64,
) -> Result<u64, Failure> {
    let names = u64::from(names.max(1));
    for i in 0..ops {
        let guard = client
            .mutex(&format!("{base}-{}", i % names))
            .lock()
            .await
            .map_err(|e| Failure::lock(url, "lock", &e))?;
        guard
            .unlock()
            .await
            .map_err(|e| Failure::lock(url, "unlock", &e))?;
    }
    Ok(ops)
}

/// Acquisitions per task and name step.
const TURNS: u64 = 2;

/// Acquisitions per name index of a run of `ops` over `names` names, as
/// [`uncontended`] and [`contend`] make them.
pub(super) fn acquisitions(contended: bool, names: u32, ops: u64) -> Vec<u64> {
    let k = u64::from(names.max(1));
    let mut out = vec![0; k as usize];
    if contended {
        for step in 0..ops.div_ceil(2 * TURNS).max(1) {
            out[(step % k) as usize] += 2 * TURNS;
        }
    } else {
        for i in 0..ops {
            out[(i % k) as usize] += 1;
        }
    }
    out
}

pub(super) async fn contend(
    url: &str,
    a: &redbell::Client,
    b: &redbell::Client,
    base: &str,
    names: u32,
    ops: u64,
) -> Result<u64, Failure> {
    let steps = ops.div_ceil(2 * TURNS).max(1);
    let barrier = Arc::new(Barrier::new(2));
    let task = |client: redbell::Client| {
        let barrier = barrier.clone();
        let base = base.to_owned();
        let url = url.to_owned();
        async move {
            let names = u64::from(names.max(1));
            for step in 0..steps {
                let mutex = client.mutex(&format!("{base}-{}", step % names));
                barrier.wait().await;
                for _ in 0..TURNS {
                    let guard = mutex
                        .lock()
                        .await
                        .map_err(|e| Failure::lock(&url, "lock", &e))?;
                    let held = Instant::now();
                    while held.elapsed() < Duration::from_micros(100) {
                        std::hint::spin_loop();
                    }
                    guard
                        .unlock()
                        .await
                        .map_err(|e| Failure::lock(&url, "unlock", &e))?;
                }
            }
            Ok::<u64, Failure>(steps * TURNS)
        }
    };
    let (x, y) = tokio::join!(tokio::spawn(task(a.clone())), tokio::spawn(task(b.clone())));
    let join = |r: Result<Result<u64, Failure>, tokio::task::JoinError>| {
        r.map_err(|e| Failure::new(EX_FAILURE, format!("contended task: {e}")))?
    };
    Ok(join(x)? + join(y)?)
}
