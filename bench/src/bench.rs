//! `redbell-bench bench`: measures redbell (its plain and its fair mutex)
//! against the `rslock` crate and the sleep-poll recipe, side by side in one
//! run, and reports; it asserts nothing about speed.
//!
//! Output: a markdown report on stdout (progress on stderr), the raw
//! results as `results.json` and a chart as `chart.svg` under `--out`
//! (default `target/bench/`). `--quick` is a smoke test that finishes in
//! well under a minute, with a debug build too; `make test` runs it so the
//! bench never rots.
//!
//! # Scenarios
//!
//! 1. **Floor**: sequential `PING`s on a redis-rs `ConnectionManager` (the
//!    connection type redbell uses), one acquire script call (`try_lock` on
//!    a free lock) and one release script call (`unlock` with nobody
//!    waiting). Every latency is also given as a multiple of the PING p50.
//! 2. **Hand-off on one lock**: W = 2, 8, 32 workers, each with its own
//!    client (`redbell::Client`, or for the poll recipe its own
//!    connection), split over 2 OS processes (copies of this executable,
//!    hidden `bench-worker` subcommand, see `bench/worker.rs`). Each loops
//!    acquire → hold (`--hold`, 100 µs, spun) → unlock; see
//!    `bench/contend.rs` for how each figure is computed. Measured for
//!    redbell's plain `Mutex` and for its `FairMutex` (`redbell fair`, FIFO
//!    with direct hand-off); with `--cluster NODES` also for the plain
//!    `Mutex` through `Client::cluster` on that Redis Cluster
//!    (`redbell cluster`, see `bench/cluster.rs`). Beside them, the
//!    **serial floor**: the same
//!    loop with no lock (counter `INCR` inside the hold, timestamps), one
//!    task on one connection in the bench process, fastest of 5 runs; its
//!    iterations/s are what hand-offs/s would be with zero lock overhead,
//!    and every row's hand-offs/s is also given as a fraction of it.
//! 3. The same with the **`rslock` crate** (Redlock over redis-rs, here on
//!    one server: `SET NX PX`; after a failed try its compare-and-delete and
//!    a random 0–200 ms sleep) and the **sleep-poll recipe** (`SET NX PX`,
//!    sleep 10 ms or 100 ms, retry; Lua compare-and-delete release), in
//!    `bench/lock.rs`. A polling releaser mostly re-takes its own lock, so
//!    the report and the chart judge *hand-offs per second to another
//!    worker* and the acquire wait, not raw acquisitions per second.
//! 4. **Waiter scaling**: 1, 10, 100, 1,000 waiters (plus the holder) on
//!    one lock, spread over 4 processes, each process with ONE client shared
//!    by its tasks (1,000 clients would be 2,000 connections); redbell, and
//!    the 10 ms poll recipe as the contrast.
//! 5. **Uncontended lock+unlock**: 8 workers, each with its own client and
//!    its own lock, for redbell, rslock and the poll recipe in turn over
//!    several rounds (medians): operations/s, Redis commands per operation
//!    and Redis CPU per operation (`INFO cpu`, `used_cpu_sys +
//!    used_cpu_user`), with the ratios to rslock.
//! 6. **Crash takeover**: a holder leaks its guard (`mem::forget`) under a
//!    200 ms lease; another client is already waiting; the time from the
//!    lease's expiry to its `lock()` returning, over 20 runs.
//!
//! 7. **Semaphore**: 16 workers share a 4-permit `client.semaphore()`;
//!    acquisitions/s, wait and commands per acquisition (`bench/semaphore.rs`).
//!
//! 8. **Cost of the `metrics` feature**: the hand-off scenario (W = 8)
//!    with redbell's `metrics` feature compiled out, compiled in without a
//!    recorder, and compiled in with a Prometheus recorder, in interleaved
//!    rounds (medians); see `bench/metrics_cost.rs`. `--metrics-only` runs
//!    this row alone.
//!
//! # Redis commands
//!
//! Counted with `CONFIG RESETSTAT` and `INFO commandstats`, so run the
//! bench on a private server (`make bench` starts one when `REDIS_URL` is
//! unset); the bench's own bookkeeping commands are excluded. Two figures:
//! *round trips* (the commands the clients send: script calls, the poll
//! recipe's `SET`, redbell's SUBSCRIBE/UNSUBSCRIBE) and *all commands*,
//! including those run inside the Lua scripts. For `redbell cluster`, on
//! the primary that owns the lock's slot (SSUBSCRIBE/SUNSUBSCRIBE there).
//!
//! Every key the bench writes carries the run id and is deleted at the end.

