//! `redbell run`: a distributed flock(1).
//!
//! Acquire the lock (waiting for it, event-driven, unless `-n`/`-w` say
//! otherwise), run the command in its own process group with
//! `REDBELL_NAME`, `REDBELL_TOKEN` and `REDBELL_FENCE` in its environment,
//! keep the lease renewed while it runs, forward SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT to its group, and release the lock once the command and every
//! process of its group are gone.
//!
//! The lessons of consul lock and friends (see shared pitfalls): signals go
//! to the child's *group*, so a grandchild is never left running — neither
//! when `redbell` is told to stop, nor when the lease is lost, nor when the
//! command exits and leaves a background job behind — and the child's exit
//! code is passed through.
//!
//! The group must be dead before the lease can expire on the server, when
//! another host may take the lock: a lease that could not be renewed in time
//! stops the group early enough for that (see `process/supervise.rs`, the
//! frame `elect` shares; `run/lease.rs` renews the lease).
//!
//! Should `redbell` die first (SIGKILL, the OOM killer), or stop running
//! (SIGSTOP, a starved runtime) while the lease runs out, a guardian process
//! stops the command's group: a dead-man timer that `redbell` feeds each
//! confirmed lease deadline (see `process/guardian.rs`). Should the guardian
//! die alone, `redbell` kills the group at once (see `process/supervise.rs`).
//!
//! A forwarded signal is followed by SIGCONT, so a command that stopped
//! itself gets it; a SIGTERM or SIGINT to `redbell` is followed by SIGKILL
//! of the group after the grace (`--kill-grace`, at most a third of the
//! lease), so a command that does not end on it does not hold the lock for
//! ever.
//!
//! `redbell` makes itself a child subreaper (Linux), so orphaned
//! grandchildren are re-parented to it and reaped by it: "no process of the
//! group remains" then holds even where PID 1 does not reap.
//!
//! When stdin is the terminal and `redbell` is in its foreground, the
//! terminal is handed to the command's group (as a shell does for a job),
//! so an interactive command can read it and Ctrl-C reaches it directly; it
//! is taken back before `redbell` exits.

use std::cell::RefCell;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::connect::{GlobalArgs, connect};
use crate::duration;
use crate::fail::Failure;
use crate::process::child::Program;
use crate::process::exit::{self, finish, signal_exit_code};
use crate::process::group::adopt_orphans;
use crate::process::schedule::Schedule;
use crate::process::signals::Signals;
use crate::process::supervise::Frame;

mod hold;
mod lease;

use lease::Renewed;

/// The guarantees, exit codes and environment of `redbell run`, shown by
/// `redbell run --help`.
pub const AFTER_HELP: &str = "\
The command's process group:
  The command and everything it starts stay in its own process group, which
  gets the forwarded signals, and SIGTERM/SIGKILL when the lease is lost.
  The group is dead before the lease can expire on the server. A guardian
  process (`redbell __guard`, started beside the command) kills the group at
  once if redbell itself dies (even by SIGKILL or the OOM killer), and stops
  it before the lease can expire if redbell stops running (SIGSTOP, a
  starved machine) and so cannot renew it. Forwarded signals are followed
  by SIGCONT, so a stopped command gets them; SIGTERM or SIGINT to redbell
  is followed by SIGKILL to the group after --kill-grace (by the guardian
  too, should redbell stop running). If the guardian dies alone, redbell
  kills the group at once (exit 75).
  What escapes: a process that leaves the group (setsid, setpgid, as some
  daemons do), and everything if the guardian is killed (or stopped)
  together with redbell (e.g. a SIGKILL to every process of the user).

Exit codes:
  N        the command's own exit code (0 when it succeeded)
  128+N    the command was killed by signal N (e.g. 137 for SIGKILL, 143 for SIGTERM)
  1        the lock is held elsewhere (-n) or the wait timed out (-w); see -E
  2        usage error: bad option, lock name or duration (a --ttl under 1s), or
           a name in use as another kind of lock
  69       Redis could not be reached (one line on stderr)
  77       the login was refused (wrong password or user), or the ACL denied a
           command, key or channel
  78       configuration: a database the server does not have, a TLS
           certificate that does not verify, an unreadable password or TLS file
  75       the lease was lost, or could not be renewed in time, while the
           command ran: the command's group got SIGTERM, then SIGKILL after
           --kill-grace, and was dead before the lease could expire; or the
           command outlived --max-hold and was stopped the same way; or the
           guardian died and the group got SIGKILL
  126/127  the command could not be started (not executable / not found)

