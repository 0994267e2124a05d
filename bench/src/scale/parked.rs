//! Part 1, parked at scale: one process (`scale-waiters`, `waiters.rs`)
//! parks N tasks on N/10 locks that the bench holds under a fixed lease
//! (no renewal traffic), then the bench releases locks one at a time,
//! slowly, and times each wake-up.
//!
//! Per N, in order:
//! 1. the bench's holder client takes the N/10 locks (Redis memory before
//!    and after: memory per held lock, its key and its fence key);
//! 2. the waiter process connects (RSS and `used_memory` read), gets `go`,
//!    spawns its tasks; the bench waits until every task has attempted once
//!    (script calls ≥ N) and the calls have stopped growing for a second;
//! 3. RSS, `used_memory`, the queue members (`ZCARD`), the process's
//!    connections and channels (`CLIENT LIST`, by the ids that were not
//!    there before it started) are read again;
//! 4. a quiet window (`--quiet`): `CONFIG RESETSTAT`, `INFO cpu`, sleep,
//!    `INFO commandstats` and `INFO cpu`: the commands the parked process
//!    sends when nothing is released, and the server's CPU; the same window
//!    was measured once before any waiter existed (the idle line);
//! 5. wake-ups: for up to `--samples` locks in turn, note the time, unlock
//!    it, and wait for the waiter process to print its acquisition; the
//!    latency is that difference (both stamps are the machine clock in µs).
//!    One release at a time, 20 ms apart: each is a lone release among N
//!    parked waiters. N = 100 has only 10 locks, so its run is repeated
//!    (without steps 1–4) until it has the samples.
//!
//! Each waiter that gets a lock keeps it (so N falls by at most
//! `--samples` during step 5); at the end the waiter process exits with
//! its other tasks still parked, and the bench unlocks the rest: those
//! releases find the dead process's queue members (no receiver) and drop
//! them, which the leftover count checks.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use super::server::{Server, now_us, rss_bytes, script_calls};
use crate::fail::{EX_FAILURE, Failure};

/// The holder's fixed lease: longer than any run, so nothing expires and
/// nothing is renewed while the waiters are parked.
const HOLD_LEASE: Duration = Duration::from_secs(900);
/// Tasks spawned at a time in the batched run of each N.
pub const BATCH: u32 = 1_000;
/// Pause between two sampled releases.
const PACE: Duration = Duration::from_millis(20);

/// One N's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParkedRow {
    pub waiters: u32,
    pub locks: u32,
    /// Seconds from `go` until every task had attempted once.
    pub park_secs: f64,
    /// Client RSS delta ÷ waiters, bytes, the tasks spawned all at once.
    pub rss_per_waiter: f64,
    /// The same, the tasks spawned [`BATCH`] at a time (fewer first
    /// attempts in flight at once: what the allocator keeps after the
    /// parking burst is not in it).
    #[serde(default)]
    pub rss_per_waiter_batched: f64,
    /// `used_memory` delta ÷ waiters, bytes.
    pub redis_per_waiter: f64,
    /// Queue members (one per lock and client: the client's queuer).
    pub members: u64,
    /// `MEMORY USAGE` of one lock's queue (a sorted set), bytes.
    pub queue_bytes: u64,
    /// `used_memory` delta per held lock (key + fence key), bytes.
    pub redis_per_lock: f64,
    /// Connections of the waiter process, and how many are pub/sub.
    pub connections: usize,
    pub pubsub_connections: usize,
    /// Channels the waiter process is subscribed to.
    pub channels: u64,
    /// Commands per second in the quiet window, minus the idle window's.
    pub quiet_cmds_per_s: f64,
    /// Script calls (commands on lock keys) in the quiet window.
    pub quiet_script_calls: u64,
    /// The quiet window's commands, `name×calls`.
    pub quiet_breakdown: String,
    /// Redis CPU while parked, and while idle, % of one core.
    pub cpu_parked_pct: f64,
    pub cpu_idle_pct: f64,
    /// Wake-up latencies, ms, in release order.
    pub wake_ms: Vec<f64>,
    /// The waiter process's heap per waiter (a counting allocator in it):
    /// live bytes asked for, ...
    #[serde(default)]
    pub heap_per_waiter: f64,
    /// ... bytes the allocator reserved for them, ...
    #[serde(default)]
    pub heap_usable_per_waiter: f64,
    /// ... and blocks.
    #[serde(default)]
    pub heap_blocks_per_waiter: f64,
    /// The live blocks per waiter by size class: `(class upper bound,
    /// blocks, bytes)`, those with at least 0.05 blocks per waiter.
    #[serde(default)]
    pub heap_classes: Vec<(usize, f64, f64)>,
    /// `size_of` the `lock()` future, the spawned task's future (the
    /// bench's: the `Mutex` handle, the result's sender and the `lock()`
    /// future) and the `Mutex` handle, bytes.
    #[serde(default)]
    pub sizes: (usize, usize, usize),
    /// Each wake-up's parts, ms: the holder's `unlock()` (its round trip,
    /// the PUBLISH in it); from the release until the woken task ran (its
    /// first poll after it: the message's way through the server, the
    /// socket, the hub's dispatch and the runtime's scheduling); from then
    /// until its `lock()` returned (its attempt's round trip).
    #[serde(default)]
    pub wake_parts: Vec<(f64, f64, f64)>,
    /// Keys of this N's locks left after everything was released.
    pub keys_left: u64,
    /// Of those, fence keys (they outlive locks by design).
    pub fence_keys_left: u64,
}

