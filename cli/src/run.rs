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
//! `redbell` makes itself a child subreaper (Linux), so orphaned
//! grandchildren are re-parented to it and reaped by it: "no process of the
//! group remains" then holds even where PID 1 does not reap.
//!
//! When stdin is the terminal and `redbell` is in its foreground, the
//! terminal is handed to the command's group (as a shell does for a job),
//! so an interactive command can read it and Ctrl-C reaches it directly; it
//! is taken back before `redbell` exits.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::fail::{EX_FAILURE, EX_TEMPFAIL, Failure};

mod child;
mod duration;
mod signals;
mod terminal;

use child::{adopt_orphans, drain_group, reap_adopted, signal_group};
use signals::Signals;
use terminal::Terminal;

/// Exit codes of `redbell run`, shown by `redbell run --help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  N        the command's own exit code (0 when it succeeded)
  128+N    the command was killed by signal N (e.g. 137 for SIGKILL, 143 for SIGTERM)
  1        the lock is held elsewhere (-n) or the wait timed out (-w); see -E
  2        usage error: bad option, lock name or duration
  69       Redis could not be reached (one line on stderr)
  75       the lease was lost while the command ran (the command's group got
           SIGTERM, then SIGKILL after --kill-grace)
  126/127  the command could not be started (not executable / not found)

Environment:
  REDIS_URL       the Redis server when --url is absent (default redis://127.0.0.1:6379)
  The command gets REDBELL_NAME (the lock's name), REDBELL_TOKEN (this
  acquisition's owner token, the lock key's value) and REDBELL_FENCE (the
  fencing token: strictly greater than every earlier one for this lock).";

/// Options of `redbell run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES)]
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
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,

    /// When the lease is lost, or the command leaves processes behind in its
    /// group: time between SIGTERM and SIGKILL to the group.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub kill_grace: Duration,

    /// Run CMD through `sh -c CMD` instead of a program given after `--`.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "CMD",
        conflicts_with = "argv"
    )]
    pub shell: Option<String>,

    /// Log the wait, acquire, hold and release times to stderr.
    #[arg(short, long)]
    pub verbose: bool,

    /// Name of the lock.
    pub name: String,

    /// The program to run and its arguments (after `--`).
    #[arg(last = true, value_name = "CMD", required_unless_present = "shell")]
    pub argv: Vec<OsString>,
}

