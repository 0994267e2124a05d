//! `redbell-bench soak` (`make soak`): library workers in separate OS
//! processes contend for a few locks while a seeded schedule injects faults
//! into them and into Redis; at the end a checker over the workers' logs
//! proves the bounds held, or names the seed and the first offending
//! interval.
//!
//! # A run
//!
//! 1. The seed (`--seed` / `SOAK_SEED`, random by default) is printed first:
//!    passing it again replays the same fault schedule (`plan.rs`).
//! 2. Three workers of each kind (`Mutex`, `FairMutex`, `RwLock` writers,
//!    `RwLock` readers on the writers' lock), four on a `Semaphore` of two
//!    permits, a pool of six `Mutex` tasks in one process on the `Mutex`
//!    workers' lock, two Python workers on each of the `Mutex` and
//!    `FairMutex` locks (the Python package, `python.rs`; skipped with a
//!    message when its venv is missing), and two `redbell run` workers (`runner.rs`) start as
//!    copies of this executable (`soak-worker`, `worker.rs`), one lock per
//!    kind, named after the run (`soak-RUN-KIND`), with a 1.5 s lease
//!    renewed by the library (response timeout 2 s, the default). A
//!    `redbell run` worker's command runs 3 s, long past the lease, and
//!    appends to its lock's unfenced log as it runs: two commands whose
//!    lines interleave ran at once, a violation whatever the fault (but a
//!    server's losing the grant). Each critical section writes the guard's fence to a
//!    fence-checked store (a Lua script on the key `soak:{LOCK}:store`) on
//!    entry, holds a few ms, and writes again on the way out (where a
//!    holder paused past its lease must be rejected). Readers and permit
//!    holders do not write: they hold alongside others, and a store that
//!    keeps the highest fence would reject a permit holder of a lower
//!    fence that is still within its rights (`plan.rs`,
//!    [`WorkerKind::writes`]).
//! 3. Every 1–2 s one fault (`faults.rs`, `topology.rs`): SIGKILL a worker
//!    (a new one replaces it; or a `redbell run` worker), SIGSTOP one past
//!    its lease then SIGCONT (or a *woken waiter*: one waiting on a lock
//!    whose holder just let go), partition a worker or half-open its
//!    connections (each worker reaches Redis through a proxy of the soak's,
//!    the kit's `Proxy`), `CLIENT KILL TYPE normal`, `CLIENT KILL TYPE pubsub`,
//!    `CLIENT PAUSE 300 ALL`; a black hole of every connection of a worker
//!    (silent for good, new connections work; it must get a lock again
//!    within 2 × response timeout + 1 s, + the lease and 1 s), SIGSTOP of
//!    the pool while all its tasks wait, or of three workers together
//!    while each waits on one lock ahead of another (a frozen host; the
//!    others keep the 1 s free-wait bound either way), SIGSTOP of a `redbell run` alone while its command runs (the
//!    command must not outlive the lease), SIGSTOP of a command then
//!    SIGTERM to its `redbell run`, as `timeout` sends (it must end and free
//!    the lock within --kill-grace + 2 s): the faults of the review after
//!    the first soak passed (shared pitfalls), in `faults.rs`, judged in
//!    `checker/run.rs`; every 8 s at most, a fault of the servers
//!    instead: on `single` (the soak's own redis-server with AOF
//!    `everysec`, the kit's `Server`) a SIGKILL and restart; on `sentinel`
//!    `SENTINEL FAILOVER`, the same with one of the three sentinels frozen
//!    (SIGSTOP for 3 s: clients must not wait for it while the old primary
//!    still grants), or a SIGKILL of the primary; on `cluster` `CLUSTER
//!    FAILOVER` of a lock's shard, the same 150 ms after a `CLIENT KILL
//!    TYPE pubsub` there, or a migration of a lock's slot (`topology.rs`). Each is printed with its time. The proxy faults
//!    need one server's URL: `single` only.
//!    `SOAK_FAULTS=black_hole` (a comma-separated list of the names in
//!    report.json) runs only those faults, `SOAK_KINDS` only those
//!    workers: with a seed, the replay of one fault. With only server
//!    faults, one comes every 1–2 s; a cluster failover that would ask a
//!    replica again within 9 s is skipped (`topology/cluster.rs`).
//! 4. After `--secs` the workers are told to stop (a stop file) and given
//!    time; once the leases and the waiter-queue entries (2 s grace) have
//!    run out, the lock keys left in Redis are counted (`SCAN` of every
//!    key under the run's lock names, `redbell:{soak-RUN-*`; the fence
//!    counters, which outlive locks by design, and the store keys are
//!    deleted).
//! 5. The checker (`checker.rs`) reads the logs; `report.rs` prints the
//!    table and writes `report.json` under `--out`. Exit 1 if a bound broke.
//!
//! # Not covered yet
//!
//! Network faults on `sentinel` and `cluster` (a proxy per node, with the
//! addresses the nodes announce rewritten); sentinels partitioned or
//! killed (only a frozen one is); two faults at once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::fail::{EX_FAILURE, Failure};

