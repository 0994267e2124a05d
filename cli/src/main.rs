//! `redbell`: the command-line tool. One file per subcommand; `process/`
//! is the frame `run` and `elect` run their command in, `duration.rs` the
//! durations options take; see `fail.rs` for the exit codes. The bench and
//! the demo are not part of it: they are the `redbell-bench` binary (the
//! workspace's `bench/` crate).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod connect;
mod docs;
mod duration;
mod elect;
mod fail;
mod leader;
mod process;
mod run;
mod status;
mod table;
mod top;
mod unlock;

/// Distributed locks on Redis with event-driven waiting.
///
/// Redis is one server (--url), a Redis Cluster (--cluster) or the primary
/// Redis Sentinel names (--sentinel with --master). Every Redis option also
/// comes from an environment variable (REDBELL_URL, else REDIS_URL;
/// REDBELL_CLUSTER, REDBELL_SENTINEL, REDBELL_MASTER, REDBELL_USER,
/// REDBELL_DB, REDBELL_PREFIX, ...); a flag wins over its variable. The
/// password comes from REDBELL_PASSWORD or --password-file, never from
/// the command line; the commands `run` and `elect` start do not inherit
/// it (nor a URL variable with a password in it).
#[derive(Debug, Parser)]
#[command(
    name = "redbell",
    version,
    after_help = connect::REDIS_HINT,
    after_long_help = fail::EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    global: connect::GlobalArgs,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock (a distributed flock)
    ///
    /// Waits for the lock NAME (woken by the holder's release, no polling),
    /// runs CMD in its own process group with REDBELL_NAME, REDBELL_TOKEN and
    /// REDBELL_FENCE in its environment, renews the lease while it runs,
    /// forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to its group, and
    /// releases the lock when the command (and its whole group) has ended.
    /// If the lease is lost meanwhile, or cannot be renewed in time, the
    /// group gets SIGTERM, then SIGKILL after --kill-grace, early enough to
    /// be dead before the lease can expire, and redbell exits 75. Exits with
    /// the command's own code otherwise.
    #[command(arg_required_else_help = true)]
    Run(run::RunArgs),

    /// Show locks: holder token, remaining TTL, fence, queued waiters
    Status(status::StatusArgs),

    /// A live view of the busiest locks: holder, TTL, waiters, hand-off rate
    ///
    /// Refreshes every second (--interval) the locks under --prefix (or the
    /// NAMES given): kind, holder, remaining TTL, queued waiters, hand-offs
    /// per second and fence advance per second, busiest first. Each refresh
    /// costs at most --max-scans SCAN calls and one pipeline of at most
    /// --max-locks inspect script calls (10 + 200 commands with the
    /// defaults). --once prints one snapshot; --json prints JSON.
    Top(top::TopArgs),

    /// Break a lock as an operator (--force): delete it, wake the next waiter
    Unlock(unlock::UnlockArgs),

    /// Run a command only while leading an election
    ///
    /// Campaigns in the election NAME (waiting, event-driven, until the
    /// leader resigns or its lease runs out), runs CMD in its own process
    /// group with REDBELL_NAME, REDBELL_TERM and REDBELL_VALUE in its
    /// environment, and resigns when the command has ended; with --requeue,
    /// campaigns again. If the leadership is lost, the group gets SIGTERM,
    /// then SIGKILL after --kill-grace, and redbell exits 75.
    #[command(arg_required_else_help = true)]
    Elect(elect::ElectArgs),

    /// Show the leader of an election; --watch prints each change
    Leader(leader::LeaderArgs),

    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    ///
    /// For bash: `source <(redbell completions bash)` in ~/.bashrc, or save
    /// it as /usr/share/bash-completion/completions/redbell. Needs no Redis.
    Completions(docs::CompletionsArgs),

    /// Print the man page (roff) on stdout
    ///
    /// `redbell man > redbell.1 && man ./redbell.1`, or install it as
    /// /usr/local/share/man/man1/redbell.1; `redbell man run` prints
    /// redbell-run(1), and so on. Needs no Redis.
    Man(docs::ManArgs),

    /// Internal: the guardian `run` and `elect` start beside their command
    #[command(name = process::guardian::SUBCOMMAND, hide = true)]
    Guard,
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if let Command::Guard = cli.command {
        return process::guardian::serve(); // no runtime: one thread, one socket
    }
    // Generated from the definition alone: no Redis option is resolved.
    match &cli.command {
        Command::Completions(args) => return docs::completions::<Cli>(args),
        Command::Man(args) => return docs::man::<Cli>(args),
        _ => {}
    }
    if let Err(failure) = cli.global.resolve() {
        eprintln!("redbell: {failure}");
        return ExitCode::from(failure.code);
    }
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
            Command::Run(args) => run::run(&cli.global, args).await,
            Command::Status(args) => status::run(&cli.global, &args).await,
            Command::Unlock(args) => unlock::run(&cli.global, &args).await,
            Command::Top(args) => top::run(&cli.global, &args).await,
            Command::Elect(args) => elect::run(&cli.global, args).await,
            Command::Leader(args) => leader::run(&cli.global, &args).await,
            Command::Guard | Command::Completions(_) | Command::Man(_) => Ok(()),
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
