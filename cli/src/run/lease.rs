//! The lease as `redbell run` needs to see it: the earliest instant at which
//! the lock's key can expire on the server. Another host may take the lock
//! from then on, so the command's group must be dead by then (see
//! `supervise.rs`).
//!
//! The lock is taken with a fixed lease of `--ttl`, and renewed here, every
//! third of it, with `extend`: each confirmed renewal moves the deadline to
//! the instant it was *sent* plus the lease, minus a margin for clock drift.
//! (The library's own renewal keeps a lock just as well, but its guard does
//! not tell when the key can expire.) Each new deadline is fed to the
//! guardian, which stops the group by itself should no later one come in
//! time (`process/guardian.rs`).

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use super::hold::Held;
use crate::fail::{EX_TEMPFAIL, EX_UNAVAILABLE, Failure};
use crate::process::guardian::Guardian;
use crate::process::schedule::drift;

/// One acquisition's lease, confirmed and renewed by `redbell run`.
#[derive(Debug)]
pub(super) struct Lease {
    ttl: Duration,
    /// When the latest confirmed extend was sent.
    confirmed: Cell<Instant>,
    /// Why the latest renewal failed, if it did: for the message when the
    /// command must be stopped.
    failure: RefCell<Option<String>>,
}

impl Lease {
    /// Confirms a fresh lease of `ttl` on the lock `guard` holds. The
    /// acquire's own reply does not tell when its request was sent (a wait
    /// for the lock makes many attempts), so the deadline starts from a
    /// first renewal, before the command runs.
    pub(super) async fn confirm(guard: &Held, ttl: Duration, url: &str) -> Result<Lease, Failure> {
        let name = guard.name();
        let sent = Instant::now();
        match tokio::time::timeout(ttl / 3, guard.extend(ttl)).await {
            Ok(Ok(())) => Ok(Lease {
                ttl,
                confirmed: Cell::new(sent),
                failure: RefCell::new(None),
            }),
            Ok(Err(redbell::Error::NotHeld)) => Err(Failure::new(
                EX_TEMPFAIL,
                format!("lost lock {name:?} right after acquiring it; the command was not run"),
            )),
            Ok(Err(e)) => Err(Failure::lock(
                url,
                &format!("cannot renew the lease on lock {name:?}; the command was not run"),
                &e,
            )),
            Err(_) => Err(Failure::new(
                EX_UNAVAILABLE,
                format!(
                    "Redis did not confirm the lease on lock {name:?} within {}; the command \
                     was not run",
                    crate::run::duration::human(ttl / 3)
                ),
            )),
        }
    }

    /// The instant after which the key may have expired on the server.
    pub(super) fn deadline(&self) -> Instant {
        let confirmed = self.confirmed.get();
        (confirmed + self.ttl)
            .checked_sub(drift(self.ttl))
            .unwrap_or(confirmed)
    }

    /// Why the latest renewal failed, if it did.
    pub(super) fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Renews the lease every third of it, and sooner again after a failed
    /// attempt, moving [`deadline`](Lease::deadline) on each success and
    /// feeding it to `guardian`. Resolves only when the lock is known lost:
    /// a renewal found it gone or taken. Drop it to stop renewing.
    pub(super) async fn keep_renewed(&self, guard: &Held, guardian: &Guardian) {
        let every = self.ttl / 3;
        // Shorter than the response timeout `T` for any ttl under 6 × `T`,
        // which is fine: a renewal given up unanswered still has the
        // library replace a silent connection `T` after its send, and the
        // retries that follow go to the fresh one. A longer attempt would
        // only leave fewer retries before the deadline.
        let attempt = self.ttl / 6;
        let retry = self.ttl / 20;
        let mut due = self.confirmed.get() + every;
        loop {
            tokio::time::sleep_until(due.into()).await;
            let sent = Instant::now();
            // `extend` is cancel safe: a timed-out attempt may or may not
            // have been applied, and only a confirmed one counts.
            let failure = match tokio::time::timeout(attempt, guard.extend(self.ttl)).await {
                Ok(Ok(())) => {
                    self.confirmed.set(sent);
                    guardian.feed(self.deadline());
                    self.failure.replace(None);
                    due = sent + every;
                    // The owner note lives as long as the lease.
                    guard.note_owner(self.ttl).await;
                    continue;
                }
                Ok(Err(redbell::Error::NotHeld)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {}", crate::run::duration::human(attempt)),
            };
            self.failure.replace(Some(failure));
            due = Instant::now() + retry;
        }
    }
}
