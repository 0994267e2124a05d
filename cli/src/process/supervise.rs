//! The frame `run` and `elect` run their command in ([`Frame::run`]):
//! start the guardian and feed it the lease's deadline, start the command
//! (`child.rs`), hand it the terminal (`terminal.rs`), then, until the
//! command and the rest of its group are gone, forward signals, keep the
//! lease (a [`Lease`]: `run` renews its lock, `elect` watches the library
//! renew the leadership) and stop the group in time; dismiss the guardian.
//!
//! The group must be dead before the lock's key can expire on the server,
//! because another host may take the lock (or be elected) from then on. So
//! a lease that was not renewed in time is treated as lost *before* its
//! deadline: the group gets SIGTERM at the deadline − the grace − a margin,
//! and SIGKILL at the deadline − the margin at the latest (`schedule.rs`).
//! The deadline is the library's own (`deadline()` on the guard: the last
//! confirmed renewal's send instant, plus the lease, minus the drift
//! margin). The guardian keeps to the same schedule should this loop not
//! run; this loop keeps to it should the guardian not run.
//!
//! A forwarded signal is followed by SIGCONT; a SIGTERM or SIGINT starts
//! the grace as a lost lease does: SIGKILL once it is over (or at the
//! deadline − the margin, if sooner).
//!
//! Every grace this loop starts (a SIGTERM or SIGINT to `redbell`, a lost
//! lease, `--max-hold`, processes left behind) is also ordered to the
//! guardian ([`Guardian::kill_by`]), so the SIGKILL at its end comes even
//! if `redbell` stops running in it.
//!
//! Should the guardian die on its own (the OOM killer, a stray `kill -9`),
//! the command is unguarded: were `redbell` to die or freeze next, nothing
//! would stop it before the lease runs out. So `redbell` sends the group
//! SIGKILL at once ([`Guardian::lost`]) and reports a lost lease (75), as
//! the guardian does when `redbell` dies: each kills the group when the
//! other is gone. (Starting a new guardian would keep the command, but it
//! leaves the group unguarded while it starts, under the very memory
//! pressure that may have killed the first, and still needs this path when
//! it cannot start.)

use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::child::{self, Program};
use super::group::{forward, group_alive, reap_adopted, signal_group};
use super::guardian::Guardian;
use super::schedule::Schedule;
use super::signals::Signals;
use super::terminal::Terminal;
use crate::fail::{EX_TEMPFAIL, Failure};

/// The lease a command runs under, as the frame sees it.
pub(crate) trait Lease {
    /// The local instant until which the lease is known held (the guard's
    /// `deadline()`): the lock's key cannot have expired on the server
    /// before then.
    fn deadline(&self) -> Instant;

    /// Why the latest renewal failed, if it did and the lease knows: for
    /// the message when the command is stopped for it.
    fn failure(&self) -> Option<String>;

    /// Keeps the lease renewed (or watches it renewed), feeding `guardian`
    /// each deadline confirmed, soon enough for the guardian's schedule.
    /// Resolves only when the lease is known lost; dropping it stops it.
    async fn keep(&self, guardian: &Guardian);
}

/// What the frame needs to know besides the lease.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    /// What is held, for messages: `the lease on lock "x"`, `the leadership
    /// of "x" (term 7)`.
    pub(crate) what: &'a str,
    pub(crate) schedule: Schedule,
    /// `--max-hold` after the acquisition (`run` only).
    pub(crate) max_hold_end: Option<Instant>,
    pub(crate) verbose: bool,
}

/// How the command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: io::Result<ExitStatus>,
    /// The lease was lost, could not be renewed in time, or outlived
    /// `--max-hold`, or the guardian died or acted: the group was stopped
    /// for it (and it was reported on stderr).
    pub(crate) lost: bool,
    /// `redbell` got a signal and forwarded it.
    pub(crate) signalled: bool,
}

/// The group is being stopped: SIGTERM was sent at `since`.
#[derive(Debug, Clone, Copy)]
struct Stop {
    since: Instant,
    killed: Option<Instant>,
}

