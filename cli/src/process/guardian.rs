//! The guardian: a small process that stops the command's group when
//! `redbell` cannot: when it dies (SIGKILL, the OOM killer, a crash), and
//! when it is alive but not running (SIGSTOP, ptrace, a hung system call, a
//! starved runtime) while the lease runs out. The supervisor that enforces a
//! deadline must not depend on the liveness of the process it supervises.
//!
//! `redbell` starts it before the command: itself again, with the hidden
//! `__guard` subcommand, in a process group of its own, one end of a socket
//! pair as its stdin. `redbell` keeps the other end, close-on-exec, so no
//! other process holds it. Messages on it are fixed frames ([`Frame`]).
//!
//! - **The group.** Between fork and exec, the command writes its own pid
//!   (its process group) into that end, so the guardian knows the group
//!   before the command runs any code of its own: there is no moment at
//!   which the command runs unguarded.
//! - **Dead-man timer.** `redbell` feeds it each confirmed lease deadline,
//!   the first before the command starts: the guard's own `deadline()`,
//!   fed by the frame's [`Lease`](super::supervise::Lease) (`run`: after
//!   each renewal it confirms; `elect`: every twentieth of the lease, as
//!   the library renews it). A deadline travels as the two instants
//!   of its [`Schedule`], SIGTERM and SIGKILL, on [`CLOCK`]
//!   (`CLOCK_BOOTTIME`: unlike `CLOCK_MONOTONIC`, it runs on while the host
//!   is suspended, as Redis's clock and so the lease do), which both
//!   processes read: an *instant*, not a remaining duration, so a
//!   `redbell` stopped between reading the lease and writing the frame, or
//!   a guardian slow to read it, cannot move the deadline later. Unless a
//!   later deadline comes in time, the guardian sends the group SIGTERM
//!   (then SIGCONT, so a stopped process gets it) at the deadline − the
//!   grace − the margin, and SIGKILL at the deadline − the margin: the
//!   bounds of `Schedule` (grace: `--kill-grace`, at most a third of the
//!   lease; margin: a tenth of it, at most 1 s), the same `redbell run`'s
//!   supervisor keeps when Redis cannot be reached, so the group is dead
//!   before the key can expire on the server. The deadline itself is the
//!   library's, drift already taken off (`schedule.rs`).
//!   Once it has sent SIGTERM, the guardian goes through with the stop: a
//!   deadline fed later does not call it off. It looks at the clock at
//!   least every [`NAP`] (its sleep does not count suspended time), so a
//!   host resumed past a deadline has the group stopped within that.
//! - **The grace.** When `redbell` itself sends the group SIGTERM and
//!   starts a grace (a SIGTERM or SIGINT to it, a lost lease, `--max-hold`,
//!   processes left behind), it orders the guardian to SIGKILL the group
//!   at the grace's end ([`Guardian::kill_by`]). The guardian takes that
//!   frame although it is earlier than the deadline (deadlines only ever
//!   move its action later): it can only shorten the command's life. So a
//!   `redbell` stopped in the grace still has the command ended at the
//!   grace's end (plus the guardian's wake-up), not at the lease's deadline.
//! - **End-of-file.** When `redbell` dies, however it dies, the kernel
//!   closes its end; the guardian's read returns end-of-file, and it sends
//!   SIGKILL to the group at once.
//! - **The guardian's death.** The other way round: should the guardian
//!   die alone (the OOM killer, a stray `kill -9`), its end closes and ours
//!   turns readable ([`Guardian::lost`]); `redbell` sends the group SIGKILL
//!   at once and reports a lost lease. Left running, the command would be
//!   unguarded: a `redbell` that died or froze next would let it run past
//!   the lease.
//! - **Dismissal.** Once `redbell` is done with the group (it is gone), it
//!   writes a dismissal; the guardian exits, with [`EX_TEMPFAIL`] if its
//!   timer stopped the group (`redbell` then reports a lost lease), with 0
//!   otherwise (a SIGKILL it was ordered at a grace's end included).
//!
//! When `redbell` is alive and Redis is not, `redbell` and the guardian
//! both stop the group on the same schedule: the signals go out twice, which
//! changes nothing.
//!
//! The guardian ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT (and, in its own
//! group, gets none of those meant for `redbell` or the command). What
//! escapes it: a process that left the command's group (`setsid`,
//! `setpgid`), as such a process escapes every signal to the group; and
//! everything, if the guardian is SIGKILLed (or SIGSTOPped) along with
//! `redbell` (both at once, or `redbell` before it has seen the guardian
//! die: a moment), or SIGSTOPped alone and then `redbell` dies or stops.

