//! The hidden `bench-worker` subcommand: one OS process running some of a
//! contention scenario's workers.
//!
//! Protocol with the parent (`contend.rs`), over the child's stdin/stdout:
//! the worker connects every client it needs, prints `ready`, waits for a
//! `go` line on stdin, runs its tasks, then prints one JSON [`Record`] per
//! acquisition and exits. Errors go to stderr with a non-zero exit code.
//!
//! Each task loops: note the request time; acquire; `INCR` the scenario's
//! counter (the acquisition's ordinal `k`, since the increment happens under
//! the lock); hold the lock for `--hold` by spinning (a Tokio sleep cannot
//! wait less than a millisecond); unlock; note the time the unlock call
//! returned. The first acquisition with `k > total` is released at once and
//! ends the task. All times are µs since the Unix epoch from `SystemTime`:
//! the processes share one machine clock.
//!
//! The same loop without a lock (no acquire, no unlock) is the bench's
//! *serial floor* (`floor.rs`): one connection, the same counter, hold and
//! timestamps, i.e. what a hand-off would cost with zero lock overhead.

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use super::lock::{Conn, Lock, Strategy, manager};
use crate::fail::{EX_FAILURE, Failure};

/// Options of the hidden `bench-worker` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The lock's name.
    #[arg(long)]
    pub lock: String,
    /// Use the poll baseline with this interval (default: redbell).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "fair")]
    pub poll: Option<Duration>,
    /// Use redbell's fair mutex (default: redbell's plain mutex).
    #[arg(long)]
    pub fair: bool,
    /// Use the rslock crate (default: redbell's plain mutex).
    #[arg(long, conflicts_with_all = ["fair", "poll"])]
    pub rslock: bool,
    /// Use redbell's plain mutex through a Redis Cluster client on these
    /// nodes (comma-separated URLs); `--url` then names the primary that
    /// owns the lock's slot, for the counter.
    #[arg(long, value_name = "NODES", value_delimiter = ',', conflicts_with_all = ["fair", "poll"])]
    pub cluster: Vec<String>,
    /// Number of worker tasks in this process.
    #[arg(long)]
    pub tasks: u32,
    /// Worker id of the first task (ids are global to the scenario).
    #[arg(long)]
    pub first_id: u32,
    /// One client shared by all tasks of this process (default: one each).
    #[arg(long)]
    pub shared_client: bool,
    /// Acquisitions in the whole scenario.
    #[arg(long)]
    pub total: u64,
    /// Time the lock is held per acquisition.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub hold: Duration,
    /// The fixed lease of each acquisition.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// Install a Prometheus recorder (no HTTP server; its upkeep every 5 s,
    /// as the exporter does) for redbell's `metrics` feature; fails in a
    /// build without the feature.
    #[arg(long)]
    pub metrics_recorder: bool,
}

impl WorkerArgs {
    pub fn strategy(&self) -> Strategy {
        if !self.cluster.is_empty() {
            return Strategy::Cluster;
        }
        if self.rslock {
            return Strategy::Rslock;
        }
        match (self.fair, self.poll) {
            (true, _) => Strategy::Fair,
            (false, Some(interval)) => Strategy::Poll(interval),
            (false, None) => Strategy::Redbell,
        }
    }
}

/// One acquisition, as a worker saw it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Record {
    /// Worker id.
    pub w: u32,
    /// Ordinal of the acquisition (from the counter); `> total` for each
    /// worker's last, which found the run over.
    pub k: u64,
    /// µs since the epoch: `lock()` called.
    pub req: u64,
    /// `lock()` returned.
    pub acq: u64,
    /// `unlock()` returned.
    pub rel: u64,
}

/// The scenario's shared counter key.
pub fn counter_key(lock: &str) -> String {
    format!("redbell-bench:{{{lock}}}:count")
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Runs the worker process.
pub async fn run(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    if args.metrics_recorder {
        install_recorder()?;
    }
    let strategy = args.strategy();
    let mut locks = Vec::new();
    let connect = || async {
        if strategy == Strategy::Cluster {
            Conn::cluster(&args.cluster).await
        } else {
            Conn::connect(url, strategy).await
        }
    };
    let shared = if args.shared_client {
        Some(connect().await?)
    } else {
        None
    };
    for _ in 0..args.tasks {
        let conn = match &shared {
            Some(c) => c.clone(),
            None => connect().await?,
        };
        locks.push(conn.lock(strategy, &args.lock, args.lease));
    }
    let counter = manager(url).await?;
    say("ready")?;
    let mut line = String::new();
    tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("reading the start signal: {e}")))?;
    if line.trim() != "go" {
        return Err(Failure::new(EX_FAILURE, "no start signal from the parent"));
    }
    let key = counter_key(&args.lock);
    let tasks: Vec<_> = locks
        .into_iter()
        .enumerate()
        .map(|(i, lock)| {
            let (counter, key) = (counter.clone(), key.clone());
            let id = args.first_id + i as u32;
            tokio::spawn(work(Some(lock), counter, key, id, args.total, args.hold))
        })
        .collect();
    let mut out = String::new();
    for task in tasks {
        let records = task
            .await
            .map_err(|e| Failure::new(EX_FAILURE, format!("worker task panicked: {e}")))??;
        for r in records {
            out.push_str(&serde_json::to_string(&r).expect("plain struct"));
            out.push('\n');
        }
    }
    say(out.trim_end())
}

/// One worker's loop; returns its records. Without a lock it is the serial
/// floor's loop: the same bookkeeping and hold, no acquire and no unlock.
pub async fn work(
    lock: Option<Lock>,
    mut counter: redis::aio::ConnectionManager,
    key: String,
    w: u32,
    total: u64,
    hold: Duration,
) -> Result<Vec<Record>, Failure> {
    let mut records = Vec::new();
    loop {
        let req = now_us();
        let held = match &lock {
            Some(lock) => Some(lock.acquire().await?),
            None => None,
        };
        let acq = now_us();
        let since = Instant::now();
        let k: u64 = redis::cmd("INCR")
            .arg(&key)
            .query_async(&mut counter)
            .await
            .map_err(|e| Failure::new(EX_FAILURE, format!("counter: {e}")))?;
        if k <= total {
            while since.elapsed() < hold {
                std::hint::spin_loop();
            }
        }
        if let (Some(lock), Some(held)) = (&lock, held) {
            lock.release(held).await?;
        }
        let rel = now_us();
        records.push(Record {
            w,
            k,
            req,
            acq,
            rel,
        });
        if k > total {
            return Ok(records);
        }
    }
}

fn say(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(EX_FAILURE, format!("writing to the parent: {e}")))
}

/// Installs the Prometheus recorder the metrics-cost row's "on" side runs
/// with, and its periodic upkeep.
#[cfg(feature = "metrics")]
fn install_recorder() -> Result<(), Failure> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot install the recorder: {e}")))?;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            handle.run_upkeep();
        }
    });
    Ok(())
}

#[cfg(not(feature = "metrics"))]
fn install_recorder() -> Result<(), Failure> {
    Err(Failure::new(
        EX_FAILURE,
        "--metrics-recorder: this bench was built without the `metrics` feature",
    ))
}

/// Whether this executable was built with redbell's `metrics` feature.
pub fn has_metrics() -> bool {
    cfg!(feature = "metrics")
}
