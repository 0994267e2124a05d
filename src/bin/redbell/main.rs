//! `redbell`: the command-line tool. One file per subcommand; see
//! `fail.rs` for the exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod commandstats;
mod demo;
mod fail;
mod run;
mod status;
mod unlock;

/// Distributed locks on Redis with event-driven waiting.
///
/// Exit codes: 0 success, 1 failure (e.g. a demo invariant broke, or `run`
/// found the lock held), 2 usage error, 69 Redis unreachable, 75 `run` lost
/// its lease; `run` otherwise exits with its command's code (128+N when a
/// signal N killed it). Environment: REDIS_URL when --url is absent.
#[derive(Debug, Parser)]
#[command(name = "redbell", version)]
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

    /// Run a command while holding a lock (a distributed flock)
    ///
    /// Waits for the lock NAME (woken by the holder's release, no polling),
    /// runs CMD in its own process group with REDBELL_NAME, REDBELL_TOKEN and
    /// REDBELL_FENCE in its environment, renews the lease while it runs,
    /// forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to its group, and
    /// releases the lock when the command (and its whole group) has ended.
    /// If the lease is lost meanwhile, the group gets SIGTERM, then SIGKILL
    /// after --kill-grace, and redbell exits 75. Exits with the command's
    /// own code otherwise.
    #[command(arg_required_else_help = true)]
    Run(run::RunArgs),

    /// Show locks: holder token, remaining TTL, fence, queued waiters
    Status(status::StatusArgs),

    /// Break a lock as an operator (--force): delete it, wake the next waiter
    Unlock(unlock::UnlockArgs),

    /// Measure redbell against the sleep-poll recipe and report
    ///
    /// Floor latencies, hand-off on one lock (2, 8, 32 workers over 2
    /// processes), waiter scaling (1 to 1,000 waiters), uncontended
    /// throughput and crash takeover, side by side in one run. Prints a
    /// markdown report; writes results.json and chart.svg under --out. Use
    /// a private Redis: it runs CONFIG RESETSTAT.
    Bench(bench::BenchArgs),

    /// One process of a bench scenario (started by `bench` itself).
    #[command(name = "bench-worker", hide = true)]
    BenchWorker(bench::WorkerArgs),

    #[command(flatten)]
    Hidden(demo::Hidden),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redbell: cannot start the async runtime: {e}");
            return ExitCode::from(fail::EX_FAILURE);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(&cli.url, &args).await,
            Command::Run(args) => run::run(&cli.url, args).await,
            Command::Status(args) => status::run(&cli.url, &args).await,
            Command::Unlock(args) => unlock::run(&cli.url, &args).await,
            Command::Bench(args) => bench::run(&cli.url, &args).await,
            Command::BenchWorker(args) => bench::worker(&cli.url, args).await,
            Command::Hidden(cmd) => demo::hidden(&cli.url, cmd).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("redbell: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