use std::cell::Cell;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;

use super::schedule::Schedule;
use crate::fail::{EX_FAILURE, EX_TEMPFAIL, Failure};

/// The hidden subcommand that runs the guardian.
pub const SUBCOMMAND: &str = "__guard";

/// One message to the guardian: a tag byte and two numbers (native byte
/// order). Fixed-size, written with one `write`, so frames never interleave.
type Frame = [u8; 17];

/// `G`: the command's process group is `a`.
const GROUP: u8 = b'G';
/// `D`: a confirmed lease deadline: SIGTERM at `a`, SIGKILL at `b`
/// (nanoseconds of [`CLOCK`]). Only ever moves the stop later.
const DEADLINE: u8 = b'D';
/// `K`: `redbell` sent the group SIGTERM and starts a grace: SIGKILL at `a`
/// (nanoseconds of [`CLOCK`]). Only ever brings the kill earlier.
const KILL: u8 = b'K';
/// `X`: the group is gone; exit.
const DISMISS: u8 = b'X';

/// Encodes a frame. Allocates nothing and cannot panic: it runs between
/// fork and exec.
fn frame(tag: u8, a: u64, b: u64) -> Frame {
    let mut f = [0u8; 17];
    f[0] = tag;
    let (a, b) = (a.to_ne_bytes(), b.to_ne_bytes());
    let mut i = 0;
    while i < 8 {
        f[1 + i] = a[i];
        f[9 + i] = b[i];
        i += 1;
    }
    f
}

fn decode(f: &Frame) -> (u8, u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&f[1..9]);
    b.copy_from_slice(&f[9..17]);
    (f[0], u64::from_ne_bytes(a), u64::from_ne_bytes(b))
}

/// The clock of the guardian's instants: `CLOCK_BOOTTIME` on Linux, which
/// runs on while the host is suspended (as Redis's clock does, and the
/// lease with it), where `CLOCK_MONOTONIC` stops.
#[cfg(any(target_os = "linux", target_os = "android"))]
const CLOCK: ClockId = ClockId::CLOCK_BOOTTIME;
/// The clock of the guardian's instants (no `CLOCK_BOOTTIME` here).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const CLOCK: ClockId = ClockId::CLOCK_MONOTONIC;

/// The longest the guardian sleeps between two looks at [`CLOCK`]: its
/// sleep (a socket timeout) does not count time the host spent suspended,
/// so a resumed guardian finds a deadline past within this.
const NAP: Duration = Duration::from_millis(100);