impl Frame<'_> {
    /// Runs `program` (with `env`) under `lease`, and returns once it and
    /// every process of its group are gone. An error means the command did
    /// not run (the guardian could not start, the lease ran short before
    /// the command could, or the program could not be started); the caller
    /// still holds, and releases, the lease.
    pub(crate) async fn run(
        &self,
        lease: &impl Lease,
        program: Program<'_>,
        env: &[(&str, String)],
        signals: &mut Signals,
    ) -> Result<Ended, Failure> {
        // The guardian stops the command's group should redbell die first,
        // or not renew the lease in time. It has the deadline before the
        // command starts.
        let guardian = Guardian::start(self.schedule)?;
        let deadline = lease.deadline();
        guardian.feed(deadline);
        if Instant::now() >= self.schedule.term_at(deadline) {
            // The acquisition's lease ran short before the command could
            // start (a starved machine, a slow guardian): it would be
            // stopped at once.
            let _ = guardian.dismiss();
            return Err(Failure::new(
                EX_TEMPFAIL,
                format!(
                    "{} ran short before the command could start; the command was not run",
                    self.what
                ),
            ));
        }
        let terminal = Terminal::foreground();
        let (mut child, group) = match child::spawn(program, env, &guardian) {
            Ok(spawned) => spawned,
            Err(failure) => {
                let _ = guardian.dismiss();
                return Err(failure);
            }
        };
        let terminal = terminal.map(|t| t.hand_to(group));
        let supervisor = Supervisor {
            frame: self,
            group,
            lease,
            guardian: &guardian,
        };
        let mut ended = supervisor
            .supervise(&mut child, signals, terminal.as_ref())
            .await;
        // The command and its whole group are gone; the lease is no longer
        // kept by this frame.
        let stopped_by_guardian = guardian.dismiss();
        if let Some(terminal) = terminal {
            terminal.take_back();
        }
        if stopped_by_guardian && !ended.lost {
            ended.lost = true;
            eprintln!(
                "redbell: the guardian stopped the command: {} was not renewed in time \
                 (redbell was stopped or starved)",
                self.what
            );
        }
        Ok(ended)
    }
}

/// One command's supervision.
struct Supervisor<'a, L> {
    frame: &'a Frame<'a>,
    /// The command's process group (its pid).
    group: Pid,
    lease: &'a L,
    guardian: &'a Guardian,
}

/// When an unrenewed lease must have its group stopped.
fn stop_due(plan: Schedule, lease: &impl Lease) -> Instant {
    plan.term_at(lease.deadline())
}

/// When a group being stopped gets SIGKILL.
fn kill_due(plan: Schedule, lease: &impl Lease, stop: Stop) -> Instant {
    (stop.since + plan.grace).min(plan.kill_at(lease.deadline()))
}

