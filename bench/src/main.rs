//! `redbell-bench`: the benchmark report (`bench`), the multi-window
//! ticket sale (`demo`) and the fault-injection soak (`soak`), outside the
//! library's and the CLI's builds. `make bench`, `make demo` and `make soak`
//! run them.
//!
//! All three start worker processes that are copies of this executable,
//! with the hidden `bench-worker`, `demo-worker` and `soak-worker`
//! subcommands. Failures are the CLI's type and exit codes: `fail` is
//! `cli/src/fail.rs` itself, compiled in here by path (one copy, and no
//! dependency on the CLI crate, which would bring its whole build for one
//! file).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod commandstats;
mod demo;
// The CLI's `--help` table and the codes only its subcommands use
// (`EX_TEMPFAIL`, `Failure::input`) are not needed here.
#[allow(dead_code)]
#[path = "../../cli/src/fail.rs"]
mod fail;
mod heap;
mod scale;
mod soak;

/// redbell's benchmark report and ticket-sale demo.
///
/// Exit codes: 0 success, 1 failure (e.g. a demo invariant broke), 2 usage
/// error, 69 Redis unreachable, 77 login refused or ACL denial, 78
/// configuration (a bad database). Environment: REDIS_URL when --url is
/// absent.
#[derive(Debug, Parser)]
#[command(name = "redbell-bench", version)]
struct Cli {
    /// Redis server URL (`redis://[:password@]host:port[/db]`).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    url: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the multi-window ticket sale
    ///
    /// Several ticket windows (OS processes, or tasks with --tasks) sell one
    /// pool of tickets, every sale under the lock; the table at the end
    /// proves that no ticket was sold twice and none oversold, and shows the
    /// hand-off latency and the Redis commands spent per sale. Exits 1 if an
    /// invariant breaks, 69 if Redis is unreachable.
    Demo(demo::DemoArgs),

    /// Measure redbell against rslock and the sleep-poll recipe and report
    ///
    /// Floor latencies, hand-off on one lock (2, 8, 32 workers over 2
    /// processes), waiter scaling (1 to 1,000 waiters), uncontended
    /// throughput and crash takeover, side by side in one run. Prints a
    /// markdown report; writes results.json and chart.svg under --out. Use
    /// a private Redis: it runs CONFIG RESETSTAT.
    Bench(bench::BenchArgs),

    /// What redbell costs at scale: parked waiters, many lock names
    ///
    /// 100 to 100,000 waiters parked in one process (memory per waiter on
    /// both sides, connections, commands and Redis CPU while parked,
    /// wake-up latency), and Redis CPU and commands per operation over 1
    /// to 100,000 lock names, with a capacity model. Takes minutes; use a
    /// private Redis: it runs CONFIG RESETSTAT.
    Scale(scale::ScaleArgs),

    /// The parked waiters of a scale run (started by `scale` itself).
    #[command(name = "scale-waiters", hide = true)]
    ScaleWaiters(scale::WaitersArgs),

    /// One client process of a scale run (started by `scale` itself).
    #[command(name = "scale-client", hide = true)]
    ScaleClient(scale::ClientArgs),

    /// The counted part of a scale run, its servers under Callgrind
    /// (started by `scale` itself).
    #[command(name = "scale-counted", hide = true)]
    ScaleCounted(scale::CountedArgs),

    /// One process of a bench scenario (started by `bench` itself).
    #[command(name = "bench-worker", hide = true)]
    BenchWorker(bench::WorkerArgs),

    /// Seeded fault-injection soak: worker processes contend for locks
    ///
    /// Library workers (Mutex, FairMutex, RwLock writers) in separate
    /// processes take short-lease locks and write each fence to a
    /// fence-checked store while a seeded schedule SIGKILLs and SIGSTOPs
    /// workers, kills client connections and pauses the server. A checker
    /// over the logs then proves no stale write was accepted, no two holds
    /// overlapped unexplained, no waiter waited long on a free lock or was
    /// stranded, and no key was left. Exits 1 naming the seed and the
    /// first offending interval if a bound broke.
    Soak(soak::SoakArgs),

    /// One worker of a soak run (started by `soak` itself).
    #[command(name = "soak-worker", hide = true)]
    SoakWorker(soak::WorkerArgs),

    /// One critical section under `redbell run` (a soak's `run` worker).
    #[command(name = "soak-store", hide = true)]
    SoakStore(soak::StoreArgs),

    #[command(flatten)]
    Hidden(demo::Hidden),
}

/// Counts live heap only once `heap::enable` was called (the scale run's
/// waiter process); a relaxed load per allocation otherwise.
#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A scale run's client processes are many: one thread each.
    let mut builder = match cli.command {
        Command::ScaleClient(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redbell-bench: cannot start the async runtime: {e}");
            return ExitCode::from(fail::EX_FAILURE);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(&cli.url, &args).await,
            Command::Bench(args) => bench::run(&cli.url, &args).await,
            Command::BenchWorker(args) => bench::worker(&cli.url, args).await,
            Command::Scale(args) => scale::run(&cli.url, &args).await,
            Command::ScaleWaiters(args) => scale::waiters(&cli.url, args).await,
            Command::ScaleClient(args) => scale::client(&cli.url, args).await,
            Command::ScaleCounted(args) => scale::counted(args).await,
            Command::Soak(args) => soak::run(&cli.url, &args).await,
            Command::SoakWorker(args) => soak::worker(&cli.url, args).await,
            Command::SoakStore(args) => soak::store(args).await,
            Command::Hidden(cmd) => demo::hidden(&cli.url, cmd).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("redbell-bench: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