/// Now on [`CLOCK`], in nanoseconds; `None` if it cannot be read.
fn clock_ns() -> Option<u64> {
    let t = clock_gettime(CLOCK).ok()?;
    let secs = u64::try_from(t.tv_sec()).ok()?;
    let nanos = u64::try_from(t.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// `at` on [`CLOCK`]. The clock is read *before* `Instant::now()`,
/// so a delay between the two reads moves the result earlier, never later;
/// an unreadable clock gives 0, which is past (the guardian acts at once).
fn clock_at(at: Instant) -> u64 {
    let Some(mono) = clock_ns() else {
        return 0;
    };
    let ahead = at.saturating_duration_since(Instant::now()).as_nanos();
    mono.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
}

/// A running guardian, as `redbell` sees it.
#[derive(Debug)]
pub(crate) struct Guardian {
    /// Our end of the socket pair: its closing is the guardian's signal.
    /// Non-blocking once the guardian is ready: a feed never blocks
    /// `redbell` (a feed that cannot be written leaves the guardian on the
    /// earlier deadline, the safe side). The guardian writes nothing after
    /// its ready byte, so once that is read the socket turns readable only
    /// when the guardian's end closes: when it dies ([`Guardian::lost`]).
    socket: AsyncFd<UnixStream>,
    process: std::process::Child,
    schedule: Schedule,
    /// The latest deadline fed; only a later one is sent (every one fed is
    /// a lower bound on the key's expiry, so the latest holds).
    fed: Cell<Option<Instant>>,
    /// The earliest SIGKILL ordered ([`Guardian::kill_by`]); only an
    /// earlier one is sent.
    ordered: Cell<Option<Instant>>,
}

impl Guardian {
    /// Starts the guardian and waits until it is ready. It stops the group
    /// on `schedule` relative to the deadlines it is fed.
    pub(crate) fn start(schedule: Schedule) -> Result<Guardian, Failure> {
        let fail = |e: std::io::Error| {
            Failure::new(
                EX_FAILURE,
                format!("cannot start the guardian of the command: {e}"),
            )
        };
        // Both ends are close-on-exec: only the guardian gets one, as stdin.
        let (ours, theirs) = UnixStream::pair().map_err(fail)?;
        let mut process = std::process::Command::new(own_executable().map_err(fail)?)
            .arg0("redbell")
            .arg(SUBCOMMAND)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .current_dir("/")
            .process_group(0)
            .spawn()
            .map_err(fail)?;
        let ready = ours
            .set_read_timeout(Some(Duration::from_secs(5)))
            .and_then(|()| (&ours).read_exact(&mut [0u8]))
            .and_then(|()| ours.set_nonblocking(true))
            // SAFETY: the `AsyncFd` owns the stream, so its descriptor
            // stays open (and is not reused) while it is registered.
            .and_then(|()| unsafe {
                AsyncFd::register_with_interest(ours, tokio::io::Interest::READABLE)
                    .map_err(std::io::Error::from)
            });
        let socket = match ready {
            Ok(socket) => socket,
            Err(e) => {
                let _ = process.kill();
                let _ = process.wait();
                return Err(fail(e));
            }
        };
        Ok(Guardian {
            socket,
            process,
            schedule,
            fed: Cell::new(None),
            ordered: Cell::new(None),
        })
    }

    /// Makes the command announce itself to the guardian between fork and
    /// exec, so that it is guarded before it runs.
    pub(crate) fn enroll(&self, command: &mut tokio::process::Command) {
        let fd = self.socket.get_ref().as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec. It calls
        // only getpid and write, both async-signal-safe, and allocates
        // nothing (`frame` does not; an io::Error from an errno or a kind
        // does not allocate).
        unsafe {
            command.pre_exec(move || {
                let pid = u64::try_from(nix::libc::getpid()).unwrap_or(0);
                let f = frame(GROUP, pid, 0);
                let n = nix::libc::write(fd, f.as_ptr().cast(), f.len());
                match usize::try_from(n) {
                    Ok(n) if n == f.len() => Ok(()),
                    Ok(_) => Err(std::io::ErrorKind::WriteZero.into()),
                    Err(_) => Err(std::io::Error::last_os_error()),
                }
            });
        }
    }

    /// Moves the dead-man timer on to the confirmed lease `deadline` (if it
    /// is later than the last one fed).
    pub(crate) fn feed(&self, deadline: Instant) {
        if self.fed.get().is_some_and(|fed| fed >= deadline) {
            return;
        }
        let term = clock_at(self.schedule.term_at(deadline));
        let kill = clock_at(self.schedule.kill_at(deadline));
        let f = frame(DEADLINE, term, kill);
        if self.send(&f) {
            self.fed.set(Some(deadline));
        }
    }

    /// Has the guardian SIGKILL the group at `at` (if that is earlier than
    /// any kill ordered before), whatever the deadline: `redbell` sent the
    /// group SIGTERM and gives it a grace ending at `at`. The guardian takes
    /// this frame even though it brings its action *earlier* (a deadline
    /// only moves it later): it can only shorten the command's life. So a
    /// `redbell` that stops running in the grace (SIGSTOP) does not leave
    /// the command running until the lease's deadline.
    pub(crate) fn kill_by(&self, at: Instant) {
        if self.ordered.get().is_some_and(|ordered| ordered <= at) {
            return;
        }
        if self.send(&frame(KILL, clock_at(at), 0)) {
            self.ordered.set(Some(at));
        }
    }

    /// Writes one frame; whether it was sent. One small write to a Unix
    /// stream socket is sent whole or not at all (it fits one buffer), so
    /// a full socket never splits a frame.
    fn send(&self, f: &Frame) -> bool {
        matches!(self.socket.get_ref().write(f), Ok(n) if n == f.len())
    }

    /// Resolves when the guardian is gone (killed on its own: the OOM
    /// killer, a stray `kill -9`): its end of the socket closed. The
    /// command is then unguarded; `redbell` stops it at once.
    ///
    /// Cancel safe: it only waits for the socket to turn readable.
    pub(crate) async fn lost(&self) {
        loop {
            let Ok(mut ready) = self.socket.readable().await else {
                return;
            };
            match ready.get_inner().read(&mut [0u8; 16]) {
                Ok(0) => return,
                // It writes nothing after its ready byte; ignore stray data.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Tells the guardian that the command's group is gone, and waits (a
    /// moment at most) for it to exit. Returns whether its timer stopped
    /// the group (the lease was not confirmed in time).
    pub(crate) fn dismiss(mut self) -> bool {
        let socket = self.socket.into_inner();
        let _ = socket.set_nonblocking(false);
        let _ = (&socket).write_all(&frame(DISMISS, 0, 0));
        drop(socket);
        let end = Instant::now() + Duration::from_secs(1);
        loop {
            match self.process.try_wait() {
                Ok(Some(status)) => return status.code() == Some(i32::from(EX_TEMPFAIL)),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(1)),
                // An error means it was reaped already (redbell reaps its
                // orphans): it had not acted, as it stays until dismissed
                // once it has.
                Ok(None) | Err(_) => return false,
            }
        }
    }
}

/// The running executable: `/proc/self/exe` on Linux, which stays valid
/// even if the file was replaced or deleted since.
fn own_executable() -> std::io::Result<std::path::PathBuf> {
    if cfg!(target_os = "linux") {
        Ok("/proc/self/exe".into())
    } else {
        std::env::current_exe()
    }
}

/// What the guardian knows and has done.
#[derive(Debug, Default)]
struct Watch {
    group: Option<Pid>,
    /// SIGTERM and SIGKILL instants of the latest deadline fed.
    due: Option<(u64, u64)>,
    /// SIGTERM was sent; SIGKILL is due at this instant.
    stopping: Option<u64>,
    /// The earliest SIGKILL `redbell` ordered (after its own SIGTERM).
    ordered: Option<u64>,
    killed: bool,
}

impl Watch {
    /// Sends what is due at `now`; returns when it next has something to
    /// do (`None`: nothing, until a message comes).
    fn act(&mut self, now: u64) -> Option<u64> {
        let group = self.group?;
        if self.stopping.is_none()
            && let Some((term, kill)) = self.due
            && now >= term
        {
            let _ = killpg(group, Signal::SIGTERM);
            let _ = killpg(group, Signal::SIGCONT);
            self.stopping = Some(kill);
            say(&format!(
                "the lease was not confirmed in time (redbell stopped, starved or cut off from \
                 Redis): sent SIGTERM to the command's process group {group}, SIGKILL before the \
                 lease can expire"
            ));
        }
        if let Some(kill) = self.ordered
            && !self.killed
            && now >= kill
        {
            if killpg(group, Signal::SIGKILL).is_ok() {
                say(&format!(
                    "the command's process group outlived the grace after redbell's SIGTERM: sent \
                     it SIGKILL (group {group})"
                ));
            }
            self.killed = true;
        }
        if let Some(kill) = self.stopping
            && !self.killed
            && now >= kill
        {
            if killpg(group, Signal::SIGKILL).is_ok() {
                say(&format!(
                    "sent SIGKILL to the command's process group {group}"
                ));
            }
            self.killed = true;
        }
        if self.killed {
            None
        } else {
            let timer = self.stopping.or(self.due.map(|(term, _)| term));
            match (timer, self.ordered) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
    }
}

/// One line on stderr. Not eprintln!, which panics when stderr is gone (as
/// redbell may be).
fn say(what: &str) {
    let _ = writeln!(std::io::stderr(), "redbell: {what}");
}

/// The guardian process itself (`redbell __guard`): stdin is its end of the
/// socket pair. Exits when dismissed (0, or [`EX_TEMPFAIL`] if its timer
/// stopped the group); kills the group it was told of when the other end
/// closes without a dismissal.
pub fn serve() -> ExitCode {
    let mut ignored = SigSet::empty();
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        ignored.add(sig);
    }
    // One thread: blocked signals stay pending, never delivered.
    let _ = ignored.thread_block();
    if std::io::stdin().is_terminal() {
        say(&format!(
            "{SUBCOMMAND} is started by `redbell run` and `redbell elect`, not by hand"
        ));
        return ExitCode::from(crate::fail::EX_USAGE);
    }
    let socket = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(_) => return ExitCode::from(EX_FAILURE),
    };
    if (&socket).write_all(&[1]).is_err() {
        return ExitCode::from(EX_FAILURE); // redbell is gone already
    }
    let mut watch = Watch::default();
    let mut pending: Vec<u8> = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    loop {
        // An unreadable clock counts as "everything is due": the safe side.
        let now = clock_ns().unwrap_or(u64::MAX);
        let next = watch.act(now);
        let wait = next.map(|at| Duration::from_nanos(at.saturating_sub(now)).min(NAP));
        // A zero timeout would mean "block": wait at least a millisecond.
        let wait = wait.map(|w| w.max(Duration::from_millis(1)));
        if socket.set_read_timeout(wait).is_err() {
            break;
        }
        let n = match (&socket).read(&mut buf) {
            Ok(0) => break, // redbell is gone
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        pending.extend_from_slice(&buf[..n]);
        let mut frames = pending.chunks_exact(17);
        for f in frames.by_ref() {
            let mut one: Frame = [0u8; 17];
            one.copy_from_slice(f);
            match decode(&one) {
                (GROUP, pid, _) => {
                    if let Ok(pid) = i32::try_from(pid)
                        && pid > 1
                    {
                        watch.group = Some(Pid::from_raw(pid));
                    }
                }
                (DEADLINE, term, kill) if watch.stopping.is_none() => {
                    watch.due = Some((term, kill));
                }
                (KILL, at, _) => {
                    watch.ordered = Some(watch.ordered.map_or(at, |was| was.min(at)));
                }
                (DISMISS, _, _) => {
                    return if watch.stopping.is_some() {
                        ExitCode::from(EX_TEMPFAIL)
                    } else {
                        ExitCode::SUCCESS
                    };
                }
                _ => {}
            }
        }
        let used = pending.len() - frames.remainder().len();
        pending.drain(..used);
    }
    if let Some(group) = watch.group
        && killpg(group, Signal::SIGKILL).is_ok()
    {
        say(&format!(
            "redbell ended without stopping its command: sent SIGKILL to the command's process \
             group {group}"
        ));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_reads_back_as_written() {
        let f = frame(DEADLINE, u64::MAX - 1, 42);
        assert_eq!(decode(&f), (DEADLINE, u64::MAX - 1, 42));
        assert_eq!(decode(&frame(GROUP, 4242, 0)), (GROUP, 4242, 0));
    }

    #[test]
    fn an_instant_maps_to_the_clock_never_later() {
        let before = clock_ns().expect("the clock");
        let in_a_second = clock_at(Instant::now() + Duration::from_secs(1));
        let after = clock_ns().expect("the clock");
        assert!(
            in_a_second <= after + 1_000_000_000,
            "later than the instant"
        );
        assert!(
            in_a_second + 100_000_000 >= before + 1_000_000_000,
            "far too early"
        );
        // A deadline already past is now (the guardian acts at once).
        let past = clock_at(Instant::now() - Duration::from_millis(1));
        assert!(past <= clock_ns().expect("the clock"));
    }
}