use std::path::PathBuf;
use std::time::Duration;

use crate::fail::{EX_FAILURE, Failure};

mod chart;
mod cluster;
mod contend;
mod floor;
mod lock;
mod metrics_cost;
pub(crate) mod page;
pub(crate) mod plan;
mod report;
mod results;
mod semaphore;
mod stats;
mod verdict;
mod worker;

pub use worker::WorkerArgs;

use contend::Scenario;
use lock::Strategy;
use plan::Plan;
use results::Results;

/// Options of `redbell-bench bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// A smoke test finishing in well under a minute (also with a debug
    /// build), for CI: same scenarios, far fewer iterations.
    #[arg(long)]
    pub quick: bool,

    /// Directory for `results.json` and `chart.svg`.
    #[arg(long, value_name = "DIR", default_value = "target/bench")]
    pub out: PathBuf,

    /// Also write the report as a Markdown page to FILE, with the chart
    /// beside it (FILE with the extension `.svg`): `make bench` writes
    /// `docs/performance.md`. The page is generated whole; rerun the
    /// bench rather than edit it.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Time each worker holds the lock per acquisition (spun, not slept).
    #[arg(long, value_name = "DURATION", default_value = "100us", value_parser = humantime::parse_duration)]
    pub hold: Duration,

    /// Also measure the hand-off on this Redis Cluster (comma-separated
    /// node URLs; a few suffice): the `redbell cluster` rows. Use a private
    /// cluster: it runs CONFIG RESETSTAT on the lock's primary.
    #[arg(
        long,
        value_name = "NODES",
        env = "REDBELL_CLUSTER_NODES",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub cluster: Vec<String>,

    /// Run only the metrics-cost row (scenario 8) and print its table.
    #[arg(long)]
    pub metrics_only: bool,

    /// Rounds of the metrics-cost row (default: 7, 1 with --quick).
    #[arg(long, value_name = "N")]
    pub metrics_rounds: Option<u32>,

    /// Only the hand-off rows of redbell's plain and fair mutex at these W
    /// (comma-separated, e.g. `8,32`), each repeated `--rounds` times in
    /// turn, with the serial floor: a short table on stdout, no
    /// `results.json` or chart. For comparing changes to the hand-off side
    /// by side in one run.
    #[arg(long, value_name = "W", value_delimiter = ',')]
    pub handoff_only: Vec<u32>,

    /// Rounds of each `--handoff-only` row (the table gives each run and
    /// the medians), or of `--uncontended-only`'s strategies.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,

    /// Only the uncontended row (scenario 5: redbell, rslock and the poll
    /// recipe in turn, `--rounds` times) and its table. For comparing
    /// changes to the uncontended path side by side in one run.
    #[arg(long, conflicts_with = "handoff_only")]
    pub uncontended_only: bool,
}

/// Runs a hidden `bench-worker` process.
pub async fn worker(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    worker::run(url, args).await
}

