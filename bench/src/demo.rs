//! `redbell-bench demo`: several ticket windows sell one pool of tickets,
//! every sale under the distributed lock; at the end the numbers prove that
//! no ticket was sold twice and none oversold, and show the hand-off speed
//! of redbell's event-driven wake-up against the sleep-poll recipe.
//!
//! # How a run works
//!
//! - Each run gets a random run id; all its keys live under
//!   `redbell-demo:{RUN}:*` (plus the redbell lock `redbell:{demo-RUN}`), so
//!   runs, and tests, can share a server. A run deletes its keys when every
//!   invariant held; otherwise it keeps them for an hour for inspection and
//!   says so on stderr.
//! - Windows are separate OS processes by default: the parent spawns copies
//!   of its own executable (`std::env::current_exe`) with the hidden
//!   `demo-worker` subcommand. `--tasks` runs them as tasks of this process
//!   instead, each with its own redbell client.
//! - Windows connect, report ready (`LPUSH ready`), and block on `BLPOP go`
//!   so they all start together once the parent pushes the start tokens.
//! - The parent follows the sale by reading the new sale records every
//!   100 ms (`LRANGE sales N -1`) for the progress display, and waits for the
//!   windows to exit.
//! - At the end it reads all sale records (in the order Redis received them)
//!   and every window's acquisition timestamps (µs on this machine's clock)
//!   and computes the table; see `report.rs` for each number's definition.
//!
//! # Redis commands per sale
//!
//! The `INFO commandstats` delta over the sale, less the demo's own
//! bookkeeping commands (`INFO`, `LRANGE`, `LLEN`, `LPUSH`, `BLPOP`, which
//! the sale path never uses), divided by the tickets sold. The stats are
//! server-wide: other clients of the same server during the run are counted
//! too (run `make demo` on a private server for clean numbers). Commands
//! called inside Lua scripts count as well as the `EVALSHA` itself (the
//! row below it gives the script calls alone, one round trip each). Every
//! sale spends three data commands (`GET`, `RPUSH`, `SET`); the rest is the
//! lock. The stats are read, never reset, so concurrent users of the server
//! are not disturbed.
//!
//! # The poll baseline
//!
//! `--strategy poll` is the recipe of the usual articles: `SET key token NX
//! PX lease`; on failure sleep `--poll-interval` and retry; unlock with a Lua
//! compare-and-delete. The recipe has no fencing, so the baseline takes a
//! fence with an `INCR` right after acquiring (one extra command per sale)
//! to make the invariant check comparable.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::fail::{EX_FAILURE, Failure};

mod launch;
mod progress;
mod report;
mod stats;
mod window;

use launch::Windows;
use report::Report;
use window::{Mode, RunKeys, WindowConfig};

/// Options of `redbell-bench demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Number of ticket windows selling at the same time.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub windows: u32,

    /// Number of tickets in the pool.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tickets: u64,

    /// Run the windows as tasks in this process instead of separate OS
    /// processes (the default, a real distributed setting).
    #[arg(long)]
    pub tasks: bool,

    /// How each sale is locked: `pubsub` is redbell (waiters woken by the
    /// release); `poll` is the SET NX + sleep + retry recipe, as a baseline.
    #[arg(long, value_enum, default_value_t = Strategy::Pubsub)]
    pub strategy: Strategy,

    /// Sleep between two attempts of the poll strategy.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// Simulated "printing" time inside the critical section of each sale.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = humantime::parse_duration)]
    pub hold: Duration,

    /// Time a window spends serving its next customer, outside the lock,
    /// between two sales (without it the window that just released would
    /// take the lock again and the others would starve).
    #[arg(long, value_name = "DURATION", default_value = "5ms", value_parser = humantime::parse_duration)]
    pub serve: Duration,

    /// Lease of each acquisition: a crashed window's lock frees itself after
    /// this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_lease)]
    pub lease: Duration,

    /// Run the pub/sub strategy, then the poll baseline with the same
    /// settings, and print both tables side by side with the speed-up ratios.
    #[arg(long, conflicts_with = "strategy")]
    pub compare: bool,

    /// Let at most K windows be open at once, across all processes: a
    /// window opens by taking a permit of a redbell semaphore of K permits,
    /// sells one ticket, and closes (gives the permit back) before serving
    /// its next customer. The table then shows the most windows seen open
    /// at once, which must not exceed K. Only with the pubsub strategy.
    #[arg(long, value_name = "K", conflicts_with_all = ["compare", "no_lock"],
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub open: Option<u32>,

    /// Test hook: sell without any lock, to prove the checks catch a broken
    /// lock (duplicates or oversell, non-zero exit).
    #[arg(long, hide = true, conflicts_with = "compare")]
    pub no_lock: bool,
}