Environment:
  REDBELL_URL, else REDIS_URL: the Redis server when --url is absent (default
  redis://127.0.0.1:6379); REDBELL_PASSWORD: its password (see `redbell --help`
  for every variable). The command does not get REDBELL_PASSWORD, nor a URL
  variable with a password in it. It gets REDBELL_NAME (the lock's name), REDBELL_TOKEN (this
  acquisition's owner token, the lock key's value) and REDBELL_FENCE (the
  fencing token: strictly greater than every earlier one for this lock).";

/// Options of `redbell run`. Everything after CMD's first word is CMD's
/// (`--` may still come first).
#[derive(Debug, clap::Args)]
#[command(
    after_help = crate::connect::REDIS_HINT,
    after_long_help = AFTER_HELP,
    trailing_var_arg = true
)]
pub struct RunArgs {
    /// Fail at once if the lock is held, instead of waiting for it.
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub nonblock: bool,

    /// Wait at most DUR for the lock, then fail. DUR is seconds (`10`,
    /// `1.5`) or has units (`500ms`, `2s`, `1m`), as for every duration
    /// here. Without -n or -w, wait as long as it takes (woken by the
    /// release, no polling).
    #[arg(short = 'w', long, value_name = "DUR", value_parser = duration::parse)]
    pub wait: Option<Duration>,

    /// Exit code when the lock is held (-n) or the wait timed out (-w).
    #[arg(short = 'E', long, value_name = "N", default_value_t = 1)]
    pub conflict_exit_code: u8,

    /// Lease of the lock, renewed every third of it while the command runs.
    /// If redbell dies or loses Redis, the lock frees itself after this long.
    /// If the lease cannot be renewed, the command's group is stopped (see
    /// --kill-grace) so that it is dead before the lease can expire, when
    /// another host may take the lock. At least 1s.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,

    /// When the lease is lost, or the command leaves processes behind in its
    /// group: time between SIGTERM and SIGKILL to the group. At most a third
    /// of --ttl: a longer grace is cut to that. When the lease cannot be
    /// renewed, SIGTERM goes out this long plus a margin (a tenth of --ttl,
    /// at most 1s) before the lease can expire.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub kill_grace: Duration,

    /// Hold the lock at most DUR: then stop the command as for a lost lease
    /// (SIGTERM to its group, SIGKILL after --kill-grace) and exit 75.
    #[arg(long, value_name = "DUR", value_parser = duration::parse_positive)]
    pub max_hold: Option<Duration>,

    /// Take the read side of the read-write lock NAME: shared with the other
    /// -s holders, excluded by an -x holder (and held back while one waits).
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "fair"])]
    pub shared: bool,

    /// Take the write side of the read-write lock NAME: excludes the -s
    /// holders and the other -x holders. (Without -s, -x or --fair, NAME is
    /// a plain mutex; a name is one kind of lock at a time.)
    #[arg(short = 'x', long, conflicts_with = "fair")]
    pub exclusive: bool,

    /// Take the fair mutex NAME: waiters get it in the order they came.
    #[arg(long)]
    pub fair: bool,

    /// Run CMD through `sh -c CMD` instead of a program given after NAME.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "CMD",
        conflicts_with = "argv"
    )]
    pub shell: Option<String>,

    /// Hold one of N permits of the semaphore NAME instead of the lock NAME:
    /// up to N commands run at once across all hosts (consul lock's -n).
    /// Waiters are served in arrival order. Every holder must give the same
    /// N; another count is refused (exit 2) while the semaphore is in use.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with_all = ["shared", "exclusive", "fair"]
    )]
    pub permits: Option<u32>,

    /// Log the wait, acquire, hold and release times to stderr.
    #[arg(short, long)]
    pub verbose: bool,

    /// Name of the lock.
    pub name: String,

    /// The program to run and its arguments. Options after it are its own;
    /// put `--` before a program whose name starts with `-`.
    #[arg(value_name = "CMD", required_unless_present = "shell")]
    pub argv: Vec<OsString>,
}

