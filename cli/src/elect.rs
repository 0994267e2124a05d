//! `redbell elect`: run a command only while this process leads an
//! election.
//!
//! Campaign (waiting, event-driven, until the current leader resigns or its
//! lease runs out), run the command in its own process group with
//! `REDBELL_NAME`, `REDBELL_TERM` and `REDBELL_VALUE` in its environment,
//! forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to the group (each followed
//! by SIGCONT; SIGTERM and SIGINT by SIGKILL after `--kill-grace`), and
//! resign once the command and its group are gone. With `--requeue`,
//! campaign again and run it anew in the next term.
//!
//! The library renews the leadership's lease. Should it be lost (renewals
//! not confirmed by the lease's local deadline, which comes before anyone
//! else can be elected), the group gets SIGTERM, then SIGKILL after
//! `--kill-grace`, and `redbell` exits 75. What the command writes should
//! carry `REDBELL_TERM`, the fence, so that a stale leader's writes can be
//! rejected.
//!
//! The guardian process (`process/guardian.rs`, as for `run`) kills the
//! command's group should `redbell` die, and stops it before the lease can
//! expire should the lease not be confirmed in time (`redbell` stopped or
//! starved, or cut off from Redis): the command never outlives the
//! leadership, nor the process that leads. Its dead-man timer is fed
//! from Redis, as the library does not tell when its lease can expire:
//! every twentieth of the lease, `redbell` reads the lock's holder, fence
//! and remaining lease in one script ([`redbell::Client::inspect`]); while
//! the holder's fence is this term (a later acquisition would have raised
//! it), the key lives at least the remaining lease past the instant the
//! reading was *sent*, less the drift margin. Readings are sent a
//! twentieth of the lease apart and answered within another (or dropped);
//! with the library renewing every third, each shows about two thirds of
//! the lease left or more, so the guardian's SIGTERM (the grace, at most a
//! third, and the margin, at most a tenth, before that deadline: over a
//! fifth of the lease after the reading) never comes while Redis answers
//! and the renewals keep time. The first reading is made before the
//! command starts.
//!
//! Each grace `redbell` starts (SIGTERM or SIGINT to it, a lost
//! leadership, processes left behind) is ordered to the guardian too
//! ([`Guardian::kill_by`]): the SIGKILL at its end comes even if `redbell`
//! stops running in it. Should the guardian die on its own, `redbell`
//! SIGKILLs the group at once and exits 75 ([`Guardian::lost`]; why not a
//! new guardian: `run/supervise.rs`).

use std::ffi::OsString;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::connect::{GlobalArgs, connect_with};
use crate::fail::{EX_FAILURE, EX_TEMPFAIL, Failure};
use crate::process::group::{
    adopt_orphans, exit_code, finish, forward, group_alive, reap_adopted, signal_exit_code,
    signal_group, start,
};
use crate::process::guardian::Guardian;
use crate::process::schedule::{Schedule, drift};
use crate::process::signals::Signals;
use crate::run::duration;

/// Options of `redbell elect`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::connect::REDIS_HINT, trailing_var_arg = true, after_long_help = "\
Exit codes:
  N        the command's own exit code (without --requeue)
  128+N    the command was killed by signal N, or redbell got signal N while
           campaigning (the command did not run)
  2        usage error (a --ttl under 1s), or a name in use as another kind
  69       Redis could not be reached
  75       the leadership was lost while the command ran: its group got
           SIGTERM, then SIGKILL after --kill-grace; or its lease could not
           be confirmed in time (redbell was stopped or starved, or Redis
           did not answer) and the guardian stopped the group before the
           lease could expire; or the guardian died and the group got SIGKILL
  77       the login was refused, or the ACL denied a command, key or channel
  78       configuration: a database the server does not have, a TLS
           certificate that does not verify, an unreadable password or TLS file
  126/127  the command could not be started (not executable / not found)

Environment:
  REDBELL_URL, else REDIS_URL: the Redis server when --url is absent;
  REDBELL_PASSWORD: its password (see `redbell --help` for every variable).
  The command does not get REDBELL_PASSWORD, nor a URL variable with a
  password in it. It gets REDBELL_NAME (the election), REDBELL_TERM (this term: the
  fence, strictly greater than every earlier term) and REDBELL_VALUE.")]
pub struct ElectArgs {
    /// The value observers (`redbell leader`) see while this process leads.
    /// Default: `<pid>@<hostname>`.
    #[arg(long, value_name = "V")]
    pub value: Option<String>,

    /// After the command exits, campaign again and run it in the next term
    /// (until a signal, or a lost leadership, ends redbell).
    #[arg(long)]
    pub requeue: bool,

