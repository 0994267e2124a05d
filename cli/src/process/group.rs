//! The command's process group: starting it, signals to it, whether
//! anything of it remains, and reaping what `redbell` adopted (it is the
//! group's subreaper).
//!
//! A signal forwarded to the group is followed by SIGCONT, as systemd and
//! timeout(1) do: a stopped process (job control, `kill -STOP $$`) would
//! otherwise keep the signal pending, and the lock held, forever.

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

use super::guardian::Guardian;
use crate::fail::{EX_FAILURE, Failure};

/// Starts `command` (running `program`) in a process group of its own,
/// enrolled with `guardian` before it execs; returns it and its group.
/// Fails with 127 when the program is not found, 126 when it cannot be
/// executed. `run` and `elect` both start their commands here.
pub(crate) fn start(
    mut command: tokio::process::Command,
    program: &OsStr,
    guardian: &Guardian,
) -> Result<(tokio::process::Child, Pid), Failure> {
    command.process_group(0);
    guardian.enroll(&mut command);
    let child = command.spawn().map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Failure::new(code, format!("cannot run {program:?}: {e}"))
    })?;
    // A spawned child has an id until it has been waited for.
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    Ok((child, Pid::from_raw(pid)))
}

/// Ends `run` or `elect` once their command is done: completes the
/// releases still queued (an acquire cancelled in flight, a resignation),
/// then returns for exit code 0 or exits the process with `outcome`'s code
/// (everything is cleaned up by then: the lock released, the group gone).
pub(crate) async fn finish(
    client: &redbell::Client,
    outcome: Result<u8, Failure>,
) -> Result<(), Failure> {
    if let Err(e) = client.shutdown().await {
        eprintln!("redbell: pending releases did not finish ({e}); their leases free them");
    }
    match outcome? {
        0 => Ok(()),
        code => std::process::exit(i32::from(code)),
    }
}

/// Sends `sig` to every process of `group`; a group already gone is fine.
pub(crate) fn signal_group(group: Pid, sig: Signal) {
    if group.as_raw() > 1 {
        let _ = killpg(group, sig);
    }
}

/// Forwards `sig` to every process of `group`, then continues the group
/// (SIGCONT), so that a stopped process gets it too.
pub(crate) fn forward(group: Pid, sig: Signal) {
    signal_group(group, sig);
    if sig != Signal::SIGCONT && sig != Signal::SIGKILL {
        signal_group(group, Signal::SIGCONT);
    }
}

/// Whether any process of `group` remains, after reaping those of its
/// members that were re-parented to us and have exited.
pub(crate) fn group_alive(group: Pid) -> bool {
    if group.as_raw() <= 1 {
        return false;
    }
    loop {
        match waitpid(Pid::from_raw(-group.as_raw()), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => {}
        }
    }
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}

/// Makes `redbell` the reaper of its descendants' orphans (Linux), so a
/// grandchild whose parent died is re-parented to us, not to PID 1, and
/// the supervisor sees (and reaps) it.
pub(crate) fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
}

/// Reaps adopted orphans that have exited, never the command itself (`skip`,
/// which Tokio waits for).
pub(crate) fn reap_adopted(skip: Option<i32>) {
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    for _ in 0..1024 {
        let pid = match waitid(Id::All, peek) {
            Ok(status) => match status.pid() {
                Some(pid) => pid,
                None => return,
            },
            Err(_) => return,
        };
        if Some(pid.as_raw()) == skip {
            return;
        }
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// The command's exit code, or 128 + the signal that killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EX_FAILURE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(EX_FAILURE),
        (None, None) => EX_FAILURE,
    }
}

/// The exit code of `redbell` ended by `sig` before its command ran.
pub(crate) fn signal_exit_code(sig: Signal) -> u8 {
    u8::try_from(128 + sig as i32).unwrap_or(EX_FAILURE)
}