/// Runs `redbell run`. Returns `Ok` when the command exited 0; any other
/// outcome of a command that ran ends the process here with its exit code,
/// after the lock was released and the command's group is gone.
pub async fn run(global: &GlobalArgs, args: RunArgs) -> Result<(), Failure> {
    // Installed first: from here on these signals are ours to handle (the
    // lock is always released), not the default "die at once".
    let mut signals = Signals::install()?;
    adopt_orphans();

    let client = connect(global).await?;
    let outcome = hold_and_run(&client, &global.target(), &args, &mut signals).await;
    // Releases still queued (an acquire cancelled by a signal or by -w's
    // deadline while in flight) must reach Redis before the process ends.
    finish(&client, outcome).await
}

/// Acquires, runs the command under the lock and releases it; returns
/// redbell's exit code.
async fn hold_and_run(
    client: &redbell::Client,
    url: &str,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let name = args.name.as_str();
    // Acquire, with a fixed lease: `lease.rs` renews it.
    let what = hold::what(args);
    let started = Instant::now();
    if args.verbose && !args.nonblock {
        eprintln!("redbell: waiting for {what} {name:?}");
    }
    let acquire = hold::acquire(client, args);
    let hold = tokio::select! {
        acquired = acquire => acquired
            .map_err(|e| Failure::input(url, &format!("cannot take {what} {name:?}"), &e))?,
        sig = signals.recv() => {
            return Err(Failure::new(
                signal_exit_code(sig),
                format!("{sig} while waiting for {what} {name:?}; not run"),
            ));
        }
    };
    let Some(hold) = hold else {
        let message = match args.wait {
            Some(wait) if !args.nonblock => format!(
                "timed out after {} waiting for {what} {name:?}",
                crate::duration::human(wait)
            ),
            _ => format!("{what} {name:?} is held elsewhere"),
        };
        return Err(Failure::new(args.conflict_exit_code, message));
    };
    let acquired = Instant::now();
    if args.verbose {
        eprintln!(
            "redbell: acquired {what} {name:?} after {:.3}s (fence {}, token {})",
            (acquired - started).as_secs_f64(),
            hold.guard.fence(),
            hold.guard.token()
        );
    }

    // Who holds it, for `redbell status`: `host:pid`, as long as the lease.
    hold.note_owner(args.ttl).await;
    let schedule = Schedule::new(args.ttl, args.kill_grace);
    if args.verbose && schedule.grace < args.kill_grace {
        eprintln!(
            "redbell: --kill-grace cut to {}, a third of the lease",
            crate::duration::human(schedule.grace)
        );
    }

    let what_held = format!("the lease on {what} {name:?}");
    let frame = Frame {
        what: &what_held,
        schedule,
        max_hold_end: args.max_hold.map(|d| acquired + d),
        verbose: args.verbose,
    };
    let lease = Renewed {
        held: &hold,
        ttl: args.ttl,
        failure: RefCell::new(None),
    };
    let program = match &args.shell {
        Some(script) => Program::Shell(script),
        None => Program::Argv(&args.argv),
    };
    let env = [
        ("REDBELL_NAME", args.name.clone()),
        ("REDBELL_TOKEN", hold.guard.token().to_owned()),
        ("REDBELL_FENCE", hold.guard.fence().to_string()),
    ];
    let ended = match frame.run(&lease, program, &env, signals).await {
        Ok(ended) => ended,
        Err(failure) => {
            let _ = hold.unlock().await;
            return Err(failure);
        }
    };

    let mut lost = ended.lost;
    let held_for = acquired.elapsed();
    match hold.unlock().await {
        Ok(()) => {
            if args.verbose {
                eprintln!(
                    "redbell: released {what} {name:?} after holding it {:.3}s",
                    held_for.as_secs_f64()
                );
            }
        }
        Err(_) if lost => {} // already reported
        Err(redbell::Error::NotHeld) => {
            lost = true;
            eprintln!(
                "redbell: {what} {name:?} was no longer held when the command ended \
                 (its lease expired or it was broken)"
            );
        }
        Err(e) => eprintln!(
            "redbell: could not release {what} {name:?} ({e}); it frees itself within --ttl"
        ),
    }
    Ok(exit::code(lost, ended.status))
}
