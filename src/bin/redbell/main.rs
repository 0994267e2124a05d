//! `redbell`: the command-line tool. One file per subcommand; see
//! `fail.rs` for the exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod demo;
mod fail;

/// Distributed locks on Redis with event-driven waiting.
///
/// Exit codes: 0 success, 1 failure (e.g. a demo invariant broke), 2 usage
/// error, 69 Redis unreachable.
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