impl<L: Lease> Supervisor<'_, L> {
    /// Runs until the command and every process of its group are gone.
    /// The lease is no longer kept when this returns.
    async fn supervise(
        &self,
        child: &mut tokio::process::Child,
        signals: &mut Signals,
        terminal: Option<&Terminal>,
    ) -> Ended {
        let plan = self.frame.schedule;
        let grace = plan.grace;
        let (what, verbose) = (self.frame.what, self.frame.verbose);
        let renewal = self.lease.keep(self.guardian);
        tokio::pin!(renewal);
        let mut renewing = true;
        let mut status = None;
        let mut stop: Option<Stop> = None;
        let mut lost = false;
        let mut signalled = false;
        // The guardian is alive (as far as we know).
        let mut guarded = true;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A renewal moves the deadline on without ending this turn, so
            // the timers below may fire early: each checks again.
            let stop_at = stop_due(plan, self.lease);
            let kill_at = stop.map(|s| kill_due(plan, self.lease, s));
            tokio::select! {
                done = child.wait(), if status.is_none() => {
                    status = Some(done);
                    if !group_alive(self.group) {
                        break;
                    }
                    if stop.is_none() {
                        eprintln!(
                            "redbell: the command left processes in its process group: sending \
                             them SIGTERM (SIGKILL after {})",
                            crate::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                sig = signals.recv() => {
                    signalled = true;
                    if verbose {
                        eprintln!("redbell: forwarding {sig} to the command's process group");
                    }
                    forward(self.group, sig);
                    // A command that does not end on it (it ignores it, or
                    // is stopped) must not hold the lock for ever.
                    if matches!(sig, Signal::SIGTERM | Signal::SIGINT) && stop.is_none() {
                        stop = Some(self.grace_started());
                    }
                }
                () = self.guardian.lost(), if guarded => {
                    guarded = false;
                    lost = true;
                    eprintln!(
                        "redbell: the guardian of the command died: sending SIGKILL to the \
                         command's process group, which nothing would stop should redbell die"
                    );
                    signal_group(self.group, Signal::SIGKILL);
                    let now = Instant::now();
                    stop = Some(Stop {
                        since: stop.map_or(now, |s| s.since),
                        killed: Some(now),
                    });
                }
                () = &mut renewal, if renewing => {
                    renewing = false;
                    lost = true;
                    if stop.is_none() {
                        eprintln!(
                            "redbell: lost {what}: sending SIGTERM to the command's process \
                             group (SIGKILL after {})",
                            crate::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                () = sleep_until(Some(stop_at)), if stop.is_none() => {
                    if Instant::now() >= stop_due(plan, self.lease) {
                        lost = true;
                        let why = self.lease.failure().map(|f| format!(" ({f})"));
                        eprintln!(
                            "redbell: could not renew {what} in time{}: stopping the command \
                             before the lease can expire: SIGTERM to its process group, SIGKILL \
                             after {}",
                            why.unwrap_or_default(),
                            crate::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                () = sleep_until(self.frame.max_hold_end), if stop.is_none() => {
                    lost = true;
                    eprintln!(
                        "redbell: held {what} for --max-hold: stopping the command as for a \
                         lost lease: SIGTERM to its process group, SIGKILL after {}",
                        crate::duration::human(grace)
                    );
                    stop = Some(self.terminate());
                }
                () = sleep_until(kill_at), if stop.is_some_and(|s| s.killed.is_none()) => {
                    if let Some(s) = stop.as_mut()
                        && Instant::now() >= kill_due(plan, self.lease, *s)
                    {
                        eprintln!(
                            "redbell: the command's process group outlived the grace: sending \
                             it SIGKILL"
                        );
                        signal_group(self.group, Signal::SIGKILL);
                        s.killed = Some(Instant::now());
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(10)), if status.is_some() => {
                    if !group_alive(self.group) {
                        break;
                    }
                    // SIGKILL cannot be ignored; what remains is a zombie
                    // some other parent has not reaped. Do not wait forever.
                    if let Some(killed) = stop.and_then(|s| s.killed)
                        && killed.elapsed() >= Duration::from_secs(2)
                    {
                        eprintln!("redbell: processes of the command's group could not be reaped");
                        break;
                    }
                }
                _ = tick.tick(), if status.is_none() => {
                    reap_adopted(Some(self.group.as_raw()));
                    if let Some(terminal) = terminal {
                        terminal.resume_if_stopped(self.group);
                    }
                }
            }
        }
        reap_adopted(None);
        Ended {
            // The loop only ends once the command was waited for.
            status: status
                .unwrap_or_else(|| Err(io::Error::other("the command was not waited for"))),
            lost,
            signalled,
        }
    }

    /// Sends SIGTERM to the group (and SIGCONT) and starts the grace.
    fn terminate(&self) -> Stop {
        forward(self.group, Signal::SIGTERM);
        self.grace_started()
    }

    /// The group got SIGTERM now: the grace starts, and the guardian is
    /// told to SIGKILL the group at its end, should this loop not run then.
    fn grace_started(&self) -> Stop {
        let since = Instant::now();
        self.guardian.kill_by(since + self.frame.schedule.grace);
        Stop {
            since,
            killed: None,
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
