//! Contention scenarios (hand-off on one lock, waiter scaling): spawn the
//! worker processes, start them together, measure the Redis commands over a
//! window of hand-offs, collect every acquisition and compute the figures.
//!
//! # Figures (all from the workers' records, one machine clock)
//!
//! - Acquisitions are ordered by `k`, the counter each worker `INCR`s under
//!   the lock; `1..=N` are measured, each worker's last (`k > N`, the run
//!   was over) only ends its wait.
//! - **Hand-off gap**: acquisition `k+1`'s `lock()` returning minus
//!   acquisition `k`'s `unlock()` returning. It can be slightly negative:
//!   the next holder may hear back from Redis before the releaser does.
//! - **Hand-offs/s**: `(N - 1)` over the time from the first to the `N`th
//!   acquisition.
//! - **Hand-overs/s**: the same, counting only hand-offs to a different
//!   worker than the previous holder.
//! - **Busiest share**: the largest number of the `N` acquisitions any one
//!   worker took, over `N` (fair: 1/W).
//! - **Acquire wait**: `lock()` returning minus `lock()` called, for every
//!   call made before the `N`th release, cut off at that release (so a
//!   worker starved until the end still counts, with its wait so far).
//! - **Commands per hand-off**: the parent reads the counter while it runs;
//!   at `N/10` it runs `MULTI; MGET counter; CONFIG RESETSTAT; EXEC`, at
//!   `N` `MULTI; MGET counter; INFO commandstats; EXEC`, and divides the
//!   counts (bookkeeping excluded) by the counter's advance in between.
//!   The warm-up tenth keeps start-up SUBSCRIBEs out of the figure.

use std::process::Stdio;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};

use super::lock::{Strategy, poll_key, rslock_key};
use super::stats::{Commands, Pcts};
use super::worker::{Record, counter_key};
use crate::fail::{EX_FAILURE, Failure};

/// One contention scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `handoff` or `scaling`.
    pub kind: &'static str,
    pub strategy: Strategy,
    /// Worker tasks contending for the lock.
    pub workers: u32,
    /// OS processes they are spread over.
    pub processes: u32,
    /// One client per process (else one per worker).
    pub shared_client: bool,
    /// Measured acquisitions.
    pub n: u64,
    pub hold: Duration,
    pub lease: Duration,
    /// The cluster's node URLs (`Strategy::Cluster` only; else empty).
    pub cluster: Vec<String>,
    /// The workers' executable (default: this one) and whether they
    /// install a metrics recorder: the metrics-cost row (`metrics_cost.rs`).
    pub worker: Worker,
}

/// Which executable the workers run, for the metrics-cost row.
#[derive(Debug, Clone, Default)]
pub struct Worker {
    /// `None`: this executable.
    pub exe: Option<std::path::PathBuf>,
    /// Pass `--metrics-recorder`.
    pub recorder: bool,
}

/// The figures of one scenario, and its raw records.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub kind: &'static str,
    pub strategy: String,
    pub workers: u32,
    pub processes: u32,
    /// Redis clients (redbell `Client`s or poll connections) in all.
    pub clients: u32,
    pub n: u64,
    pub hold_us: u64,
    pub handoffs_per_s: f64,
    /// Hand-offs per second to a *different* worker (a polling loop's
    /// releaser often re-takes the lock itself).
    pub handovers_per_s: f64,
    /// Share of the hand-offs that went to a different worker.
    pub handover_share: f64,
    pub busiest_share: f64,
    pub gap_us: Pcts,
    pub wait_us: Pcts,
    /// The longest wait (a starved worker shows here, not in p99: it
    /// contributes a single sample).
    pub wait_max_us: i64,
    /// The waits of the acquisitions that took the lock from another
    /// worker (the previous acquisition was another's): what a worker
    /// waiting behind someone feels. A polling releaser's re-takes of its
    /// own lock, which wait for nobody, are left out.
    pub handover_wait_us: Pcts,
    pub handover_wait_max_us: i64,
    /// The samples of `handover_wait_us` (µs), in acquisition order.
    pub handover_waits: Vec<i64>,
    /// `unlock()` returned minus `lock()` returned: hold + counter + unlock.
    pub held_us: Pcts,
    pub commands: Option<Commands>,
    pub gaps: Vec<i64>,
    /// Every acquire wait (µs), as in `wait_us`.
    pub waits: Vec<i64>,
    pub records: Vec<Record>,
}