/// `redbell-bench bench`.
pub async fn run(url: &str, args: &BenchArgs) -> Result<(), Failure> {
    let mut plan = Plan::new(args.quick);
    if let Some(rounds) = args.metrics_rounds {
        plan.metrics_rounds = rounds.max(1);
    }
    if !args.handoff_only.is_empty() {
        return handoff_only(url, args, &plan).await;
    }
    if args.uncontended_only {
        return uncontended_only(url, args, &plan).await;
    }
    let nodes: Vec<String> = args
        .cluster
        .iter()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    let cluster_info = if nodes.is_empty() {
        None
    } else {
        let info = cluster::check(&nodes).await?;
        eprintln!(
            "bench: cluster {} ({} primaries, {} replicas, Redis {})",
            info.nodes.join(","),
            info.primaries,
            info.replicas,
            info.redis_version
        );
        Some(info)
    };
    let mut conn = contend::bookkeeping(url).await?;
    let redis_version = redis_version(&mut conn).await;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let lease = Duration::from_secs(10);
    eprintln!(
        "bench: run {run} against {} ({})",
        crate::fail::redact(url),
        if args.quick { "quick" } else { "full" }
    );

    if args.metrics_only {
        let cost = metrics(url, &run, &plan, args, lease).await;
        delete_run_keys(&mut conn, &run).await;
        println!("{}", report::metrics_cost(&cost?));
        return Ok(());
    }
    let result = async {
        eprintln!("bench: floor, {} samples", plan.samples);
        let floor = floor::floor(url, &format!("bench-{run}-floor"), plan.samples).await?;

        eprintln!(
            "bench: serial floor (no lock), N={}, hold {:?}, fastest of {} runs",
            plan.serial_n(),
            args.hold,
            floor::SERIAL_RUNS
        );
        let serial_floor = floor::serial_floor(
            url,
            &format!("bench-{run}-serial"),
            plan.serial_n(),
            args.hold,
        )
        .await?;
        eprintln!("bench:   {:.0} iterations/s", serial_floor.iterations_per_s);

        let mut handoff = Vec::new();
        for &w in &plan.workers {
            for (strategy, n) in plan.handoff_strategies() {
                let s = Scenario {
                    kind: "handoff",
                    strategy,
                    workers: w,
                    processes: 2,
                    shared_client: false,
                    n,
                    hold: args.hold,
                    lease,
                    cluster: Vec::new(),
                    worker: Default::default(),
                };
                handoff.push(contention(url, &run, &s).await?);
                if strategy == Strategy::Redbell && !nodes.is_empty() {
                    let s = Scenario {
                        strategy: Strategy::Cluster,
                        cluster: nodes.clone(),
                        ..s
                    };
                    handoff.push(contention(url, &run, &s).await?);
                }
            }
        }

        let mut scaling = Vec::new();
        for (strategy, waiters, n) in plan.scaling() {
            let s = Scenario {
                kind: "scaling",
                strategy,
                workers: waiters + 1,
                processes: 4,
                shared_client: true,
                n,
                hold: args.hold,
                lease,
                cluster: Vec::new(),
                worker: Default::default(),
            };
            scaling.push(contention(url, &run, &s).await?);
        }

        let (uncontended, uncontended_work) =
            uncontended_twice(url, &run, &plan, plan.uncontended_rounds, args.hold).await?;

        let mut takeover = Vec::new();
        for strategy in [
            Strategy::Redbell,
            Strategy::Poll(Duration::from_millis(10)),
            Strategy::Poll(Duration::from_millis(100)),
        ] {
            eprintln!(
                "bench: crash takeover, {}, {} runs",
                strategy.label(),
                plan.crash_runs
            );
            takeover.push(
                floor::takeover(
                    url,
                    &run,
                    strategy,
                    plan.crash_runs,
                    Duration::from_millis(200),
                )
                .await?,
            );
        }
        let sem_n = if args.quick { 20 } else { 200 };
        eprintln!("bench: semaphore, 4 permits, 16 workers, N={sem_n} each");
        let semaphore = semaphore::run(
            url,
            &format!("bench-{run}-semaphore"),
            4,
            16,
            sem_n,
            args.hold,
        )
        .await?;
        eprintln!(
            "bench:   {:.0} acquisitions/s, wait p99 {} µs",
            semaphore.acquisitions_per_s,
            semaphore.wait_us.p99.unwrap_or(0)
        );
        let metrics = metrics(url, &run, &plan, args, lease).await?;
        Ok::<_, Failure>(Results {
            date: plan::utc_now(),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            redis_version,
            cluster: cluster_info,
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            quick: args.quick,
            hold_us: args.hold.as_micros() as u64,
            floor,
            serial_floor,
            handoff,
            scaling,
            uncontended,
            uncontended_work,
            takeover,
            semaphore,
            metrics,
        })
    }
    .await;
    delete_run_keys(&mut conn, &run).await;
    let results = result?;

    println!("{}", report::markdown(&results));
    std::fs::create_dir_all(&args.out).map_err(|e| {
        Failure::new(
            EX_FAILURE,
            format!("cannot create {}: {e}", args.out.display()),
        )
    })?;
    let json = args.out.join("results.json");
    let text = serde_json::to_string_pretty(&results).expect("serializable");
    std::fs::write(&json, text)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot write {}: {e}", json.display())))?;
    let svg = args.out.join("chart.svg");
    chart::draw(&results, &svg)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot draw {}: {e}", svg.display())))?;
    eprintln!("bench: wrote {} and {}", json.display(), svg.display());
    if let Some(page) = &args.report {
        write_page(&results, page)?;
    }
    Ok(())
}