/// Runs `redbell run`. Returns `Ok` when the command exited 0; any other
/// outcome of a command that ran ends the process here with its exit code,
/// after the lock was released and the command's group is gone.
pub async fn run(url: &str, args: RunArgs) -> Result<(), Failure> {
    let name = args.name.as_str();
    // Installed first: from here on these signals are ours to handle (the
    // lock is always released), not the default "die at once".
    let mut signals = Signals::install()?;
    adopt_orphans();

    let client = redbell::Client::builder(url)
        .default_lease(args.ttl)
        .renew_every(args.ttl / 3)
        .connect()
        .await
        .map_err(|e| Failure::input(url, "cannot connect to Redis", &e))?;

    // Acquire.
    let mutex = client.mutex(name);
    let started = Instant::now();
    if args.verbose && !args.nonblock {
        eprintln!("redbell: waiting for lock {name:?}");
    }
    let acquire = async {
        if args.nonblock {
            mutex.try_lock().await
        } else if let Some(wait) = args.wait {
            match mutex.lock_timeout(wait).await {
                Ok(guard) => Ok(Some(guard)),
                Err(redbell::Error::Timeout) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            mutex.lock().await.map(Some)
        }
    };
    let guard = tokio::select! {
        acquired = acquire => acquired
            .map_err(|e| Failure::input(url, &format!("cannot lock {name:?}"), &e))?,
        sig = signals.recv() => {
            return Err(Failure::new(
                signal_exit_code(sig),
                format!("{sig} while waiting for lock {name:?}; not run"),
            ));
        }
    };
    let Some(guard) = guard else {
        let message = match args.wait {
            Some(wait) if !args.nonblock => format!(
                "timed out after {} waiting for lock {name:?}",
                humantime::format_duration(wait)
            ),
            _ => format!("lock {name:?} is held elsewhere"),
        };
        return Err(Failure::new(args.conflict_exit_code, message));
    };
    let acquired = Instant::now();
    if args.verbose {
        eprintln!(
            "redbell: acquired lock {name:?} after {:.3}s (fence {}, token {})",
            (acquired - started).as_secs_f64(),
            guard.fence(),
            guard.token()
        );
    }

    // Spawn the command in its own process group.
    let (program, mut command) = match &args.shell {
        Some(script) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(script);
            (OsString::from("sh"), c)
        }
        None => {
            // clap guarantees a non-empty argv when -c is absent.
            let program = args.argv.first().cloned().unwrap_or_default();
            let mut c = tokio::process::Command::new(&program);
            c.args(&args.argv[1..]);
            (program, c)
        }
    };
    command
        .env("REDBELL_NAME", name)
        .env("REDBELL_TOKEN", guard.token())
        .env("REDBELL_FENCE", guard.fence().to_string())
        .process_group(0);
    let terminal = Terminal::foreground();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let _ = guard.unlock().await;
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    // A spawned child has an id until it has been waited for.
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let group = Pid::from_raw(pid);
    let terminal = terminal.map(|t| t.hand_to(group));

    // Supervise: wait for the command, forward signals, watch the lease.
    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let status = loop {
        let grace_end = lost_at.map(|t| t + args.kill_grace);
        tokio::select! {
            status = child.wait() => break status,
            sig = signals.recv() => {
                if args.verbose {
                    eprintln!("redbell: forwarding {sig} to the command's process group");
                }
                signal_group(group, sig);
            }
            () = guard.lost(), if lost_at.is_none() => {
                eprintln!(
                    "redbell: lost the lease on lock {name:?}: sending SIGTERM to the command's \
                     process group (SIGKILL after {})",
                    humantime::format_duration(args.kill_grace)
                );
                signal_group(group, Signal::SIGTERM);
                lost_at = Some(Instant::now());
            }
            () = sleep_until(grace_end), if grace_end.is_some() && !killed => {
                eprintln!("redbell: the command outlived --kill-grace: sending SIGKILL to its process group");
                signal_group(group, Signal::SIGKILL);
                killed = true;
            }
            _ = tick.tick() => {
                reap_adopted(Some(pid));
                if let Some(terminal) = &terminal {
                    terminal.resume_if_stopped(group);
                }
            }
        }
    };

    // The command is gone; so must be the rest of its group, before the
    // lock is released.
    let deadline = lost_at.map_or(Instant::now() + args.kill_grace, |t| t + args.kill_grace);
    drain_group(group, deadline, killed).await;
    if let Some(terminal) = terminal {
        terminal.take_back();
    }

    let mut lost = lost_at.is_some() || guard.is_lost();
    let held = acquired.elapsed();
    match guard.unlock().await {
        Ok(()) => {
            if args.verbose {
                eprintln!(
                    "redbell: released lock {name:?} after holding it {:.3}s",
                    held.as_secs_f64()
                );
            }
        }
        Err(_) if lost => {} // already reported
        Err(redbell::Error::NotHeld) => {
            lost = true;
            eprintln!(
                "redbell: lock {name:?} was no longer held when the command ended \
                 (its lease expired or it was broken)"
            );
        }
        Err(e) => eprintln!(
            "redbell: could not release lock {name:?} ({e}); it frees itself within --ttl"
        ),
    }

    let code = if lost {
        EX_TEMPFAIL
    } else {
        match status {
            Ok(status) => exit_code(status),
            Err(e) => {
                eprintln!("redbell: could not wait for the command: {e}");
                EX_FAILURE
            }
        }
    };
    if code == 0 {
        Ok(())
    } else {
        // Everything is cleaned up: the lock is released, the group gone.
        std::process::exit(i32::from(code))
    }
}

/// The command's exit code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EX_FAILURE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(EX_FAILURE),
        (None, None) => EX_FAILURE,
    }
}

fn signal_exit_code(sig: Signal) -> u8 {
    u8::try_from(128 + sig as i32).unwrap_or(EX_FAILURE)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