/// The idle window, once per run: Redis CPU % and commands/s with only the
/// bench's holder client connected.
pub struct Idle {
    pub cpu_pct: f64,
    pub calls: Vec<(String, u64)>,
}

/// Measures the idle window, with one idle `redbell::Client` connected
/// (as the holder is during the parked windows).
pub async fn idle(url: &str, srv: &mut Server, quiet: Duration) -> Result<Idle, Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect", &e))?;
    let (calls, cpu) = window(srv, quiet).await?;
    let _ = client.shutdown().await;
    Ok(Idle {
        cpu_pct: cpu / quiet.as_secs_f64() / 1e4,
        calls,
    })
}

/// A quiet window: the calls and the server CPU µs spent in it.
async fn window(srv: &mut Server, d: Duration) -> Result<(Vec<(String, u64)>, f64), Failure> {
    srv.reset_stats().await?;
    let cpu0 = srv.cpu_us().await?;
    tokio::time::sleep(d).await;
    let calls = srv.calls().await?;
    let cpu1 = srv.cpu_us().await?;
    Ok((calls, cpu1 - cpu0))
}

/// Parks `waiters` on `waiters / 10` locks and measures (see the module
/// docs).
pub async fn row(
    url: &str,
    srv: &mut Server,
    run: &str,
    waiters: u32,
    samples: u32,
    quiet: Duration,
    idle: &Idle,
) -> Result<ParkedRow, Failure> {
    let locks = (waiters / 10).max(1);
    let mut row = ParkedRow {
        waiters,
        locks,
        park_secs: 0.0,
        rss_per_waiter: 0.0,
        rss_per_waiter_batched: 0.0,
        redis_per_waiter: 0.0,
        members: 0,
        queue_bytes: 0,
        redis_per_lock: 0.0,
        connections: 0,
        pubsub_connections: 0,
        channels: 0,
        quiet_cmds_per_s: 0.0,
        quiet_script_calls: 0,
        quiet_breakdown: String::new(),
        cpu_parked_pct: 0.0,
        cpu_idle_pct: idle.cpu_pct,
        wake_ms: Vec::new(),
        wake_parts: Vec::new(),
        heap_per_waiter: 0.0,
        heap_usable_per_waiter: 0.0,
        heap_blocks_per_waiter: 0.0,
        heap_classes: Vec::new(),
        sizes: (0, 0, 0),
        keys_left: 0,
        fence_keys_left: 0,
    };
    let reps = samples.div_ceil(locks).clamp(1, 20);
    for rep in 0..reps {
        let base = format!("scale-{run}-p{waiters}-{rep}");
        let measure = rep == 0;
        let take = samples.saturating_sub(row.wake_ms.len() as u32).min(locks);
        one(
            url,
            srv,
            &base,
            locks,
            waiters,
            0,
            take,
            quiet,
            idle,
            measure.then_some(&mut row),
        )
        .await
        .map(|(wakes, parts)| {
            row.wake_ms.extend(wakes);
            row.wake_parts.extend(parts);
        })?;
        let pattern = format!("redbell:{{{base}-*");
        for stray in srv.strays(&pattern, 5).await {
            eprintln!("scale: left after {base}: {stray}");
        }
        row.keys_left += srv.count_keys(&pattern).await?;
        row.fence_keys_left += srv.count_keys(&format!("{pattern}:fence")).await?;
        srv.delete_keys(&pattern).await;
    }
    if waiters > BATCH {
        // Once more, spawned in batches, for the RSS alone.
        let base = format!("scale-{run}-p{waiters}-b");
        let mut scratch = row.clone();
        one(
            url,
            srv,
            &base,
            locks,
            waiters,
            BATCH,
            0,
            quiet_none(),
            idle,
            Some(&mut scratch),
        )
        .await?;
        row.rss_per_waiter_batched = scratch.rss_per_waiter;
        srv.delete_keys(&format!("redbell:{{{base}-*")).await;
    } else {
        row.rss_per_waiter_batched = row.rss_per_waiter;
    }
    Ok(row)
}