/// Runs one scenario on lock `name`. `url` is the server for the counter
/// and the command counts: for `Strategy::Cluster`, the primary that owns
/// the lock's slot (the counter shares the lock's `{name}` hash tag).
pub async fn run(url: &str, name: &str, s: &Scenario) -> Result<Outcome, Failure> {
    let mut conn = bookkeeping(url).await?;
    cleanup(&mut conn, name).await;
    let result = drive(url, name, s, &mut conn).await;
    cleanup(&mut conn, name).await;
    result
}

async fn drive(
    url: &str,
    name: &str,
    s: &Scenario,
    conn: &mut MultiplexedConnection,
) -> Result<Outcome, Failure> {
    let exe = match &s.worker.exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?,
    };
    let procs = s.processes.clamp(1, s.workers.max(1));
    let mut children = Vec::new();
    let mut first_id = 0;
    for p in 0..procs {
        let tasks = s.workers / procs + u32::from(p < s.workers % procs);
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.env("REDIS_URL", url)
            .arg("bench-worker")
            .args(["--lock", name, "--tasks", &tasks.to_string()])
            .args(["--first-id", &first_id.to_string()])
            .args(["--total", &s.n.to_string()])
            .args(["--hold", &dur(s.hold), "--lease", &dur(s.lease)]);
        match s.strategy {
            Strategy::Poll(interval) => {
                cmd.args(["--poll", &dur(interval)]);
            }
            Strategy::Fair => {
                cmd.arg("--fair");
            }
            Strategy::Cluster => {
                cmd.args(["--cluster", &s.cluster.join(",")]);
            }
            Strategy::Rslock => {
                cmd.arg("--rslock");
            }
            Strategy::Redbell => {}
        }
        if s.shared_client {
            cmd.arg("--shared-client");
        }
        if s.worker.recorder {
            cmd.arg("--metrics-recorder");
        }
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start a worker: {e}")))?;
        children.push(child);
        first_id += tasks;
    }
    // Ready: every process connected all its clients.
    let mut started = Vec::new();
    for mut child in children {
        let stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        if !matches!(ready, Ok(Ok(Some(ref l))) if l == "ready") {
            return Err(Failure::new(EX_FAILURE, "a bench worker did not start"));
        }
        started.push((child, stdin, lines));
    }
    let mut collectors = Vec::new();
    let mut stdins: Vec<ChildStdin> = Vec::new();
    for (child, stdin, lines) in started {
        stdins.push(stdin);
        collectors.push(tokio::spawn(collect(child, lines)));
    }
    for stdin in &mut stdins {
        let _ = stdin.write_all(b"go\n").await;
        let _ = stdin.flush().await;
    }
    drop(stdins);

    let commands = measure(conn, name, s, &collectors).await?;

    let mut records = Vec::new();
    for c in collectors {
        let lines = c
            .await
            .map_err(|e| Failure::new(EX_FAILURE, format!("collector panicked: {e}")))??;
        for line in lines {
            let r: Record = serde_json::from_str(&line).map_err(|e| {
                Failure::new(EX_FAILURE, format!("bad worker record {line:?}: {e}"))
            })?;
            records.push(r);
        }
    }
    analyse(s, records, commands)
}

/// Reads a worker's records until it exits; fails if it failed.
async fn collect(
    mut child: Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Result<Vec<String>, Failure> {
    let mut out = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if !line.is_empty() {
            out.push(line);
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("bench worker: {e}")))?;
    if status.success() {
        Ok(out)
    } else {
        Err(Failure::new(
            EX_FAILURE,
            format!("a bench worker failed ({status})"),
        ))
    }
}