mod checker;
mod clock;
mod fault_kind;
mod faults;
mod plan;
mod python;
mod report;
mod runner;
mod stalls;
mod topology;
mod worker;
mod worker_io;

pub use runner::{StoreArgs, store};
pub use worker_io::WorkerArgs;

use faults::Pool;
use plan::{LEASE, WorkerKind};
use report::Report;
use topology::Topology;

/// How long after the leases the soak waits for the lock keys to expire:
/// the library's waiter-queue entries outlive a park by 2 s, plus margin.
const KEY_GRACE: Duration = Duration::from_millis(3000);

/// How long a turn of the fault loop (heal what is due, inject what is
/// due, sleep 20 ms) may take, beyond an injection's own time, before the
/// run's timeline says so.
const LOOP_LATE: Duration = Duration::from_millis(250);

/// Runs one worker process (the hidden `soak-worker` subcommand) until its
/// stop file appears: `redbell run` workers by `runner.rs`, the others by
/// `worker.rs`.
pub async fn worker(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    if args.kind == WorkerKind::Run {
        runner::drive(url, args).await
    } else if args.kind.is_python() {
        Err(python::exec(url, &args))
    } else {
        worker::run(url, args).await
    }
}

/// Options of `redbell-bench soak`.
#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// How long to inject faults, in seconds.
    #[arg(long, env = "SOAK_SECS", default_value_t = 120)]
    pub secs: u64,

    /// The fault schedule's seed (random if absent; printed either way).
    #[arg(long, env = "SOAK_SEED")]
    pub seed: Option<u64>,

    /// The Redis topology, owned by the soak (REDIS_URL is not used):
    /// `single`, `sentinel` or `cluster`.
    #[arg(long, env = "SOAK_TOPOLOGY", default_value = "single")]
    pub topology: String,

    /// Only these faults (comma-separated names as in report.json, e.g.
    /// `sigstop_waiter,restart`); all of the topology's by default.
    #[arg(long, env = "SOAK_FAULTS", value_delimiter = ',', value_parser = parse_fault)]
    pub faults: Vec<checker::FaultKind>,

    /// Only these worker kinds (comma-separated: `mutex`, `pool`, `fair`,
    /// `rw-write`, `rw-read`, `run`, `sem`, and the Python package's `py`
    /// and `py-fair`, skipped with a message without its venv); all by
    /// default.
    #[arg(long, env = "SOAK_KINDS", value_delimiter = ',')]
    pub kinds: Vec<WorkerKind>,

    /// How long each critical section holds its lock, in ms.
    #[arg(long, default_value_t = 5)]
    pub hold_ms: u64,

    /// Judge the logs and faults of the run in --out again (after a change
    /// of the checker) instead of running.
    #[arg(long, hide = true)]
    pub recheck: bool,

    /// Where the logs and report.json go.
    #[arg(long, default_value = "target/soak")]
    pub out: PathBuf,
}

