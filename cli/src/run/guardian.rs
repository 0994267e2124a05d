//! The guardian: a small process that kills the command's group when
//! `redbell` dies without doing so itself (SIGKILL, the OOM killer, a
//! crash), so the command never runs on unlocked.
//!
//! `redbell` starts it before the command: itself again, with the hidden
//! `__guard` subcommand, in a process group of its own, one end of a socket
//! pair as its stdin. `redbell` keeps the other end, close-on-exec, so no
//! other process holds it. Between fork and exec, the command writes its own
//! pid (its process group) into that end, so the guardian knows the group
//! before the command runs any code of its own: there is no moment at which
//! the command runs unguarded. When `redbell` dies, however it dies, the
//! kernel closes its end; the guardian's read returns end-of-file, and it
//! sends SIGKILL to the group. Once `redbell` is done with the group (it is
//! gone), it writes a zero to dismiss the guardian, which then exits
//! without killing anything.
//!
//! The guardian ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT (and, in its own
//! group, gets none of those meant for `redbell` or the command). What
//! escapes it: a process that left the command's group (`setsid`,
//! `setpgid`), as such a process escapes every signal to the group; and
//! everything, if the guardian is SIGKILLed along with `redbell`.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::Pid;

use crate::fail::{EX_FAILURE, Failure};

/// The hidden subcommand that runs the guardian.
pub const SUBCOMMAND: &str = "__guard";

/// A running guardian, as `redbell` sees it.
#[derive(Debug)]
pub(crate) struct Guardian {
    /// Our end of the socket pair: its closing is the guardian's signal.
    socket: UnixStream,
    process: std::process::Child,
}

impl Guardian {
    /// Starts the guardian and waits until it is ready.
    pub(crate) fn start() -> Result<Guardian, Failure> {
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
            .and_then(|()| ours.set_read_timeout(None));
        if let Err(e) = ready {
            let _ = process.kill();
            let _ = process.wait();
            return Err(fail(e));
        }
        Ok(Guardian {
            socket: ours,
            process,
        })
    }

    /// Makes the command announce itself to the guardian between fork and
    /// exec, so that it is guarded before it runs.
    pub(crate) fn enroll(&self, command: &mut tokio::process::Command) {
        let fd = self.socket.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec. It calls
        // only getpid and write, both async-signal-safe, and allocates
        // nothing (an io::Error from an errno or a kind does not allocate).
        unsafe {
            command.pre_exec(move || {
                let pid = nix::libc::getpid().to_ne_bytes();
                let n = nix::libc::write(fd, pid.as_ptr().cast(), pid.len());
                match usize::try_from(n) {
                    Ok(n) if n == pid.len() => Ok(()),
                    Ok(_) => Err(std::io::ErrorKind::WriteZero.into()),
                    Err(_) => Err(std::io::Error::last_os_error()),
                }
            });
        }
    }

    /// Tells the guardian that the command's group is gone, and waits (a
    /// moment at most) for it to exit.
    pub(crate) fn dismiss(mut self) {
        let _ = (&self.socket).write_all(&0i32.to_ne_bytes());
        drop(self.socket);
        let end = Instant::now() + Duration::from_secs(1);
        // An error means it was reaped already (redbell reaps its orphans).
        while let Ok(None) = self.process.try_wait() {
            if Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
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

/// The guardian process itself (`redbell __guard`): stdin is its end of the
/// socket pair. Exits 0 when dismissed; kills the group it was told of when
/// the other end closes without a dismissal.
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
        let _ = writeln!(
            std::io::stderr(),
            "redbell: {SUBCOMMAND} is started by `redbell run`, not by hand"
        );
        return ExitCode::from(crate::fail::EX_USAGE);
    }
    let mut socket = std::io::stdin().lock();
    if nix::unistd::write(std::io::stdin(), &[1]).is_err() {
        return ExitCode::from(EX_FAILURE); // redbell is gone already
    }
    let mut group = None;
    let mut pid = [0u8; 4];
    while socket.read_exact(&mut pid).is_ok() {
        match i32::from_ne_bytes(pid) {
            0 => return ExitCode::SUCCESS,
            p if p > 1 => group = Some(Pid::from_raw(p)),
            _ => {}
        }
    }
    if let Some(group) = group
        && killpg(group, Signal::SIGKILL).is_ok()
    {
        // Not eprintln!, which panics when stderr is gone (as redbell may be).
        let _ = writeln!(
            std::io::stderr(),
            "redbell: redbell ended without stopping its command: sent SIGKILL to the command's \
             process group {group}"
        );
    }
    ExitCode::SUCCESS
}