/// The batched run's quiet window: none worth waiting for.
fn quiet_none() -> Duration {
    Duration::from_millis(100)
}

#[allow(clippy::too_many_arguments)]
async fn one(
    url: &str,
    srv: &mut Server,
    base: &str,
    locks: u32,
    waiters: u32,
    batch: u32,
    take: u32,
    quiet: Duration,
    idle: &Idle,
    row: Option<&mut ParkedRow>,
) -> Result<Wakes, Failure> {
    let holder = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "holder: cannot connect", &e))?;
    let mem0 = srv.used_memory().await?;
    let mut guards = hold_all(&holder, url, base, locks).await?;
    let mem1 = srv.used_memory().await?;
    let before: Vec<u64> = srv.clients().await?.iter().map(|c| c.id).collect();

    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
    let mut child = tokio::process::Command::new(exe)
        .env("REDIS_URL", url)
        .arg("scale-waiters")
        .args(["--base", base, "--locks", &locks.to_string()])
        .args(["--waiters", &waiters.to_string()])
        .args(["--batch", &batch.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start scale-waiters: {e}")))?;
    let pid = child.id().unwrap_or(0);
    let mut stdin = child.stdin.take().ok_or_else(|| broken("stdin"))?;
    let mut lines = BufReader::new(child.stdout.take().ok_or_else(|| broken("stdout"))?).lines();
    expect(&mut lines, "ready").await?;
    let heap0 = heap(&mut stdin, &mut lines).await?;
    let rss0 = rss_bytes(pid).unwrap_or(0);
    let mem2 = settled_memory(srv).await?;
    srv.reset_stats().await?;
    let started = Instant::now();
    stdin
        .write_all(b"go\n")
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("scale-waiters stdin: {e}")))?;
    expect(&mut lines, "spawned").await?;
    let sizes = next(&mut lines).await?;
    // Parked: every task attempted once, and the attempts have stopped.
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let calls = script_calls(&srv.calls().await?);
        if calls >= u64::from(waiters) && calls == last {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(Failure::new(
                EX_FAILURE,
                format!("{waiters} waiters did not park in 600 s ({calls} attempts)"),
            ));
        }
        last = calls;
    }
    let park_secs = started.elapsed().as_secs_f64();

    if let Some(row) = row {
        row.park_secs = park_secs;
        let rss1 = rss_bytes(pid).unwrap_or(0);
        let heap1 = heap(&mut stdin, &mut lines).await?;
        let mem3 = settled_memory(srv).await?;
        let n = f64::from(waiters);
        row.heap_per_waiter = (heap1.bytes - heap0.bytes) as f64 / n;
        row.heap_usable_per_waiter = (heap1.usable - heap0.usable) as f64 / n;
        row.heap_blocks_per_waiter = (heap1.blocks - heap0.blocks) as f64 / n;
        row.heap_classes = heap1
            .by_size
            .iter()
            .map(|&(class, blocks, bytes)| {
                let (b0, y0) = heap0
                    .by_size
                    .iter()
                    .find(|(c, _, _)| *c == class)
                    .map_or((0, 0), |&(_, b, y)| (b, y));
                (class, (blocks - b0) as f64 / n, (bytes - y0) as f64 / n)
            })
            .filter(|(_, blocks, _)| *blocks >= 0.05)
            .collect();
        let mut s = sizes
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap_or(0));
        row.sizes = (
            s.next().unwrap_or(0),
            s.next().unwrap_or(0),
            s.next().unwrap_or(0),
        );
        row.rss_per_waiter = (rss1 as f64 - rss0 as f64) / n;
        row.redis_per_waiter = (mem3 as f64 - mem2 as f64) / n;
        row.redis_per_lock = (mem1 as f64 - mem0 as f64) / f64::from(locks);
        let queues: Vec<String> = (0..locks)
            .map(|i| format!("redbell:{{{base}-{i}}}:waiters"))
            .collect();
        row.members = srv.zcard_sum(&queues).await?;
        row.queue_bytes = srv.memory_usage(&queues[0]).await?;
        let mine: Vec<_> = srv
            .clients()
            .await?
            .into_iter()
            .filter(|c| !before.contains(&c.id))
            .collect();
        row.connections = mine.len();
        row.pubsub_connections = mine.iter().filter(|c| c.pubsub).count();
        row.channels = mine.iter().map(|c| c.channels).sum();
        let (calls, cpu) = window(srv, quiet).await?;
        let secs = quiet.as_secs_f64();
        let total = |c: &[(String, u64)]| c.iter().map(|(_, n)| *n).sum::<u64>() as f64;
        row.quiet_cmds_per_s = (total(&calls) - total(&idle.calls)) / secs;
        row.quiet_script_calls = script_calls(&calls);
        row.quiet_breakdown = calls
            .iter()
            .map(|(name, n)| format!("{name}×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        row.cpu_parked_pct = cpu / secs / 1e4;
    }

    let mut wakes = Vec::new();
    let mut parts = Vec::new();
    for i in 0..take as usize {
        let Some(guard) = guards.get_mut(i).and_then(Option::take) else {
            continue;
        };
        let released = now_us();
        guard
            .unlock()
            .await
            .map_err(|e| Failure::lock(url, "holder: unlock", &e))?;
        let unlocked = now_us();
        let want = format!("acq {i} ");
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| Failure::new(EX_FAILURE, format!("lock {i}: no waiter woke in 60 s")))?
            .map_err(|e| Failure::new(EX_FAILURE, format!("scale-waiters stdout: {e}")))?
            .unwrap_or_default();
        let stamps: Vec<u64> = line
            .strip_prefix(&want)
            .map(|t| {
                t.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let Some((&at, polls)) = stamps.split_first() else {
            return Err(Failure::new(
                EX_FAILURE,
                format!("expected {want:?}, got {line:?}"),
            ));
        };
        let ms = |us: u64| us as f64 / 1e3;
        // The woken task's first poll after the release.
        let ran = polls
            .iter()
            .copied()
            .filter(|&p| p >= released)
            .min()
            .unwrap_or(at);
        wakes.push(ms(at.saturating_sub(released)));
        parts.push((
            ms(unlocked.saturating_sub(released)),
            ms(ran.saturating_sub(released)),
            ms(at.saturating_sub(ran)),
        ));
        tokio::time::sleep(PACE).await;
    }
    let _ = stdin.write_all(b"exit\n").await;
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    let _ = child.kill().await;
    let mut unlocks = JoinSet::new();
    let mut rest: Vec<_> = guards.into_iter().flatten().collect();
    while !rest.is_empty() {
        let part: Vec<_> = rest.drain(..rest.len().min(1_000)).collect();
        unlocks.spawn(async move {
            for g in part {
                let _ = g.unlock().await;
            }
        });
    }
    while unlocks.join_next().await.is_some() {}
    let _ = holder.shutdown().await;
    // Background releases of cancelled acquires, and the server noticing
    // the waiter process's closed sockets, take a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok((wakes, parts))
}

/// The wake-ups of one run: their latencies, ms, and each one's parts
/// (see [`ParkedRow::wake_parts`]).
type Wakes = (Vec<f64>, Vec<(f64, f64, f64)>);

/// Takes locks `BASE-0 ..` with the holder's fixed lease, 8 at a time.
async fn hold_all(
    holder: &redbell::Client,
    url: &str,
    base: &str,
    locks: u32,
) -> Result<Vec<Option<redbell::MutexGuard>>, Failure> {
    let mut set = JoinSet::new();
    for part in 0..8u32 {
        let mutexes: Vec<_> = (0..locks)
            .filter(|i| i % 8 == part)
            .map(|i| {
                (
                    i,
                    holder.mutex(&format!("{base}-{i}")).with_lease(HOLD_LEASE),
                )
            })
            .collect();
        set.spawn(async move {
            let mut got = Vec::new();
            for (i, m) in mutexes {
                got.push((i, m.try_lock().await));
            }
            got
        });
    }
    let mut guards: Vec<Option<redbell::MutexGuard>> = (0..locks).map(|_| None).collect();
    while let Some(done) = set.join_next().await {
        let done = done.map_err(|e| Failure::new(EX_FAILURE, format!("holder task: {e}")))?;
        for (i, got) in done {
            let guard = got
                .map_err(|e| Failure::lock(url, "holder: try_lock", &e))?
                .ok_or_else(|| Failure::new(EX_FAILURE, format!("lock {i} was not free")))?;
            guards[i as usize] = Some(guard);
        }
    }
    Ok(guards)
}

/// `used_memory`, the median of three reads 200 ms apart: one read can
/// catch a client's query or output buffer in flight.
async fn settled_memory(srv: &mut Server) -> Result<u64, Failure> {
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(srv.used_memory().await?);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    v.sort_unstable();
    Ok(v[1])
}

type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// The waiter process's next line.
async fn next(lines: &mut Lines) -> Result<String, Failure> {
    match tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await {
        Ok(Ok(Some(l))) => Ok(l),
        other => Err(Failure::new(
            EX_FAILURE,
            format!("scale-waiters: expected a line, got {other:?}"),
        )),
    }
}

/// Asks the waiter process for its live heap (before any release: no
/// other line can come first).
async fn heap(
    stdin: &mut tokio::process::ChildStdin,
    lines: &mut Lines,
) -> Result<crate::heap::Snapshot, Failure> {
    stdin
        .write_all(b"heap\n")
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("scale-waiters stdin: {e}")))?;
    let line = next(lines).await?;
    crate::heap::Snapshot::parse(&line).ok_or_else(|| {
        Failure::new(
            EX_FAILURE,
            format!("scale-waiters: expected heap, got {line:?}"),
        )
    })
}

fn broken(what: &str) -> Failure {
    Failure::new(EX_FAILURE, format!("scale-waiters: no {what}"))
}

async fn expect(lines: &mut Lines, want: &str) -> Result<(), Failure> {
    match tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await {
        Ok(Ok(Some(l))) if l == want => Ok(()),
        other => Err(Failure::new(
            EX_FAILURE,
            format!("scale-waiters: expected {want:?}, got {other:?}"),
        )),
    }
}
