//! While the command runs: wait for it and for the rest of its group,
//! forward signals, keep the lease renewed, and stop the group in time.
//!
//! The group must be dead before the lock's key can expire on the server,
//! because another host may take the lock from then on. So a lease that was
//! not renewed in time is treated as lost *before* its deadline: the group
//! gets SIGTERM at the deadline − the grace − a margin, and SIGKILL at the
//! deadline − the margin at the latest (`process/schedule.rs`). The
//! guardian keeps to the same schedule should this loop not run.
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

use super::hold::Held;
use super::lease::Lease;
use super::terminal::Terminal;
use crate::process::group::{forward, group_alive, reap_adopted, signal_group};
use crate::process::guardian::Guardian;
use crate::process::schedule::Schedule;
use crate::process::signals::Signals;

/// When an unrenewed lease must have its group stopped.
fn stop_due(plan: Schedule, lease: &Lease) -> Instant {
    plan.term_at(lease.deadline())
}

/// When a group being stopped gets SIGKILL.
fn kill_due(plan: Schedule, lease: &Lease, stop: Stop) -> Instant {
    (stop.since + plan.grace).min(plan.kill_at(lease.deadline()))
}

/// How the command ended.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) status: io::Result<ExitStatus>,
    /// The lease was lost, could not be renewed in time, or outlived
    /// `--max-hold`: the group was stopped for it.
    pub(super) lost: bool,
}

/// What `supervise` needs to know.
#[derive(Debug)]
pub(super) struct Supervisor<'a> {
    pub(super) name: &'a str,
    /// The command's process group (its pid).
    pub(super) group: Pid,
    pub(super) lease: &'a Lease,
    /// Fed each renewed deadline.
    pub(super) guardian: &'a Guardian,
    pub(super) schedule: Schedule,
    /// `--max-hold` after the acquisition.
    pub(super) max_hold_end: Option<Instant>,
    pub(super) verbose: bool,
}

/// The group is being stopped: SIGTERM was sent at `since`.
#[derive(Debug, Clone, Copy)]
struct Stop {
    since: Instant,
    killed: Option<Instant>,
}

impl Supervisor<'_> {
    /// Runs until the command and every process of its group are gone.
    /// Renewal stops when this returns.
    pub(super) async fn supervise(
        &self,
        child: &mut tokio::process::Child,
        guard: &Held,
        signals: &mut Signals,
        terminal: Option<&Terminal>,
    ) -> Outcome {
        let plan = self.schedule;
        let grace = plan.grace;
        let renewal = self.lease.keep_renewed(guard, self.guardian);
        tokio::pin!(renewal);
        let mut renewing = true;
        let mut status = None;
        let mut stop: Option<Stop> = None;
        let mut lost = false;
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
                            crate::run::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                sig = signals.recv() => {
                    if self.verbose {
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
                            "redbell: lost the lease on lock {:?}: sending SIGTERM to the \
                             command's process group (SIGKILL after {})",
                            self.name,
                            crate::run::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                () = sleep_until(Some(stop_at)), if stop.is_none() => {
                    if Instant::now() >= stop_due(plan, self.lease) {
                        lost = true;
                        eprintln!(
                            "redbell: could not renew the lease on lock {:?} ({}): stopping the \
                             command before the lease can expire: SIGTERM to its process group, \
                             SIGKILL after {}",
                            self.name,
                            self.lease.failure().unwrap_or_else(|| "no answer".into()),
                            crate::run::duration::human(grace)
                        );
                        stop = Some(self.terminate());
                    }
                }
                () = sleep_until(self.max_hold_end), if stop.is_none() => {
                    lost = true;
                    eprintln!(
                        "redbell: held lock {:?} for --max-hold: stopping the command as for a \
                         lost lease: SIGTERM to its process group, SIGKILL after {}",
                        self.name,
                        crate::run::duration::human(grace)
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
        Outcome {
            // The loop only ends once the command was waited for.
            status: status
                .unwrap_or_else(|| Err(io::Error::other("the command was not waited for"))),
            lost,
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
        self.guardian.kill_by(since + self.schedule.grace);
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
