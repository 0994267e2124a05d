//! `redbell elect`: run a command only while this process leads an
//! election.
//!
//! Campaign (waiting, event-driven, until the current leader resigns or its
//! lease runs out), run the command in its own process group with
//! `REDBELL_NAME`, `REDBELL_TERM` and `REDBELL_VALUE` in its environment,
//! forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to the group, and resign
//! once the command and its group are gone. With `--requeue`, campaign
//! again and run it anew in the next term.
//!
//! The library renews the leadership's lease. Should it be lost (renewals
//! not confirmed by the lease's local deadline, which comes before anyone
//! else can be elected), the group gets SIGTERM, then SIGKILL after
//! `--kill-grace`, and `redbell` exits 75. The group may thus outlive the
//! leadership by up to the grace: what it writes should carry
//! `REDBELL_TERM`, the fence, so that a stale leader's writes can be
//! rejected. (`redbell run` stops its command *before* the lease can
//! expire; `elect` keeps to the simpler guarantee.) Should `redbell` die
//! first (SIGKILL, the OOM killer), `run`'s guardian process kills the
//! command's group, so the command never outlives the process that leads.
//! The process-group handling (signals to the group, reaping adopted
//! orphans) is `run`'s too.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::connect::{GlobalArgs, connect_with};
use crate::fail::{EX_FAILURE, EX_TEMPFAIL, Failure};
use crate::run::child::{adopt_orphans, finish, group_alive, reap_adopted, signal_group, start};
use crate::run::duration;
use crate::run::guardian::Guardian;
use crate::run::signals::Signals;

/// Options of `redbell elect`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Exit codes:
  N        the command's own exit code (without --requeue)
  128+N    the command was killed by signal N, or redbell got signal N while
           campaigning (the command did not run)
  2        usage error
  69       Redis could not be reached
  75       the leadership was lost while the command ran: its group got
           SIGTERM, then SIGKILL after --kill-grace

Environment:
  REDIS_URL       the Redis server when --url is absent
  The command gets REDBELL_NAME (the election), REDBELL_TERM (this term: the
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
    /// crashed leader is replaced after this long.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse_ttl)]
    pub ttl: Duration,

    /// When the leadership is lost, or the command leaves processes behind
    /// in its group: time between SIGTERM and SIGKILL to the group.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    pub kill_grace: Duration,

    /// Log campaigns, terms and resignations to stderr.
    #[arg(short, long)]
    pub verbose: bool,

    /// Name of the election.
    pub name: String,

    /// The program to run and its arguments (after `--`).
    #[arg(last = true, value_name = "CMD", required = true)]
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
        // The guardian kills the command's group should redbell die first.
        let guardian = Guardian::start()?;
        let (mut child, group) = match spawn(args, term, &value, &guardian) {
            Ok(spawned) => spawned,
            Err(failure) => {
                guardian.dismiss();
                let _ = leadership.resign().await;
                return Err(failure);
            }
        };
        let mut lost = false;
        let mut signalled = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                sig = signals.recv() => {
                    signalled = true;
                    signal_group(group, sig);
                }
                () = leadership.lost(), if !lost => {
                    lost = true;
                    eprintln!(
                        "redbell: lost the leadership of {name:?} (term {term}): sending SIGTERM \
                         to the command's process group (SIGKILL after {})",
                        humantime::format_duration(args.kill_grace)
                    );
                    signal_group(group, Signal::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + args.kill_grace);
                }
                () = sleep_until(kill_at) => {
                    signal_group(group, Signal::SIGKILL);
                    kill_at = None;
                }
            }
        };
        end_group(group, args.kill_grace).await;
        guardian.dismiss();
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
    start(command, &program, guardian)
}

/// Stops what the command left in its group: SIGTERM, SIGKILL after the
/// grace; returns once the group is gone (or could not be reaped).
async fn end_group(group: nix::unistd::Pid, grace: Duration) {
    reap_adopted(None);
    if !group_alive(group) {
        return;
    }
    eprintln!("redbell: the command left processes in its process group: sending them SIGTERM");
    signal_group(group, Signal::SIGTERM);
    let started = tokio::time::Instant::now();
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