/// `redbell-bench soak`.
pub async fn run(_url: &str, args: &SoakArgs) -> Result<(), Failure> {
    if args.recheck {
        return recheck(&args.out);
    }
    let seed = args.seed.unwrap_or_else(|| {
        plan::Rng::new(worker_io::now_us() ^ u64::from(std::process::id())).next_u64()
    });
    let name = args.topology.as_str();
    println!(
        "soak: seed {seed} (replay with SOAK_SEED={seed} SOAK_TOPOLOGY={name}), {} s, topology {name}",
        args.secs
    );
    let schedule = plan::schedule(seed, args.secs, name, &args.faults);

    let dir = args.out.join("logs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot create {}: {e}", dir.display())))?;
    let mut topo = Topology::start(name, &args.out.join("servers")).await?;
    let result = soak(&mut topo, seed, &schedule, &dir, args).await;
    topo.stop().await;
    result
}

async fn soak(
    topo: &mut Topology,
    seed: u64,
    schedule: &[plan::Planned],
    dir: &std::path::Path,
    args: &SoakArgs,
) -> Result<(), Failure> {
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let lock_of = |k: WorkerKind| format!("soak-{run_id}-{}", k.lock_part());
    let (url, proxy_to) = topo.worker_url();
    let mut pool = Pool::new(&url, proxy_to, topo.worker_args(), dir, args.hold_ms)?;
    let mut kinds: Vec<WorkerKind> = WorkerKind::ALL
        .into_iter()
        .filter(|k| args.kinds.is_empty() || args.kinds.contains(k))
        .collect();
    if kinds.iter().any(|k| k.is_python())
        && let Some(why) = python::unavailable(&args.topology)
    {
        println!("soak: skipping the Python workers (py, py-fair): {why}");
        kinds.retain(|k| !k.is_python());
        if kinds.is_empty() {
            println!("soak: no worker kind left to run");
            return Ok(());
        }
    }
    let mut locks: Vec<String> = kinds.iter().map(|&k| lock_of(k)).collect();
    locks.dedup();
    topo.set_locks(&locks);
    let probe = stalls::StallProbe::start();
    for &kind in &kinds {
        for _ in 0..kind.workers() {
            pool.spawn(kind, &lock_of(kind)).await?;
        }
    }

    let t0 = Instant::now();
    let t0_us = worker_io::now_us();
    let end = Duration::from_secs(args.secs);
    let mut next = schedule.iter().peekable();
    while t0.elapsed() < end {
        let turn = Instant::now();
        pool.continue_due(false);
        let healing = turn.elapsed();
        if let Some(p) = next.next_if(|p| p.at <= t0.elapsed()) {
            let line = pool.inject(p, topo).await?;
            println!("[{:>7.3} s] {line}", t0.elapsed().as_secs_f64());
        }
        let injecting = turn.elapsed() - healing;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Stops and partitions end late while this loop is held up: say so,
        // with where, for whoever reads a failed run's timeline.
        if turn.elapsed() > LOOP_LATE && injecting < LOOP_LATE {
            println!(
                "[{:>7.3} s] soak: the fault loop was held {} ms (healing {} ms)",
                t0.elapsed().as_secs_f64(),
                turn.elapsed().as_millis(),
                healing.as_millis()
            );
        }
    }

    println!("soak: stopping the workers");
    let end_us = worker_io::now_us();
    let late = pool.stop(LEASE * 4 + Duration::from_secs(2)).await?;
    let stalls = probe.stop();
    // Leases run out, and so do the waiter-queue entries of killed waiters
    // (they outlive a park by a 2 s grace).
    tokio::time::sleep(LEASE + KEY_GRACE).await;
    // Every key under the run's lock names (`soak-RUN-*`), whatever its
    // kind made of it (a semaphore's holders, permit count and queue too).
    let mut keys_left = Vec::new();
    let mut fence_keys = Vec::new();
    for key in topo.keys(&format!("redbell:{{soak-{run_id}-*")).await? {
        if key.ends_with(":fence") {
            fence_keys.push(key);
        } else {
            keys_left.push(key);
        }
    }
    fence_keys.extend(locks.iter().map(|lock| worker_io::store_key(lock)));
    topo.del(&fence_keys).await;

    // The servers' own faults count as faults too (the sentinels' own
    // failovers), told apart from ours in the report.
    let own = match topo.own_failovers(&pool.faults) {
        Some((own, switches)) => {
            println!(
                "soak: the sentinels announced {switches} switches of the primary; {} were their own",
                own.len()
            );
            own
        }
        None => Vec::new(),
    };
    for f in &own {
        println!(
            "soak: the sentinels failed over on their own: began {:.3} s, announced {:.3} s",
            f.at_us.saturating_sub(t0_us) as f64 / 1e6,
            f.until_us.unwrap_or(f.at_us).saturating_sub(t0_us) as f64 / 1e6
        );
    }
    pool.faults.extend(own);
    pool.faults.sort_by_key(|f| f.at_us);
    let records = read_records(dir)?;
    let lease_us = LEASE.as_micros() as u64;
    let verdict = checker::check_until(&records, &pool.faults, &stalls, lease_us, end_us);
    let report = Report {
        seed,
        secs: args.secs,
        topology: args.topology.clone(),
        kinds: kinds.iter().map(|k| k.name().to_owned()).collect(),
        lease_ms: LEASE.as_millis() as u64,
        end_us,
        workers_not_stopping: late,
        keys_left,
        verdict,
        faults: std::mem::take(&mut pool.faults),
        stalls,
    };
    println!("\n{}", report.table());
    report.write(&args.out)?;
    println!("soak: report in {}", args.out.join("report.json").display());
    if report.passed() {
        Ok(())
    } else {
        Err(report.failure())
    }
}

