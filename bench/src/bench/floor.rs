//! The scenarios that run inside the bench process itself: the latency
//! floor, the serial floor of the hand-off loop, uncontended throughput,
//! and crash takeover.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::lock::{Conn, Strategy, manager};
use super::stats::Pcts;
use super::worker::{counter_key, now_us, work};
use crate::fail::{EX_FAILURE, Failure};

/// Round trips on one idle connection, one at a time.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    pub samples: usize,
    /// `PING` on a redis-rs `ConnectionManager` (what redbell uses).
    pub ping_us: Pcts,
    /// `try_lock()` on a free lock: one acquire script call.
    pub acquire_us: Pcts,
    /// `unlock()` with nobody waiting: one release script call.
    pub release_us: Pcts,
}

pub async fn floor(url: &str, name: &str, samples: usize) -> Result<Floor, Failure> {
    let mut conn = manager(url).await?;
    let mut pings = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 {
        let t = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| Failure::redis(url, "PING", &e))?;
        if i >= samples / 10 {
            pings.push(t.elapsed().as_micros() as i64); // after a warm-up tenth
        }
    }
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect to Redis", &e))?;
    let mutex = client.mutex(name).with_lease(Duration::from_secs(5));
    let (mut acquires, mut releases) = (Vec::new(), Vec::new());
    for i in 0..samples + samples / 10 {
        let t = Instant::now();
        let guard = mutex
            .try_lock()
            .await
            .map_err(|e| Failure::lock(url, "try_lock", &e))?
            .ok_or_else(|| Failure::new(EX_FAILURE, "the floor's lock was not free"))?;
        let acquired = t.elapsed();
        let t = Instant::now();
        guard
            .unlock()
            .await
            .map_err(|e| Failure::lock(url, "unlock", &e))?;
        if i >= samples / 10 {
            acquires.push(acquired.as_micros() as i64);
            releases.push(t.elapsed().as_micros() as i64);
        }
    }
    Ok(Floor {
        samples,
        ping_us: Pcts::of(&pings),
        acquire_us: Pcts::of(&acquires),
        release_us: Pcts::of(&releases),
    })
}

/// The serial floor: the hand-off workers' loop with no lock at all, one
/// task on one connection (`worker::work` without a lock: the counter `INCR`
/// inside the hold spun for `--hold`, the timestamps and the record). Its
/// rate is what hand-offs/s would be with zero lock overhead; it is computed
/// like hand-offs/s, `(N - 1)` over the time from the first to the `N`th
/// iteration's "acquisition". A floor is the best the machine can do, so
/// it is measured [`SERIAL_RUNS`] times and the fastest run is kept (the
/// others were slowed by noise: other processes on the machine).
#[derive(Debug, Clone, Serialize)]
pub struct SerialFloor {
    pub n: u64,
    pub hold_us: u64,
    /// The fastest run's rate.
    pub iterations_per_s: f64,
    /// One iteration of the fastest run: start to end.
    pub iteration_us: Pcts,
    /// Every run's rate, in order.
    pub runs_per_s: Vec<f64>,
}

/// Runs of the serial floor; the fastest is kept.
pub const SERIAL_RUNS: usize = 5;

pub async fn serial_floor(
    url: &str,
    name: &str,
    n: u64,
    hold: Duration,
) -> Result<SerialFloor, Failure> {
    let counter = manager(url).await?;
    let n = n.max(2);
    // A warm-up tenth on its own counter, then the measured runs.
    let warm = counter_key(&format!("{name}-warm"));
    work(None, counter.clone(), warm, 0, n / 10, hold).await?;
    let mut best: Option<(f64, Pcts)> = None;
    let mut runs = Vec::with_capacity(SERIAL_RUNS);
    for i in 0..SERIAL_RUNS {
        let key = counter_key(&format!("{name}-{i}"));
        let records = work(None, counter.clone(), key, 0, n, hold).await?;
        let main: Vec<_> = records.iter().filter(|r| r.k <= n).collect();
        let (Some(first), Some(last)) = (main.first(), main.last()) else {
            return Err(Failure::new(
                EX_FAILURE,
                "the serial floor recorded nothing",
            ));
        };
        let span_s = last.acq.saturating_sub(first.acq) as f64 / 1e6;
        let rate = if span_s > 0.0 {
            (main.len() - 1) as f64 / span_s
        } else {
            0.0
        };
        runs.push(rate);
        if best.as_ref().is_none_or(|b| rate > b.0) {
            let iterations: Vec<i64> = main.iter().map(|r| (r.rel - r.req) as i64).collect();
            best = Some((rate, Pcts::of(&iterations)));
        }
    }
    let (rate, iteration_us) = best.unwrap_or_default();
    Ok(SerialFloor {
        n,
        hold_us: hold.as_micros() as u64,
        iterations_per_s: rate,
        iteration_us,
        runs_per_s: runs,
    })
}

