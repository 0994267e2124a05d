//! Part 3, many clients: `--clients` processes (`scale-client`,
//! `client.rs`), each a `redbell::Client` with a few tasks that take turns
//! on locks shared with other processes (holders and parked waiters at any
//! time), against one server. Then reconnect storms.
//!
//! In order:
//! 1. the processes start (10 ms apart) and connect; on `go` their tasks
//!    run; after a warm-up the processes' connections are counted from
//!    `CLIENT LIST` (the ids that were not there before), pub/sub ones
//!    (`flags=P`) apart;
//! 2. a calm window, the baseline: from a time `T0`, how long until every
//!    task has acquired its lock once more (each process answers `first
//!    T0`: its tasks' first acquisitions at or after `T0`), and the
//!    server's CPU meanwhile;
//! 3. a storm: `CLIENT KILL TYPE normal`, then (once every task was served
//!    again and a pause) `CLIENT KILL TYPE pubsub`, each of every client
//!    at once, and the same measure from the kill. Meanwhile one
//!    connection of the bench polls `INFO stats` and `INFO cpu` every
//!    millisecond or so: `total_connections_received` over time is when
//!    the reconnects arrived (jittered or in lockstep), the CPU delta is
//!    the server's during the storm, minus what the polling cost
//!    (`INFO commandstats`, `usec` of `info`). The kill is sent on that
//!    connection (`SKIPME yes` spares it); the bench's own connection is
//!    killed with the normal ones and reopened after the window.
//! 4. `exit` to every process; the run's keys are counted and deleted.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;

use super::server::{Server, field, now_us, usec};
use crate::fail::{EX_FAILURE, Failure};

/// How the many-clients row is run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub clients: u32,
    pub tasks: u32,
    /// Distinct lock names; `clients × tasks / names` tasks share one.
    pub names: u32,
    pub hold_ms: u64,
}

/// The row: connections, the calm window and the storms.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientsRow {
    pub clients: u32,
    pub tasks_per_client: u32,
    pub names: u32,
    pub hold_ms: u64,
    /// The processes' connections, all and pub/sub (after the warm-up).
    pub connections: u64,
    pub pubsub_connections: u64,
    /// The same after the storms.
    pub connections_after: u64,
    pub pubsub_connections_after: u64,
    /// The calm window first, then one per storm.
    pub windows: Vec<Window>,
    /// The run's keys left after the processes exited (fence keys apart).
    pub keys_left: u64,
    pub fence_keys_left: u64,
}

/// One window: calm (`kill` empty) or a storm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    /// `""` for the calm window, else the `CLIENT KILL TYPE`.
    pub kill: String,
    /// Connections `CLIENT KILL` closed.
    pub killed: u64,
    /// Tasks, and those not served within the window's limit.
    pub tasks: u64,
    pub unserved: u64,
    /// From `T0` (the kill) to each task's next acquisition, ms.
    pub served_p50_ms: f64,
    pub served_p99_ms: f64,
    pub served_max_ms: f64,
    /// The server's CPU from `T0` until every task was served, µs, the
    /// polling's own cost taken out, and as a share of one core.
    pub cpu_us: f64,
    pub cpu_pct: f64,
    /// Connections accepted in the window, and when (ms after `T0`) the
    /// first, the median and the last of them arrived.
    pub reconnects: u64,
    pub reconnect_first_ms: f64,
    pub reconnect_p50_ms: f64,
    pub reconnect_last_ms: f64,
    /// The most connections seen arriving between two polls, and the
    /// length of that poll interval (ms).
    pub busiest_poll: u64,
    pub busiest_poll_ms: f64,
    /// The poll's median interval, ms (its resolution).
    pub poll_ms: f64,
    /// Errors the processes' `lock()` and `unlock()` returned in the
    /// window (they retry or release in the background).
    pub lock_errors: u64,
    pub unlock_errors: u64,
}

/// One client process.
struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

fn broken(what: &str) -> Failure {
    Failure::new(EX_FAILURE, format!("scale-client: {what}"))
}

impl Proc {
    async fn send(&mut self, line: &str) -> Result<(), Failure> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| broken(&format!("stdin: {e}")))
    }

    async fn line(&mut self) -> Result<String, Failure> {
        match tokio::time::timeout(Duration::from_secs(60), self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            _ => Err(broken("no answer within 60 s")),
        }
    }
}