/// Follows the counter; resets the command stats at N/10 and reads them at N.
async fn measure(
    conn: &mut MultiplexedConnection,
    name: &str,
    s: &Scenario,
    collectors: &[tokio::task::JoinHandle<Result<Vec<String>, Failure>>],
) -> Result<Option<Commands>, Failure> {
    let key = counter_key(name);
    let warm = (s.n / 10).max(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut reset_at: Option<u64> = None;
    let mut cpu_at = 0.0;
    let r = |e: redis::RedisError| Failure::new(EX_FAILURE, format!("bench bookkeeping: {e}"));
    loop {
        if collectors.iter().all(|c| c.is_finished()) || tokio::time::Instant::now() > deadline {
            return Ok(None); // workers ended (or failed) before the window closed
        }
        let (count,): (Vec<Option<u64>>,) = redis::pipe()
            .cmd("MGET")
            .arg(&key)
            .query_async(conn)
            .await
            .map_err(r)?;
        let count = count.first().copied().flatten().unwrap_or(0);
        match reset_at {
            None if count >= warm && count < s.n => {
                let (c, _, cpu): (Vec<Option<u64>>, String, String) = redis::pipe()
                    .atomic()
                    .cmd("MGET")
                    .arg(&key)
                    .cmd("CONFIG")
                    .arg("RESETSTAT")
                    .cmd("INFO")
                    .arg("cpu")
                    .query_async(conn)
                    .await
                    .map_err(r)?;
                reset_at = Some(c.first().copied().flatten().unwrap_or(0));
                cpu_at = crate::commandstats::cpu_us(&cpu);
            }
            None if count >= s.n => return Ok(None), // too fast to catch
            Some(a) if count >= s.n => {
                let (c, info, cpu): (Vec<Option<u64>>, String, String) = redis::pipe()
                    .atomic()
                    .cmd("MGET")
                    .arg(&key)
                    .cmd("INFO")
                    .arg("commandstats")
                    .cmd("INFO")
                    .arg("cpu")
                    .query_async(conn)
                    .await
                    .map_err(r)?;
                let b = c.first().copied().flatten().unwrap_or(0);
                let stats = crate::commandstats::parse(&info);
                let mut commands = Commands::from_stats(&stats, s.strategy, b - a);
                commands.cpu_us = (crate::commandstats::cpu_us(&cpu) - cpu_at).max(0.0);
                return Ok(Some(commands));
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn analyse(
    s: &Scenario,
    mut records: Vec<Record>,
    commands: Option<Commands>,
) -> Result<Outcome, Failure> {
    records.sort_by_key(|r| r.k);
    let main: Vec<Record> = records.iter().copied().filter(|r| r.k <= s.n).collect();
    if main.len() as u64 != s.n || main.iter().zip(1..).any(|(r, k)| r.k != k) {
        return Err(Failure::new(
            EX_FAILURE,
            format!(
                "expected acquisitions 1..={}, got {} records",
                s.n,
                main.len()
            ),
        ));
    }
    let (first, last) = (main[0], main[main.len() - 1]);
    let t_end = last.rel;
    let gaps: Vec<i64> = main
        .windows(2)
        .map(|p| p[1].acq as i64 - p[0].rel as i64)
        .collect();
    let waits: Vec<i64> = records
        .iter()
        .filter(|r| r.req < t_end)
        .map(|r| (r.acq.min(t_end) - r.req) as i64)
        .collect();
    let handover_waits: Vec<i64> = main
        .windows(2)
        .filter(|p| p[0].w != p[1].w)
        .map(|p| (p[1].acq - p[1].req) as i64)
        .collect();
    let held: Vec<i64> = main.iter().map(|r| (r.rel - r.acq) as i64).collect();
    let mut per_worker = std::collections::HashMap::new();
    for r in &main {
        *per_worker.entry(r.w).or_insert(0u64) += 1;
    }
    let busiest = per_worker.values().copied().max().unwrap_or(0);
    let switches = main.windows(2).filter(|p| p[0].w != p[1].w).count() as f64;
    let span_s = (last.acq.saturating_sub(first.acq)) as f64 / 1e6;
    let procs = s.processes.clamp(1, s.workers.max(1));
    Ok(Outcome {
        kind: s.kind,
        strategy: s.strategy.label(),
        workers: s.workers,
        processes: procs,
        clients: if s.shared_client { procs } else { s.workers },
        n: s.n,
        hold_us: s.hold.as_micros() as u64,
        handoffs_per_s: if span_s > 0.0 {
            (s.n - 1) as f64 / span_s
        } else {
            0.0
        },
        handovers_per_s: if span_s > 0.0 { switches / span_s } else { 0.0 },
        handover_share: switches / (s.n - 1).max(1) as f64,
        busiest_share: busiest as f64 / s.n as f64,
        gap_us: Pcts::of(&gaps),
        wait_us: Pcts::of(&waits),
        wait_max_us: waits.iter().copied().max().unwrap_or(0),
        handover_wait_us: Pcts::of(&handover_waits),
        handover_wait_max_us: handover_waits.iter().copied().max().unwrap_or(0),
        handover_waits,
        held_us: Pcts::of(&held),
        commands,
        gaps,
        waits,
        records,
    })
}

/// A plain connection for the bench's own bookkeeping.
pub async fn bookkeeping(url: &str) -> Result<MultiplexedConnection, Failure> {
    let client =
        redis::Client::open(url).map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))
}

/// Deletes every key a scenario on lock `name` may leave (best effort).
pub async fn cleanup(conn: &mut MultiplexedConnection, name: &str) {
    let base = format!("redbell:{{{name}}}");
    let keys = [
        counter_key(name),
        poll_key(name),
        rslock_key(name),
        base.clone(),
        format!("{base}:fence"),
        format!("{base}:waiters"),
        format!("{base}:fifo"),
        format!("{base}:fifo:expiry"),
        format!("{base}:handoff"),
    ];
    let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query_async(conn).await;
}

fn dur(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
