//! The command's process group: signals to it, whether anything of it
//! remains, and reaping what `redbell` adopted (it is the group's subreaper).

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

/// Sends `sig` to every process of `group`; a group already gone is fine.
pub(super) fn signal_group(group: Pid, sig: Signal) {
    if group.as_raw() > 1 {
        let _ = killpg(group, sig);
    }
}

/// Whether any process of `group` remains, after reaping those of its
/// members that were re-parented to us and have exited.
pub(super) fn group_alive(group: Pid) -> bool {
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

/// Waits for the command's process group to be empty: leftovers get SIGTERM
/// at once (unless `killed` already), SIGKILL at `deadline`.
pub(super) async fn drain_group(group: Pid, deadline: Instant, killed: bool) {
    if !group_alive(group) {
        reap_adopted(None);
        return;
    }
    if !killed {
        eprintln!(
            "redbell: the command left processes in its process group: sending them SIGTERM \
             (SIGKILL after --kill-grace)"
        );
        signal_group(group, Signal::SIGTERM);
    }
    let mut kill_sent = killed;
    let mut give_up = None;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if !group_alive(group) {
            break;
        }
        let now = Instant::now();
        if !kill_sent && now >= deadline {
            signal_group(group, Signal::SIGKILL);
            kill_sent = true;
        }
        if kill_sent {
            // SIGKILL cannot be ignored; what remains is a zombie some
            // other parent has not reaped yet. Do not wait forever for it.
            let end = *give_up.get_or_insert(now + Duration::from_secs(2));
            if now >= end {
                eprintln!("redbell: processes of the command's group could not be reaped");
                break;
            }
        }
    }
    reap_adopted(None);
}

/// Makes `redbell` the reaper of its descendants' orphans (Linux), so a
/// grandchild whose parent died is re-parented to us, not to PID 1, and
/// `drain_group` sees (and reaps) it.
pub(super) fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
}

/// Reaps adopted orphans that have exited, never the command itself (`skip`,
/// which Tokio waits for).
pub(super) fn reap_adopted(skip: Option<i32>) {
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