fn parse_fault(s: &str) -> Result<checker::FaultKind, String> {
    serde_json::from_value(serde_json::Value::String(s.trim().to_owned()))
        .map_err(|_| format!("unknown fault {s:?}"))
}

/// `soak --recheck`: the checker again over a finished run's logs.
fn recheck(out: &std::path::Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(out.join("report.json"))
        .map_err(|e| Failure::new(EX_FAILURE, format!("no report in {}: {e}", out.display())))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::new(EX_FAILURE, e.to_string()))?;
    let faults: Vec<checker::Fault> = serde_json::from_value(json["faults"].clone())
        .map_err(|e| Failure::new(EX_FAILURE, e.to_string()))?;
    let records = read_records(&out.join("logs"))?;
    let end_us = json["end_us"].as_u64().unwrap_or(0);
    let stalls: Vec<stalls::Stall> =
        serde_json::from_value(json["stalls"].clone()).unwrap_or_default();
    let verdict =
        checker::check_until(&records, &faults, &stalls, LEASE.as_micros() as u64, end_us);
    let report = Report {
        seed: json["seed"].as_u64().unwrap_or(0),
        secs: json["secs"].as_u64().unwrap_or(0),
        topology: json["topology"].as_str().unwrap_or("").to_owned(),
        kinds: strings(&json["kinds"]),
        lease_ms: LEASE.as_millis() as u64,
        end_us,
        workers_not_stopping: strings(&json["workers_not_stopping"]),
        keys_left: strings(&json["keys_left"]),
        verdict,
        faults,
        stalls,
    };
    println!("{}", report.table());
    // The run's report, judged again (`make soak` gathers report.md).
    report.write(out)?;
    for x in &report.verdict.violations {
        println!(
            "violation: {} on {} at {} µs: {}",
            x.bound, x.lock, x.start_us, x.detail
        );
    }
    if report.passed() {
        Ok(())
    } else {
        Err(report.failure())
    }
}

/// A JSON array of strings (empty if absent).
fn strings(v: &serde_json::Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn read_records(dir: &std::path::Path) -> Result<Vec<checker::Record>, Failure> {
    let mut records = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot read {}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        if entry.path().extension().is_some_and(|x| x == "jsonl") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            records.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<checker::Record>(l).ok()),
            );
        }
    }
    Ok(records)
}
