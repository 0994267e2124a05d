//! Scenario 7, **semaphore**: W = 16 workers in this process, each with
//! its own client, share a `client.semaphore(name, 4)`: each loops
//! `acquire()` → hold (`--hold`, spun) → `release()` N times. Reported:
//! acquisitions/s over the whole run, the p50/p99 wait (`acquire()`
//! returning minus called) and the Redis commands per acquisition (round
//! trips = script calls plus SUBSCRIBE/UNSUBSCRIBE; all = with the
//! commands run inside the scripts), counted from `CONFIG RESETSTAT` after
//! a warm-up round to `INFO commandstats` at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Barrier;

use super::stats::Pcts;
use crate::fail::{EX_FAILURE, Failure};

/// What the semaphore scenario measured.
#[derive(Debug, Serialize)]
pub struct SemaphoreRow {
    pub permits: u32,
    pub workers: u32,
    pub acquisitions: u64,
    pub acquisitions_per_s: f64,
    pub wait_us: Pcts,
    /// Script calls and (S)SUBSCRIBE/(S)UNSUBSCRIBE per acquisition.
    pub round_trips_per_acquisition: Option<f64>,
    /// Every command, those inside the scripts included, per acquisition.
    pub commands_per_acquisition: Option<f64>,
}

/// Runs the scenario on the semaphore `name`, N acquisitions per worker.
pub async fn run(
    url: &str,
    name: &str,
    permits: u32,
    workers: u32,
    n: u64,
    hold: Duration,
) -> Result<SemaphoreRow, Failure> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Failure::new(EX_FAILURE, format!("bench semaphore: {what}: {e}"))
    };
    let mut conn = super::contend::bookkeeping(url).await?;
    // Every worker warm (`warm`), then the stats reset, then the start (`go`).
    let warm = Arc::new(Barrier::new(workers as usize + 1));
    let go = Arc::new(Barrier::new(workers as usize + 1));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let client = redbell::Client::connect(url)
            .await
            .map_err(|e| fail("connect", &e))?;
        let (warm, go) = (warm.clone(), go.clone());
        let sem = client.semaphore(name, permits);
        tasks.push(tokio::spawn(async move {
            // Warm-up: scripts loaded, connections and subscription open.
            let warmed = async { sem.acquire().await?.unlock().await };
            let warmed = warmed.await;
            warm.wait().await; // even when it failed, so nobody hangs
            go.wait().await;
            warmed?;
            let mut waits = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let called = Instant::now();
                let permit = sem.acquire().await?;
                waits.push(called.elapsed().as_micros() as i64);
                let spin = Instant::now();
                while spin.elapsed() < hold {
                    std::hint::spin_loop();
                }
                permit.unlock().await?;
            }
            client.shutdown().await?;
            Ok::<_, redbell::Error>(waits)
        }));
    }
    warm.wait().await;
    let reset: Result<String, _> = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await;
    go.wait().await;
    let began = Instant::now();
    let mut waits = Vec::new();
    for t in tasks {
        let w = t
            .await
            .map_err(|e| fail("a worker panicked", &e))?
            .map_err(|e| fail("a worker failed", &e))?;
        waits.extend(w);
    }
    let elapsed = began.elapsed();
    let acquisitions = u64::from(workers) * n;
    let info: Option<String> = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok();
    let counts = info.filter(|_| reset.is_ok()).map(|info| {
        let stats = crate::commandstats::parse(&info);
        let mut all = 0;
        let mut round_trips = 0;
        for (cmd, calls) in &stats {
            if matches!(cmd.as_str(), "info" | "config|resetstat" | "config") {
                continue;
            }
            all += calls;
            if crate::commandstats::SCRIPT_CALLS.contains(&cmd.as_str())
                || cmd.contains("subscribe")
            {
                round_trips += calls;
            }
        }
        (round_trips, all)
    });
    let per = |c: u64| c as f64 / acquisitions.max(1) as f64;
    let _: Result<(), _> = redis::cmd("DEL")
        .arg(
            ["holders", "permits", "queue", "queue:expiry", "fence"]
                .map(|k| format!("redbell:{{{name}}}:{k}"))
                .as_slice(),
        )
        .query_async(&mut conn)
        .await;
    Ok(SemaphoreRow {
        permits,
        workers,
        acquisitions,
        acquisitions_per_s: acquisitions as f64 / elapsed.as_secs_f64().max(1e-9),
        wait_us: Pcts::of(&waits),
        round_trips_per_acquisition: counts.map(|(r, _)| per(r)),
        commands_per_acquisition: counts.map(|(_, a)| per(a)),
    })
}
