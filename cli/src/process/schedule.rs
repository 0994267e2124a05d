//! When a command's group is stopped ahead of its lease's deadline, the
//! earliest instant at which the lease's key can expire on the server (and
//! another host take the lock): SIGTERM at the deadline − the grace − a
//! margin, SIGKILL at the deadline − the margin at the latest. The deadline
//! is the library's (`deadline()` on a guard), drift already taken off; the
//! supervisor (`supervise.rs`) and the guardian keep to this schedule.

use std::time::{Duration, Instant};

/// When the group gets SIGTERM and SIGKILL, relative to a lease deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// The time between SIGTERM and SIGKILL: `--kill-grace`, at most a
    /// third of the lease, so that the lease leaves time for it.
    pub(crate) grace: Duration,
    /// How long before the lease's deadline the group gets SIGKILL at the
    /// latest: a tenth of the lease, at most a second. It covers a late
    /// timer on a busy machine and the time processes take to die.
    pub(crate) margin: Duration,
}

impl Schedule {
    pub(crate) fn new(ttl: Duration, kill_grace: Duration) -> Schedule {
        Schedule {
            grace: kill_grace.min(ttl / 3),
            margin: (ttl / 10).min(Duration::from_secs(1)),
        }
    }

    /// When a group whose lease ends at `deadline` gets SIGTERM, unless the
    /// lease is renewed before.
    pub(crate) fn term_at(self, deadline: Instant) -> Instant {
        sub(deadline, self.grace + self.margin)
    }

    /// When a group whose lease ends at `deadline` gets SIGKILL at the
    /// latest.
    pub(crate) fn kill_at(self, deadline: Instant) -> Instant {
        sub(deadline, self.margin)
    }
}

/// `at − d`; now if that precedes the clock's origin.
fn sub(at: Instant, d: Duration) -> Instant {
    at.checked_sub(d).unwrap_or_else(Instant::now)
}