/// Runs the row.
pub async fn row(
    url: &str,
    srv: &mut Server,
    run: &str,
    plan: Plan,
) -> Result<ClientsRow, Failure> {
    let base = format!("scale-{run}-clients");
    let needed = u64::from(plan.clients) * 4 + 64;
    let maxclients = config_get(url, "maxclients").await?;
    if maxclients < needed {
        config_set(url, "maxclients", needed).await?;
    }
    let before: Vec<u64> = srv.clients().await?.iter().map(|c| c.id).collect();
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
    let mut procs = Vec::new();
    for index in 0..plan.clients {
        let mut child = tokio::process::Command::new(&exe)
            .env("REDIS_URL", url)
            .arg("scale-client")
            .args(["--base", &base, "--index", &index.to_string()])
            .args(["--names", &plan.names.to_string()])
            .args(["--tasks", &plan.tasks.to_string()])
            .args(["--hold-ms", &plan.hold_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start scale-client: {e}")))?;
        let stdin = child.stdin.take().ok_or_else(|| broken("stdin"))?;
        let lines = BufReader::new(child.stdout.take().ok_or_else(|| broken("stdout"))?).lines();
        procs.push(Proc {
            child,
            stdin,
            lines,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for p in &mut procs {
        let line = p.line().await?;
        if line != "ready" {
            return Err(broken(&format!("expected ready, got {line:?}")));
        }
    }
    for p in &mut procs {
        p.send("go").await?;
    }
    // Every task through a few turns: every lock has a holder, its
    // waiters' clients are subscribed.
    tokio::time::sleep(Duration::from_millis(plan.hold_ms * 10).max(Duration::from_secs(3))).await;
    let (connections, pubsub_connections) = census(srv, &before).await?;
    eprintln!("scale: {connections} connections ({pubsub_connections} pub/sub)");
    let mut windows = Vec::new();
    for kill in ["", "normal", "pubsub"] {
        let w = window(url, srv, &mut procs, kill).await?;
        eprintln!("scale:   {w:?}");
        windows.push(w);
        if kill == "normal" {
            *srv = Server::connect(url).await?;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (connections_after, pubsub_connections_after) = census(srv, &before).await?;
    for p in &mut procs {
        let _ = p.send("exit").await;
    }
    for p in &mut procs {
        let _ = tokio::time::timeout(Duration::from_secs(10), p.child.wait()).await;
    }
    drop(procs);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pattern = format!("redbell:{{{base}-*");
    let keys_left = srv.count_keys(&pattern).await?;
    let fence_keys_left = srv.count_keys(&format!("{pattern}:fence")).await?;
    if keys_left > fence_keys_left {
        eprintln!("scale: left behind: {:?}", srv.strays(&pattern, 10).await);
    }
    srv.delete_keys(&pattern).await;
    Ok(ClientsRow {
        clients: plan.clients,
        tasks_per_client: plan.tasks,
        names: plan.names,
        hold_ms: plan.hold_ms,
        connections,
        pubsub_connections,
        connections_after,
        pubsub_connections_after,
        windows,
        keys_left,
        fence_keys_left,
    })
}

/// The processes' connections (ids not in `before`), and the pub/sub ones.
async fn census(srv: &mut Server, before: &[u64]) -> Result<(u64, u64), Failure> {
    let now = srv.clients().await?;
    let ours: Vec<_> = now.iter().filter(|c| !before.contains(&c.id)).collect();
    Ok((
        ours.len() as u64,
        ours.iter().filter(|c| c.pubsub).count() as u64,
    ))
}

/// What the poller saw: `(µs since the epoch, total_connections_received,
/// used CPU µs)` per poll.
type Samples = Vec<(u64, u64, f64)>;

/// One window: the kill (if any), then until every task was served.
async fn window(
    url: &str,
    srv: &mut Server,
    procs: &mut [Proc],
    kill: &str,
) -> Result<Window, Failure> {
    srv.reset_stats().await?;
    let mut conn = open(url).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let first = sample(&mut conn, url).await?;
    let t0 = now_us();
    let killed: u64 = if kill.is_empty() {
        0
    } else {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kill)
            .arg("SKIPME")
            .arg("yes")
            .query_async(&mut conn)
            .await
            .map_err(|e| Failure::redis(url, "CLIENT KILL", &e))?
    };
    let poller = tokio::spawn(poll(conn, url.to_owned(), first, stop_rx));
    let started = Instant::now();
    let limit = Duration::from_secs(60);
    let (served, lock_errors, unlock_errors) = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (served, le, ue) = ask(procs, t0).await?;
        if served.iter().all(|&t| t > 0) || started.elapsed() > limit {
            break (served, le, ue);
        }
    };
    let t1 = now_us();
    let _ = stop_tx.send(true);
    let (mut conn, samples) = poller
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("poller: {e}")))??;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .map_err(|e| Failure::redis(url, "INFO", &e))?;
    let polling_us = usec(&stats, "info");
    // The samples up to the moment every task was served.
    let within: Vec<_> = samples.iter().filter(|s| s.0 <= t1).copied().collect();
    let last = within.last().copied().unwrap_or(samples[0]);
    let span_us = (last.0 - samples[0].0).max(1) as f64;
    let cpu_us = (last.2 - samples[0].2 - polling_us).max(0.0);
    let mut ms: Vec<f64> = served
        .iter()
        .filter(|&&t| t > 0)
        .map(|&t| t.saturating_sub(t0) as f64 / 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let arrivals = arrivals(&within, t0);
    let gaps: Vec<f64> = within
        .windows(2)
        .map(|w| (w[1].0 - w[0].0) as f64 / 1e3)
        .collect();
    let busiest = within
        .windows(2)
        .max_by_key(|w| w[1].1 - w[0].1)
        .map_or((0, 0.0), |w| {
            (w[1].1 - w[0].1, (w[1].0 - w[0].0) as f64 / 1e3)
        });
    Ok(Window {
        kill: kill.to_owned(),
        killed,
        tasks: served.len() as u64,
        unserved: served.iter().filter(|&&t| t == 0).count() as u64,
        served_p50_ms: pct(&ms, 50.0),
        served_p99_ms: pct(&ms, 99.0),
        served_max_ms: ms.last().copied().unwrap_or(0.0),
        cpu_us,
        cpu_pct: cpu_us / span_us * 100.0,
        reconnects: arrivals.len() as u64,
        reconnect_first_ms: arrivals.first().copied().unwrap_or(0.0),
        reconnect_p50_ms: pct(&arrivals, 50.0),
        reconnect_last_ms: arrivals.last().copied().unwrap_or(0.0),
        busiest_poll: busiest.0,
        busiest_poll_ms: busiest.1,
        poll_ms: pct(&gaps, 50.0),
        lock_errors,
        unlock_errors,
    })
}

/// Each connection accepted, as ms after `t0` (at the poll that saw it).
fn arrivals(samples: &[(u64, u64, f64)], t0: u64) -> Vec<f64> {
    let mut out = Vec::new();
    for w in samples.windows(2) {
        let at = w[1].0.saturating_sub(t0) as f64 / 1e3;
        for _ in 0..w[1].1.saturating_sub(w[0].1) {
            out.push(at);
        }
    }
    out
}

/// Every process's tasks' first acquisitions at or after `t0` (0: none),
/// and the processes' lock and unlock errors, summed.
async fn ask(procs: &mut [Proc], t0: u64) -> Result<(Vec<u64>, u64, u64), Failure> {
    let query = format!("first {t0}");
    for p in procs.iter_mut() {
        p.send(&query).await?;
    }
    let (mut served, mut le, mut ue) = (Vec::new(), 0, 0);
    for p in procs.iter_mut() {
        let line = p.line().await?;
        let mut words = line
            .split(' ')
            .skip(1)
            .map(|w| w.parse::<u64>().unwrap_or(0));
        le += words.next().unwrap_or(0);
        ue += words.next().unwrap_or(0);
        served.extend(words);
    }
    Ok((served, le, ue))
}

async fn open(url: &str) -> Result<redis::aio::MultiplexedConnection, Failure> {
    redis::Client::open(url)
        .map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))
}

/// One poll: the time, `total_connections_received` and the CPU used.
async fn sample(
    conn: &mut redis::aio::MultiplexedConnection,
    url: &str,
) -> Result<(u64, u64, f64), Failure> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .arg("cpu")
        .query_async(conn)
        .await
        .map_err(|e| Failure::redis(url, "INFO", &e))?;
    Ok((
        now_us(),
        field(&info, "total_connections_received").unwrap_or(0),
        crate::commandstats::cpu_us(&info),
    ))
}

/// Polls every millisecond (as the loaded machine allows) until stopped.
async fn poll(
    mut conn: redis::aio::MultiplexedConnection,
    url: String,
    first: (u64, u64, f64),
    mut stop: watch::Receiver<bool>,
) -> Result<(redis::aio::MultiplexedConnection, Samples), Failure> {
    let mut samples = vec![first];
    loop {
        samples.push(sample(&mut conn, &url).await?);
        if *stop.borrow_and_update() {
            return Ok((conn, samples));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn config_get(url: &str, key: &str) -> Result<u64, Failure> {
    let mut conn = open(url).await?;
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .map_err(|e| Failure::redis(url, "CONFIG GET", &e))?;
    Ok(pair.get(1).and_then(|v| v.parse().ok()).unwrap_or(0))
}

async fn config_set(url: &str, key: &str, value: u64) -> Result<(), Failure> {
    let mut conn = open(url).await?;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut conn)
        .await
        .map_err(|e| Failure::redis(url, "CONFIG SET", &e))
}

/// The `p`th percentile (nearest rank) of the sorted `v`, 0 when empty.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    #[test]
    fn arrivals_are_timed_at_their_poll() {
        let info =
            "cmdstat_info:calls=3,usec=42,usec_per_call=14\r\ncmdstat_infox:calls=1,usec=9\r\n";
        assert_eq!(super::usec(info, "info"), 42.0);
        let s = [(1_000, 5, 0.0), (2_000, 7, 0.0), (4_000, 8, 0.0)];
        assert_eq!(super::arrivals(&s, 0), vec![2.0, 2.0, 4.0]);
    }
}
