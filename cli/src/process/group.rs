//! The command's process group: signals to it, whether anything of it
//! remains, and reaping what `redbell` adopted (it is the group's
//! subreaper).
//!
//! A signal forwarded to the group is followed by SIGCONT, as systemd and
//! timeout(1) do: a stopped process (job control, `kill -STOP $$`) would
//! otherwise keep the signal pending, and the lock held, forever.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

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