/// `--report`: the page and its chart beside it.
fn write_page(results: &Results, page: &std::path::Path) -> Result<(), Failure> {
    let chart = page.with_extension("svg");
    let chart_name = chart
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    chart::draw(results, &chart)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot draw {}: {e}", chart.display())))?;
    let text = page::render(results, &page::command_line(), &chart_name);
    let text = page::keep_python(text, std::fs::read_to_string(page).ok().as_deref());
    std::fs::write(page, text)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot write {}: {e}", page.display())))?;
    eprintln!("bench: wrote {} and {}", page.display(), chart.display());
    Ok(())
}

/// The metrics-cost row, with progress on stderr.
async fn metrics(
    url: &str,
    run: &str,
    plan: &Plan,
    args: &BenchArgs,
    lease: Duration,
) -> Result<metrics_cost::MetricsCost, Failure> {
    eprintln!(
        "bench: metrics feature cost, hand-off W=8 N={}, {} interleaved rounds",
        plan.serial_n(),
        plan.metrics_rounds
    );
    metrics_cost::run(
        url,
        run,
        plan.serial_n(),
        plan.metrics_rounds,
        args.hold,
        lease,
    )
    .await
}

/// Scenario 5 twice: lock+unlock alone, then around a critical section of
/// `hold`.
async fn uncontended_twice(
    url: &str,
    run: &str,
    plan: &Plan,
    rounds: u32,
    hold: Duration,
) -> Result<(floor::Uncontended, floor::Uncontended), Failure> {
    let alone = uncontended(url, run, plan, rounds, None).await?;
    let work = uncontended(url, run, plan, rounds, Some(hold)).await?;
    Ok((alone, work))
}

/// Scenario 5 with `section` between lock and unlock, with progress on
/// stderr.
async fn uncontended(
    url: &str,
    run: &str,
    plan: &Plan,
    rounds: u32,
    section: Option<Duration>,
) -> Result<floor::Uncontended, Failure> {
    eprintln!(
        "bench: uncontended{}, {} workers each with its own client and lock, {rounds} rounds of {:?} per strategy",
        section.map_or(String::new(), |h| format!(" with a {h:?} critical section")),
        plan.uncontended_workers,
        plan.uncontended
    );
    let u = floor::uncontended(
        url,
        run,
        plan.uncontended_workers,
        plan.uncontended,
        rounds,
        section,
    )
    .await?;
    for row in &u.rows {
        eprintln!(
            "bench:   {}: {:.0} ops/s, {:.2} commands and {:.1} µs Redis CPU per op",
            row.strategy, row.ops_per_s, row.commands_per_op, row.cpu_us_per_op
        );
    }
    Ok(u)
}

/// `--uncontended-only`: scenario 5 alone, its tables on stdout.
async fn uncontended_only(url: &str, args: &BenchArgs, plan: &Plan) -> Result<(), Failure> {
    let mut conn = contend::bookkeeping(url).await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let result = uncontended_twice(url, &run, plan, args.rounds.max(1), args.hold)
        .await
        .map(|(alone, work)| report::uncontended(&alone) + &report::uncontended(&work));
    delete_run_keys(&mut conn, &run).await;
    println!("{}{}", plan::utc_now(), result?);
    Ok(())
}

