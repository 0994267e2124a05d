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

/// Uncontended throughput: tasks on distinct locks, one client.
#[derive(Debug, Clone, Serialize)]
pub struct Uncontended {
    pub tasks: u32,
    pub seconds: f64,
    /// redbell `lock()` + `unlock()` pairs per second (two round trips).
    pub redbell_pairs_per_s: f64,
    /// Raw `SET NX PX` + `DEL` pipelined in one round trip, per second.
    pub raw_pairs_per_s: f64,
}

pub async fn uncontended(
    url: &str,
    run: &str,
    tasks: u32,
    length: Duration,
) -> Result<Uncontended, Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect to Redis", &e))?;
    let mutexes: Arc<Vec<redbell::Mutex>> = Arc::new(
        (0..tasks)
            .map(|i| {
                client
                    .mutex(&format!("bench-{run}-free-{i}"))
                    .with_lease(Duration::from_secs(5))
            })
            .collect(),
    );
    let redbell = timed(tasks, length, move |i| {
        let mutex = mutexes[i as usize].clone();
        async move {
            let guard = mutex.lock().await.map_err(|e| e.to_string())?;
            guard.unlock().await.map_err(|e| e.to_string())
        }
    })
    .await?;
    let conn = manager(url).await?;
    let keys: Arc<Vec<String>> = Arc::new(
        (0..tasks)
            .map(|i| format!("redbell-bench:{{{run}-raw-{i}}}"))
            .collect(),
    );
    let raw = timed(tasks, length, move |i| {
        let mut conn = conn.clone();
        let key = keys[i as usize].clone();
        async move {
            redis::pipe()
                .cmd("SET")
                .arg(&key)
                .arg("token")
                .arg("NX")
                .arg("PX")
                .arg(5000)
                .ignore()
                .cmd("DEL")
                .arg(&key)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    Ok(Uncontended {
        tasks,
        seconds: length.as_secs_f64(),
        redbell_pairs_per_s: redbell,
        raw_pairs_per_s: raw,
    })
}

/// Runs `tasks` loops of `op(task)` for `length`; returns operations/s.
async fn timed<F, Fut>(tasks: u32, length: Duration, op: F) -> Result<f64, Failure>
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
    let count = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for j in joins {
        j.await
            .map_err(|e| Failure::new(EX_FAILURE, format!("task panicked: {e}")))?
            .map_err(|e| Failure::new(EX_FAILURE, format!("uncontended loop: {e}")))?;
    }
    Ok(count as f64 / elapsed)
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
