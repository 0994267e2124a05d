//! `redbell elect`: run a command only while this process leads an
//! election.
//!
//! Campaign (waiting, event-driven, until the current leader resigns or its
//! lease runs out), run the command in its own process group with
//! `REDBELL_NAME`, `REDBELL_TERM` and `REDBELL_VALUE` in its environment,
//! forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to the group (each followed
//! by SIGCONT; SIGTERM and SIGINT by SIGKILL after `--kill-grace`), and
//! resign once the command and its group are gone. With `--requeue`,
//! campaign again and run it anew in the next term. The terminal is handed
//! to the group while it runs, as `run` does.
//!
//! The library renews the leadership's lease. The command runs in the
//! frame `run` uses (`process/supervise.rs`): the guardian is fed the
//! leadership's [`deadline`](redbell::Leadership::deadline) (read every
//! twentieth of the lease, so a renewal a third of it apart reaches the
//! guardian long before its SIGTERM, a grace and a margin ahead of the
//! deadline), and the group is stopped on the same schedule should the
//! lease not be renewed in time: SIGTERM at the deadline − the grace − the
//! margin, SIGKILL at the deadline − the margin, before anyone else can be
//! elected; `redbell` then exits 75. Should the library find the
//! leadership lost before that (taken or gone), the group gets SIGTERM at
//! once. The guardian kills the group should `redbell` die, and keeps the
//! schedule should it be frozen. What the command writes should carry
//! `REDBELL_TERM`, the fence, so that a stale leader's writes can be
//! rejected.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::connect::{GlobalArgs, connect_with};
use crate::duration;
use crate::fail::Failure;
use crate::process::child::Program;
use crate::process::exit::{self, finish, signal_exit_code};
use crate::process::group::adopt_orphans;
use crate::process::guardian::Guardian;
use crate::process::schedule::Schedule;
use crate::process::signals::Signals;
use crate::process::supervise::{Frame, Lease};

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
           be renewed in time (redbell was stopped or starved, or Redis did
           not answer) and redbell or its guardian stopped the group before
           the lease could expire; or the guardian died and the group got
           SIGKILL
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
    /// and SIGKILL to the group. At most a third of --ttl: when the lease
    /// cannot be renewed in time, SIGTERM goes out this long plus a margin
    /// (a tenth of --ttl, at most 1s) before the lease can expire.
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
        let what = format!("the leadership of {name:?} (term {term})");
        let frame = Frame {
            what: &what,
            schedule,
            max_hold_end: None,
            verbose: args.verbose,
        };
        let lease = Leading {
            leadership: &leadership,
            ttl: args.ttl,
        };
        let env = [
            ("REDBELL_NAME", args.name.clone()),
            ("REDBELL_TERM", term.to_string()),
            ("REDBELL_VALUE", value.clone()),
        ];
        let ended = match frame
            .run(&lease, Program::Argv(&args.argv), &env, signals)
            .await
        {
            Ok(ended) => ended,
            Err(failure) => {
                let _ = leadership.resign().await;
                return Err(failure);
            }
        };
        let mut lost = ended.lost;
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
        let code = exit::code(lost, ended.status);
        if lost || !args.requeue || ended.signalled {
            return Ok(code);
        }
    }
}

/// The leadership as the frame sees it: renewed by the library.
struct Leading<'a> {
    leadership: &'a redbell::Leadership,
    ttl: Duration,
}

impl Lease for Leading<'_> {
    fn deadline(&self) -> Instant {
        self.leadership.deadline().into_std()
    }

    fn failure(&self) -> Option<String> {
        None // the library's renewal task keeps its reasons (logged at debug)
    }

    /// Feeds `guardian` the leadership's deadline every twentieth of the
    /// lease; resolves when the library reports it lost.
    async fn keep(&self, guardian: &Guardian) {
        let every = self.ttl / 20;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.leadership.lost() => return,
                _ = ticks.tick() => guardian.feed(self.deadline()),
            }
        }
    }
}

fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{}@{host}", std::process::id())
}