/// Uncontended lock+unlock: W workers, each with its own client and its
/// own lock, for each strategy in turn, over several rounds (the median
/// round is reported, so a burst of noise on the shared machine costs one
/// round, not a strategy). Per round: operations/s, and over the same
/// window the Redis commands (`CONFIG RESETSTAT`, `INFO commandstats`) and
/// the Redis CPU time (`INFO cpu`) per operation.
///
/// Run twice: with nothing between lock and unlock, which loads Redis alone
/// (so ops/s is about 1 / its CPU per lock+unlock), and with the hand-off
/// rows' critical section (`INCR` of the worker's own counter, then the
/// hold spun): a lock around some work, as users hold one.
#[derive(Debug, Clone, Serialize)]
pub struct Uncontended {
    pub workers: u32,
    /// The critical section's hold in µs, or `None`: nothing between lock
    /// and unlock (no counter either).
    pub hold_us: Option<u64>,
    /// Length of one round.
    pub seconds: f64,
    pub rounds: u32,
    pub rows: Vec<UncontendedRow>,
}

/// One strategy's uncontended figures.
#[derive(Debug, Clone, Serialize)]
pub struct UncontendedRow {
    pub strategy: String,
    /// lock+unlock pairs per second: the median round.
    pub ops_per_s: f64,
    /// Commands per pair, those inside scripts included: the median round.
    pub commands_per_op: f64,
    /// Round trips (commands the clients sent) per pair: the median round.
    pub round_trips_per_op: f64,
    /// Redis CPU µs per pair: the median round.
    pub cpu_us_per_op: f64,
    /// The bench process's CPU µs per pair (its every thread: the workers'
    /// clients, the runtime, and the spun holds): the median round.
    pub client_cpu_us_per_op: f64,
    /// Every round: (ops/s, commands/op, CPU µs/op).
    pub per_round: Vec<(f64, f64, f64)>,
    /// The last round's commands per pair, by name.
    pub by_command: Vec<(String, f64)>,
}

/// The strategies of the uncontended scenario.
pub const UNCONTENDED: [Strategy; 3] = [
    Strategy::Redbell,
    Strategy::Rslock,
    Strategy::Poll(Duration::from_millis(10)),
];

pub async fn uncontended(
    url: &str,
    run: &str,
    workers: u32,
    length: Duration,
    rounds: u32,
    section: Option<Duration>,
) -> Result<Uncontended, Failure> {
    let mut stats = super::contend::bookkeeping(url).await?;
    let mut locks = Vec::new();
    let tag = if section.is_some() { "work" } else { "free" };
    for strategy in UNCONTENDED {
        let mut mine = Vec::new();
        for i in 0..workers {
            let conn = Conn::connect(url, strategy).await?;
            let name = format!(
                "bench-{run}-{tag}-{}-{i}",
                strategy.label().replace(' ', "-")
            );
            let counter = match section {
                Some(_) => Some((manager(url).await?, counter_key(&name))),
                None => None,
            };
            mine.push((conn.lock(strategy, &name, Duration::from_secs(5)), counter));
        }
        locks.push(mine);
    }
    let r = |e: redis::RedisError| Failure::new(EX_FAILURE, format!("bench bookkeeping: {e}"));
    let mut per: Vec<Vec<Round>> = vec![Vec::new(); UNCONTENDED.len()];
    for _ in 0..rounds {
        for (s, strategy) in UNCONTENDED.iter().enumerate() {
            let (_, cpu): (String, String) = redis::pipe()
                .atomic()
                .cmd("CONFIG")
                .arg("RESETSTAT")
                .cmd("INFO")
                .arg("cpu")
                .query_async(&mut stats)
                .await
                .map_err(r)?;
            let cpu0 = crate::commandstats::cpu_us(&cpu);
            let client0 = process_cpu_us();
            let mine = Arc::new(locks[s].clone());
            let (ops_per_s, ops) = timed(workers, length, move |i| {
                let (lock, counter) = mine[i as usize].clone();
                async move {
                    let held = lock.acquire().await.map_err(|e| e.to_string())?;
                    if let (Some((mut conn, key)), Some(hold)) = (counter, section) {
                        let since = Instant::now();
                        let _: u64 = redis::cmd("INCR")
                            .arg(&key)
                            .query_async(&mut conn)
                            .await
                            .map_err(|e| format!("counter: {e}"))?;
                        while since.elapsed() < hold {
                            std::hint::spin_loop();
                        }
                    }
                    lock.release(held).await.map_err(|e| e.to_string())
                }
            })
            .await?;
            let (info, cpu): (String, String) = redis::pipe()
                .atomic()
                .cmd("INFO")
                .arg("commandstats")
                .cmd("INFO")
                .arg("cpu")
                .query_async(&mut stats)
                .await
                .map_err(r)?;
            let cpu_us = crate::commandstats::cpu_us(&cpu) - cpu0;
            let client_cpu_us = process_cpu_us() - client0;
            let commands = super::stats::Commands::from_stats(
                &crate::commandstats::parse(&info),
                *strategy,
                ops,
            );
            per[s].push(Round {
                ops_per_s,
                ops,
                cpu_us,
                client_cpu_us,
                commands,
            });
        }
    }
    let rows = UNCONTENDED
        .iter()
        .zip(per)
        .map(|(strategy, rounds)| {
            let col = |f: &dyn Fn(&Round) -> f64| {
                let mut v: Vec<f64> = rounds.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2).copied().unwrap_or(0.0)
            };
            let per_op = |r: &Round, n: u64| n as f64 / r.ops.max(1) as f64;
            UncontendedRow {
                strategy: strategy.label(),
                ops_per_s: col(&|r| r.ops_per_s),
                commands_per_op: col(&|r| per_op(r, r.commands.all)),
                round_trips_per_op: col(&|r| per_op(r, r.commands.round_trips)),
                cpu_us_per_op: col(&|r| r.cpu_us / r.ops.max(1) as f64),
                client_cpu_us_per_op: col(&|r| r.client_cpu_us / r.ops.max(1) as f64),
                per_round: rounds
                    .iter()
                    .map(|r| {
                        (
                            r.ops_per_s,
                            per_op(r, r.commands.all),
                            r.cpu_us / r.ops.max(1) as f64,
                        )
                    })
                    .collect(),
                by_command: rounds.last().map_or_else(Vec::new, |r| {
                    r.commands
                        .by_command
                        .iter()
                        .map(|(name, calls)| (name.clone(), per_op(r, *calls)))
                        .collect()
                }),
            }
        })
        .collect();
    Ok(Uncontended {
        workers,
        hold_us: section.map(|h| h.as_micros() as u64),
        seconds: length.as_secs_f64(),
        rounds,
        rows,
    })
}