/// The locking strategy of a demo run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// redbell: waiters park until the holder's release wakes them.
    Pubsub,
    /// The sleep-poll recipe (SET NX PX, sleep, retry).
    Poll,
}

/// Hidden subcommands: how the demo runs its windows as processes.
#[derive(Debug, clap::Subcommand)]
pub enum Hidden {
    /// One ticket window of a demo run (started by `demo` itself).
    #[command(name = "demo-worker", hide = true)]
    DemoWorker(WorkerArgs),
}

/// Options of the hidden `demo-worker` subcommand.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The run id (key namespace).
    #[arg(long)]
    run: String,
    /// This window's number, from 1.
    #[arg(long)]
    window: u32,
    /// The locking mode.
    #[arg(long, value_enum)]
    mode: Mode,
    /// As `demo --poll-interval`.
    #[arg(long, value_parser = humantime::parse_duration)]
    poll_interval: Duration,
    /// As `demo --hold`.
    #[arg(long, value_parser = humantime::parse_duration)]
    hold: Duration,
    /// As `demo --serve`.
    #[arg(long, value_parser = humantime::parse_duration)]
    serve: Duration,
    /// As `demo --lease`.
    #[arg(long, value_parser = parse_lease)]
    lease: Duration,
    /// As `demo --open`.
    #[arg(long)]
    open: Option<u32>,
}

fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(1) || d > redbell::MAX_LEASE {
        return Err("must be between 1ms and one year".into());
    }
    Ok(d)
}

/// Runs a hidden subcommand.
pub async fn hidden(url: &str, cmd: Hidden) -> Result<(), Failure> {
    let Hidden::DemoWorker(w) = cmd;
    let cfg = WindowConfig {
        run: w.run,
        window: w.window,
        mode: w.mode,
        poll_interval: w.poll_interval,
        hold: w.hold,
        serve: w.serve,
        lease: w.lease,
        open: w.open,
    };
    window::sell(url, &cfg).await
}

/// `redbell-bench demo`: runs the sale (or both strategies with `--compare`),
/// prints the table, and fails with exit code 1 if an invariant broke.
pub async fn run(url: &str, args: &DemoArgs) -> Result<(), Failure> {
    let modes: &[Mode] = if args.compare {
        &[Mode::Pubsub, Mode::Poll]
    } else if args.no_lock {
        &[Mode::Unlocked]
    } else if args.strategy == Strategy::Poll {
        &[Mode::Poll]
    } else {
        &[Mode::Pubsub]
    };
    if args.open.is_some() && modes != [Mode::Pubsub] {
        return Err(Failure::new(
            crate::fail::EX_USAGE,
            "--open needs the pubsub strategy (the semaphore is redbell's)",
        ));
    }
    window::connect(url).await?; // fail before printing anything if Redis is unreachable
    println!(
        "redbell demo: {} windows ({}) sell {} tickets; {} printing under the lock, {} serving between sales",
        args.windows,
        if args.tasks {
            "tasks in one process"
        } else {
            "OS processes"
        },
        args.tickets,
        humantime::format_duration(args.hold),
        humantime::format_duration(args.serve),
    );
    if let Some(k) = args.open {
        println!("at most {k} windows open at once (a redbell semaphore of {k} permits)");
    }
    let mut reports = Vec::new();
    for &mode in modes {
        reports.push(run_once(url, args, mode).await?);
    }
    match &reports[..] {
        [a, b] => report::print_compare(a, b),
        [r] => report::print_single(r),
        _ => unreachable!("one or two runs"),
    }
    let broken: Vec<&str> = reports
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.label.as_str())
        .collect();
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            EX_FAILURE,
            format!("invariant broken in run: {}", broken.join(", ")),
        ))
    }
}

fn label(mode: Mode, args: &DemoArgs) -> String {
    match mode {
        Mode::Pubsub => "pubsub (redbell)".into(),
        Mode::Poll => format!("poll {}", humantime::format_duration(args.poll_interval)),
        Mode::Unlocked => "no lock (broken on purpose)".into(),
    }
}