/// `--handoff-only`: the serial floor, then redbell's plain and fair
/// hand-off rows at each W, taking turns for `--rounds` rounds; one table.
async fn handoff_only(url: &str, args: &BenchArgs, plan: &Plan) -> Result<(), Failure> {
    let mut conn = contend::bookkeeping(url).await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let result = async {
        let floor = floor::serial_floor(
            url,
            &format!("bench-{run}-serial"),
            plan.serial_n(),
            args.hold,
        )
        .await?;
        let mut rows = Vec::new();
        for round in 0..args.rounds.max(1) {
            for &w in &args.handoff_only {
                for strategy in [Strategy::Redbell, Strategy::Fair] {
                    let s = Scenario {
                        kind: "handoff",
                        strategy,
                        workers: w,
                        processes: 2,
                        shared_client: false,
                        n: plan.n[0],
                        hold: args.hold,
                        lease: Duration::from_secs(10),
                        cluster: Vec::new(),
                        worker: Default::default(),
                    };
                    let o = contention(url, &format!("{run}-r{round}"), &s).await?;
                    rows.push((round, o));
                }
            }
        }
        Ok::<_, Failure>((floor, rows))
    }
    .await;
    delete_run_keys(&mut conn, &run).await;
    let (floor, rows) = result?;
    println!(
        "{} ({}), serial floor {:.0} iterations/s, hold {:?}",
        plan::utc_now(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        floor.iterations_per_s,
        args.hold
    );
    println!(
        "| round | row | W | hand-offs/s to another worker | × floor | wait p50 / p99 / max (ms) | commands per hand-off (round trips) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let ms = |us: Option<i64>| us.map_or(0.0, |v| v as f64 / 1000.0);
    for (round, o) in &rows {
        let (all, trips) = o.commands.as_ref().map_or((0.0, 0.0), |c| {
            let n = c.handoffs.max(1) as f64;
            (c.all as f64 / n, c.round_trips as f64 / n)
        });
        println!(
            "| {round} | {} | {} | {:.0} | {:.2} | {:.2} / {:.2} / {:.1} | {all:.1} ({trips:.1}) |",
            o.strategy,
            o.workers,
            o.handovers_per_s,
            o.handovers_per_s / floor.iterations_per_s,
            ms(o.wait_us.p50),
            ms(o.wait_us.p99),
            o.wait_max_us as f64 / 1000.0,
        );
    }
    for (round, o) in &rows {
        if let Some(c) = &o.commands {
            let n = c.handoffs.max(1) as f64;
            let each: Vec<String> = c
                .by_command
                .iter()
                .map(|(name, count)| format!("{name} {:.2}", *count as f64 / n))
                .collect();
            println!(
                "round {round}, {} W={}: {}",
                o.strategy,
                o.workers,
                each.join(", ")
            );
        }
    }
    Ok(())
}

/// Runs one contention scenario with progress on stderr.
async fn contention(url: &str, run: &str, s: &Scenario) -> Result<contend::Outcome, Failure> {
    eprintln!(
        "bench: {} {} W={} N={} ({} processes, {})",
        s.kind,
        s.strategy.label(),
        s.workers,
        s.n,
        s.processes.min(s.workers),
        if s.shared_client {
            "one client per process"
        } else {
            "one client per worker"
        }
    );
    let name = format!(
        "bench-{run}-{}-{}-{}",
        s.kind,
        s.strategy.label().replace(' ', "-"),
        s.workers
    );
    // On a cluster, the counter and the command counts go to the primary
    // that owns the lock's slot.
    let url = if s.strategy == Strategy::Cluster {
        let (primary, slot) = cluster::owner(&s.cluster, &format!("redbell:{{{name}}}")).await?;
        eprintln!(
            "bench:   lock slot {slot}, primary {}",
            crate::fail::redact(&primary)
        );
        primary
    } else {
        url.to_owned()
    };
    let started = std::time::Instant::now();
    let o = contend::run(&url, &name, s).await?;
    eprintln!(
        "bench:   {:.1} s: {:.0} hand-offs/s, gap p50 {} µs, wait p99 {} µs",
        started.elapsed().as_secs_f64(),
        o.handoffs_per_s,
        o.gap_us.p50.unwrap_or(0),
        o.wait_us.p99.unwrap_or(0)
    );
    Ok(o)
}

pub(crate) async fn redis_version(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

/// Deletes every key whose name contains the run id (best effort).
async fn delete_run_keys(conn: &mut redis::aio::MultiplexedConnection, run: &str) {
    let mut cursor: u64 = 0;
    loop {
        let Ok((next, keys)): Result<(u64, Vec<String>), _> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{run}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
        else {
            return;
        };
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query_async(conn).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}
