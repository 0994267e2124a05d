//! The multi-window ticket sale, the same program as `redbell demo`.
//!
//! Several ticket windows (separate OS processes by default) sell one pool
//! of tickets, every sale under the distributed lock; at the end a table
//! proves that no ticket was sold twice and none oversold, and shows the
//! hand-off latency. Run it with
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example ticket_sale
//! cargo run --example ticket_sale -- --compare          # redbell vs the sleep-poll recipe
//! cargo run --example ticket_sale -- --help
//! ```
//!
//! The windows are copies of this very executable, started with the hidden
//! `demo-worker` subcommand.

use std::process::ExitCode;

use clap::Parser;

#[path = "../src/bin/redbell/commandstats.rs"]
mod commandstats;
#[path = "../src/bin/redbell/demo.rs"]
mod demo;
// The CLI's failure type; the other subcommands' exit codes go unused here.
#[allow(dead_code)]
#[path = "../src/bin/redbell/fail.rs"]
mod fail;

/// Several ticket windows sell one pool of tickets under a redbell lock.
#[derive(Debug, Parser)]
#[command(name = "ticket_sale", args_conflicts_with_subcommands = true)]
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

    #[command(flatten)]
    demo: demo::DemoArgs,

    /// Only the hidden window worker.
    #[command(subcommand)]
    worker: Option<demo::Hidden>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.worker {
        Some(worker) => demo::hidden(&cli.url, worker).await,
        None => demo::run(&cli.url, &cli.demo).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("ticket_sale: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