    /// Lease of the leadership, renewed every third of it while leading: a
    /// crashed leader is replaced after this long. At least 1s.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,

    /// When the leadership is lost, redbell gets SIGTERM or SIGINT, or the
    /// command leaves processes behind in its group: time between SIGTERM
    /// and SIGKILL to the group. When the lease cannot be confirmed in
    /// time, the guardian stops the group with at most a third of --ttl.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub kill_grace: Duration,

    /// Log campaigns, terms and resignations to stderr.
    #[arg(short, long)]
    pub verbose: bool,

    /// Name of the election.
    pub name: String,

    /// The program to run and its arguments. Options after it are its own;
    /// put `--` before a program whose name starts with `-`.
    #[arg(value_name = "CMD", required = true)]
    pub argv: Vec<OsString>,
}

/// Runs `redbell elect`; any outcome but success ends the process here,
/// after the leadership was resigned and the command's group is gone.
pub async fn run(global: &GlobalArgs, args: ElectArgs) -> Result<(), Failure> {
    let mut signals = Signals::install()?;
    adopt_orphans();
    let client = connect_with(global, |builder| builder.default_lease(args.ttl)).await?;
    let url = global.target();
    let outcome = lead(&client, &url, &args, &mut signals).await;
    finish(&client, outcome).await
}

/// Campaigns and runs the command in each term; returns the exit code.
async fn lead(
    client: &redbell::Client,
    url: &str,
    args: &ElectArgs,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let name = args.name.as_str();
    let election = client.election(name);
    let value = args.value.clone().unwrap_or_else(default_value);
    let schedule = Schedule::new(args.ttl, args.kill_grace);
    loop {
        if args.verbose {
            eprintln!("redbell: campaigning in {name:?} as {value:?}");
        }
        let leadership = tokio::select! {
            won = election.campaign(value.as_str()) => won
                .map_err(|e| Failure::input(url, &format!("cannot campaign in {name:?}"), &e))?,
            sig = signals.recv() => {
                return Err(Failure::new(
                    signal_exit_code(sig),
                    format!("{sig} while campaigning in {name:?}; not run"),
                ));
            }
        };
        let term = leadership.term();
        if args.verbose {
            eprintln!("redbell: leading {name:?} in term {term}");
        }
        // The guardian stops the command's group should redbell die first,
        // or not confirm the lease in time; it has the deadline before the
        // command starts.
        let guardian = Guardian::start(schedule)?;
        match confirmed_deadline(client, name, term, args.ttl / 3).await {
            Ok(deadline) => guardian.feed(deadline),
            Err(why) => {
                let _ = guardian.dismiss();
                let _ = leadership.resign().await;
                return Err(Failure::new(
                    EX_TEMPFAIL,
                    format!(
                        "cannot confirm the lease of the leadership of {name:?} ({why}); the \
                         command was not run"
                    ),
                ));
            }
        }
        let (mut child, group) = match spawn(args, term, &value, &guardian) {
            Ok(spawned) => spawned,
            Err(failure) => {
                let _ = guardian.dismiss();
                let _ = leadership.resign().await;
                return Err(failure);
            }
        };
        let mut lost = false;
        let mut signalled = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        // The guardian is alive (as far as we know).
        let mut guarded = true;
        let status = {
            let feeding = keep_fed(client, name, term, args.ttl, &guardian);
            tokio::pin!(feeding);
            loop {
                tokio::select! {
                    status = child.wait() => break status,
                    sig = signals.recv() => {
                        signalled = true;
                        forward(group, sig);
                        // A command that does not end on it (it ignores it,
                        // or is stopped) must not lead for ever.
                        if matches!(sig, Signal::SIGTERM | Signal::SIGINT) && kill_at.is_none() {
                            kill_at = Some(grace_started(&guardian, args.kill_grace));
                        }
                    }
                    () = guardian.lost(), if guarded => {
                        guarded = false;
                        lost = true;
                        eprintln!(
                            "redbell: the guardian of the command died: sending SIGKILL to the \
                             command's process group, which nothing would stop should redbell \
                             die"
                        );
                        signal_group(group, Signal::SIGKILL);
                        kill_at = None;
                    }
                    () = leadership.lost(), if !lost => {
                        lost = true;
                        eprintln!(
                            "redbell: lost the leadership of {name:?} (term {term}): sending \
                             SIGTERM to the command's process group (SIGKILL after {})",
                            crate::run::duration::human(args.kill_grace)
                        );
                        forward(group, Signal::SIGTERM);
                        kill_at = Some(grace_started(&guardian, args.kill_grace));
                    }
                    () = sleep_until(kill_at) => {
                        eprintln!(
                            "redbell: the command's process group outlived the grace: sending \
                             it SIGKILL"
                        );
                        signal_group(group, Signal::SIGKILL);
                        kill_at = None;
                    }
                    () = &mut feeding => {}
                }
            }
        };
        end_group(group, args.kill_grace, &guardian).await;
        if guardian.dismiss() && !lost {
            lost = true;
            eprintln!(
                "redbell: the guardian stopped the command: the lease of the leadership of \
                 {name:?} (term {term}) was not confirmed in time (redbell was stopped or \
                 starved, or Redis did not answer)"
            );
        }
        match leadership.resign().await {
            Ok(()) => {
                if args.verbose {
                    eprintln!("redbell: resigned term {term} of {name:?}");
                }
            }
            Err(_) if lost => {}
            Err(redbell::Error::NotHeld) => {
                lost = true;
                eprintln!(
                    "redbell: the leadership of {name:?} (term {term}) was lost when the \
                     command ended"
                );
            }
            Err(e) => eprintln!(
                "redbell: could not resign {name:?} ({e}); the lease frees it within --ttl"
            ),
        }
        if lost {
            return Ok(EX_TEMPFAIL);
        }
        let code = match status {
            Ok(status) => exit_code(status),
            Err(e) => {
                eprintln!("redbell: could not wait for the command: {e}");
                EX_FAILURE
            }
        };
        if !args.requeue || signalled {
            return Ok(code);
        }
    }
}

