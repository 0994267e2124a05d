//! Handing the terminal to the command's group, as a shell does for a job
//! (`run` and `elect` alike).

use std::io::IsTerminal;

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

use super::group::signal_group;

/// The controlling terminal on stdin, while `redbell` is its foreground.
pub(crate) struct Terminal {
    /// Our own process group, which gets the terminal back.
    ours: Pid,
}

impl Terminal {
    /// `Some` when stdin is a terminal whose foreground group is ours.
    pub(crate) fn foreground() -> Option<Terminal> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let ours = nix::unistd::getpgrp();
        (nix::unistd::tcgetpgrp(&stdin).ok()? == ours).then_some(Terminal { ours })
    }

    /// Makes `group` the terminal's foreground, and continues it in case it
    /// tried to read the terminal before (and was stopped by SIGTTIN).
    pub(crate) fn hand_to(self, group: Pid) -> Terminal {
        if nix::unistd::tcsetpgrp(std::io::stdin(), group).is_ok() {
            signal_group(group, Signal::SIGCONT);
        }
        self
    }

    /// Job control is not proxied: a command stopped with Ctrl-Z would
    /// leave the terminal hung while the lock stays held, so continue it.
    pub(crate) fn resume_if_stopped(&self, group: Pid) {
        let stat = std::fs::read_to_string(format!("/proc/{group}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if state == Some('T') {
            eprintln!(
                "redbell: the command was stopped; job control is not supported while it \
                 holds a lock: continuing it (use Ctrl-C to end it)"
            );
            signal_group(group, Signal::SIGCONT);
        }
    }

    /// Gives the terminal back to our group. We are a background group at
    /// this point, so SIGTTOU is blocked (on this thread) for the call.
    pub(crate) fn take_back(self) {
        let stdin = std::io::stdin();
        if nix::unistd::tcgetpgrp(&stdin).ok() == Some(self.ours) {
            return;
        }
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let blocked = ttou.thread_block().is_ok();
        let _ = nix::unistd::tcsetpgrp(&stdin, self.ours);
        if blocked {
            let _ = ttou.thread_unblock();
        }
    }
}