/// One run of one strategy, with its own key namespace; cleans up after.
async fn run_once(url: &str, args: &DemoArgs, mode: Mode) -> Result<Report, Failure> {
    let run = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let keys = RunKeys::new(&run);
    let mut conn = window::connect(url).await?;
    let result = drive(url, args, mode, &run, &keys, &mut conn).await;
    let mut pipe = redis::pipe();
    if matches!(&result, Ok(r) if r.ok()) {
        pipe.del(keys.all());
    } else {
        for key in keys.all() {
            pipe.expire(key, 3600);
        }
        eprintln!("redbell: keeping the run's records for 1 h under redbell-demo:{{{run}}}:*");
    }
    // Best effort: the data keys expire on their own anyway.
    let _: Result<(), _> = pipe.query_async(&mut conn).await;
    result
}

/// Sets up, starts, follows and evaluates one run.
async fn drive(
    url: &str,
    args: &DemoArgs,
    mode: Mode,
    run: &str,
    keys: &RunKeys,
    conn: &mut MultiplexedConnection,
) -> Result<Report, Failure> {
    let r = |what: &'static str| move |e: redis::RedisError| Failure::redis(url, what, &e);
    let _: () = conn
        .set_ex(&keys.remaining, args.tickets, 3600)
        .await
        .map_err(r("cannot set up the run"))?;
    let label = label(mode, args);
    let mut windows = Windows::spawn(url, args, mode, run)?;

    // Wait until every window is connected, so they all start together.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready: u64 = conn
            .llen(&keys.ready)
            .await
            .map_err(r("waiting for the windows"))?;
        if ready >= u64::from(args.windows) {
            break;
        }
        windows.check().await?;
        if tokio::time::Instant::now() > deadline {
            return Err(Failure::new(
                EX_FAILURE,
                "the windows did not start within 30 s",
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let before = stats::command_calls(conn).await;
    let go = vec![1; args.windows as usize];
    let _: () = conn
        .lpush(&keys.go, go)
        .await
        .map_err(r("cannot start the sale"))?;
    let mut progress = progress::Progress::new(&label, args.windows, args.tickets);
    let mut seen = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let done = windows.check().await?;
        let new: Vec<String> = conn
            .lrange(&keys.sales, seen, -1)
            .await
            .map_err(r("cannot read the sales"))?;
        seen += new.len() as isize;
        for sale in new.iter().filter_map(|s| report::parse_sale(s)) {
            progress.sold_by(sale.window);
        }
        progress.tick();
        if done {
            break;
        }
    }
    let after = stats::command_calls(conn).await;
    progress.finish();

    let sales: Vec<String> = conn
        .lrange(&keys.sales, 0, -1)
        .await
        .map_err(r("cannot read the sales"))?;
    let timings: Vec<String> = conn
        .lrange(&keys.timings, 0, -1)
        .await
        .map_err(r("cannot read the timings"))?;
    let malformed =
        |what: &str, s: &str| Failure::new(EX_FAILURE, format!("malformed {what} record {s:?}"));
    let sales = sales
        .iter()
        .map(|s| report::parse_sale(s).ok_or_else(|| malformed("sale", s)))
        .collect::<Result<Vec<_>, _>>()?;
    let timings = timings
        .iter()
        .map(|s| report::parse_timing(s).ok_or_else(|| malformed("timing", s)))
        .collect::<Result<Vec<_>, _>>()?;
    let commands = match (before, after) {
        (Some(b), Some(a)) => Some(stats::sale_commands(&b, &a)),
        _ => None,
    };
    let mut report = report::analyse(
        label,
        args.windows,
        args.tickets,
        &sales,
        &timings,
        mode != Mode::Unlocked,
        commands,
    );
    if let Some(limit) = args.open {
        let opens: Vec<String> = conn
            .lrange(&keys.opens, 0, -1)
            .await
            .map_err(r("cannot read the openings"))?;
        let opens = opens
            .iter()
            .map(|s| report::parse_open(s).ok_or_else(|| malformed("opening", s)))
            .collect::<Result<Vec<_>, _>>()?;
        report.open = Some(report::OpenCheck {
            limit,
            max_seen: report::max_open(&opens),
            openings: opens.len() as u64,
        });
    }
    Ok(report)
}