/// Starts the command in a process group of its own, which `guardian`
/// learns of before the command runs.
fn spawn(
    args: &ElectArgs,
    term: u64,
    value: &str,
    guardian: &Guardian,
) -> Result<(tokio::process::Child, nix::unistd::Pid), Failure> {
    let program = args.argv.first().cloned().unwrap_or_default();
    let mut command = tokio::process::Command::new(&program);
    command
        .args(args.argv.get(1..).unwrap_or_default())
        .env("REDBELL_NAME", &args.name)
        .env("REDBELL_TERM", term.to_string())
        .env("REDBELL_VALUE", value);
    crate::connect::strip_secrets(&mut command);
    start(command, &program, guardian)
}

/// The group got SIGTERM now: returns when its grace ends, and has
/// `guardian` SIGKILL the group then, should `redbell` not run then.
fn grace_started(guardian: &Guardian, grace: Duration) -> tokio::time::Instant {
    let now = Instant::now();
    guardian.kill_by(now + grace);
    tokio::time::Instant::from_std(now + grace)
}

/// Stops what the command left in its group: SIGTERM, SIGKILL after the
/// grace (by `guardian` too); returns once the group is gone (or could not
/// be reaped).
async fn end_group(group: nix::unistd::Pid, grace: Duration, guardian: &Guardian) {
    reap_adopted(None);
    if !group_alive(group) {
        return;
    }
    eprintln!("redbell: the command left processes in its process group: sending them SIGTERM");
    forward(group, Signal::SIGTERM);
    let started = tokio::time::Instant::now();
    guardian.kill_by(started.into_std() + grace);
    let mut killed = false;
    while group_alive(group) {
        if !killed && started.elapsed() >= grace {
            signal_group(group, Signal::SIGKILL);
            killed = true;
        }
        if started.elapsed() >= grace + Duration::from_secs(2) {
            eprintln!("redbell: processes of the command's group could not be reaped");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{}@{host}", std::process::id())
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The earliest instant at which the leadership's lock key can expire, read
/// from Redis (see the module doc): the holder's remaining lease from when
/// the reading was sent, less the drift margin. An error when the lock is no
/// longer this term's, or Redis does not answer within `within`.
async fn confirmed_deadline(
    client: &redbell::Client,
    name: &str,
    term: u64,
    within: Duration,
) -> Result<Instant, String> {
    let sent = Instant::now();
    let info = match tokio::time::timeout(within, client.inspect(name)).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => {
            return Err(format!(
                "no answer within {}",
                crate::run::duration::human(within)
            ));
        }
    };
    match (info.holder.and_then(|holder| holder.ttl), info.fence) {
        (Some(left), Some(fence)) if fence == term => {
            Ok((sent + left).checked_sub(drift(left)).unwrap_or(sent))
        }
        _ => Err(format!("the lock is no longer held in term {term}")),
    }
}

/// Feeds `guardian` a confirmed deadline every twentieth of `ttl` (a
/// reading that fails feeds nothing: the guardian keeps the earlier
/// deadline). Never resolves; drop it to stop.
async fn keep_fed(
    client: &redbell::Client,
    name: &str,
    term: u64,
    ttl: Duration,
    guardian: &Guardian,
) {
    let every = ttl / 20;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Ok(deadline) = confirmed_deadline(client, name, term, every).await {
            guardian.feed(deadline);
        }
    }
}