/// One round of one strategy in the uncontended scenario.
#[derive(Clone)]
struct Round {
    ops_per_s: f64,
    ops: u64,
    cpu_us: f64,
    client_cpu_us: f64,
    commands: super::stats::Commands,
}

/// This process's CPU time so far (user + system, every thread) in µs,
/// from `/proc/self/stat` (clock ticks of 10 ms: fine over a round of
/// tens of thousands of operations); 0 where there is no `/proc`.
fn process_cpu_us() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command name (which is in parentheses and may
    // hold spaces): utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    ticks * 10_000.0
}

/// Runs `tasks` loops of `op(task)` for `length`, then lets every task
/// finish the operation it is in; returns (operations/s, operations).
async fn timed<F, Fut>(tasks: u32, length: Duration, op: F) -> Result<(f64, u64), Failure>
where
    F: Fn(u32) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let joins: Vec<_> = (0..tasks)
        .map(|i| {
            let (stop, done, op) = (stop.clone(), done.clone(), op.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    op(i).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    for j in joins {
        j.await
            .map_err(|e| Failure::new(EX_FAILURE, format!("task panicked: {e}")))?
            .map_err(|e| Failure::new(EX_FAILURE, format!("uncontended loop: {e}")))?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let count = done.load(Ordering::Relaxed);
    Ok((count as f64 / elapsed, count))
}

/// Crash takeover: a holder leaks its guard under a short fixed lease; a
/// waiter (another client) is already waiting when the lease runs out.
#[derive(Debug, Clone, Serialize)]
pub struct Takeover {
    pub strategy: String,
    pub runs: u32,
    pub lease_ms: u64,
    /// p50 and p99 of the time from the lease's expiry to the waiter's
    /// `lock()` returning. The expiry is the midpoint of the holder's
    /// acquire call plus the lease (Redis set the key's PX in between).
    pub takeover_us: Pcts,
    pub max_us: Option<i64>,
    pub samples_us: Vec<i64>,
}

pub async fn takeover(
    url: &str,
    run: &str,
    strategy: Strategy,
    runs: u32,
    lease: Duration,
) -> Result<Takeover, Failure> {
    let holder = Conn::connect(url, strategy).await?;
    let waiter = Conn::connect(url, strategy).await?;
    let tag = strategy.label().replace(' ', "-");
    let mut samples = Vec::new();
    for i in 0..runs {
        let name = format!("bench-{run}-crash-{tag}-{i}");
        let t0 = now_us();
        let leaked = holder.lock(strategy, &name, lease).acquire().await?;
        let t1 = now_us();
        std::mem::forget(leaked); // the holder "crashes": no release, ever
        let expiry = (t0 + t1) / 2 + lease.as_micros() as u64;
        tokio::time::sleep(lease / 4).await;
        let lock = waiter.lock(strategy, &name, Duration::from_secs(5));
        let held = lock.acquire().await?;
        samples.push(now_us() as i64 - expiry as i64);
        lock.release(held).await?;
    }
    Ok(Takeover {
        strategy: strategy.label(),
        runs,
        lease_ms: lease.as_millis() as u64,
        takeover_us: Pcts::of(&samples),
        max_us: samples.iter().copied().max(),
        samples_us: samples,
    })
}
