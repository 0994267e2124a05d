//! `redbell run`'s lease: the lock is taken with a fixed lease of `--ttl`
//! and renewed here with `extend`, every third of it, and sooner again
//! after a failed attempt (a twentieth of it), each attempt given up after
//! a sixth. Renewing here rather than by the library's renewal task gives
//! the command's stop a reason (the last failure) and attempts bounded by
//! the lease, not by the connection's response timeout.
//!
//! The deadline is the guard's own ([`redbell::AnyGuard::deadline`]): each
//! confirmed `extend` moves it to the instant the request was *sent*, plus
//! the lease, minus the library's drift margin. Each new one is fed to the
//! guardian at once (`process/guardian.rs`), which stops the group by
//! itself should no later one come in time.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use super::hold::Held;
use crate::process::guardian::Guardian;
use crate::process::supervise::Lease;

/// One acquisition's lease, renewed by `redbell run`.
#[derive(Debug)]
pub(super) struct Renewed<'a> {
    pub(super) held: &'a Held,
    pub(super) ttl: Duration,
    /// Why the latest renewal failed, if it did: for the message when the
    /// command must be stopped. `None` again once one succeeds.
    pub(super) failure: RefCell<Option<String>>,
}

impl Lease for Renewed<'_> {
    fn deadline(&self) -> Instant {
        self.held.guard.deadline().into_std()
    }

    fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Renews every third of the lease; resolves when a renewal finds the
    /// lock gone or taken, or the lease is lost locally.
    async fn keep(&self, guardian: &Guardian) {
        let guard = &self.held.guard;
        let every = self.ttl / 3;
        // Shorter than the response timeout `T` for any ttl under 6 × `T`,
        // which is fine: a renewal given up unanswered still has the
        // library replace a silent connection `T` after its send, and the
        // retries that follow go to the fresh one. A longer attempt would
        // only leave fewer retries before the deadline.
        let attempt = self.ttl / 6;
        let retry = self.ttl / 20;
        // The first renewal a third of the lease after the acquire was
        // sent: the deadline is that send instant plus the lease, less the
        // drift (so this is a little early, never late).
        let mut due = self
            .deadline()
            .checked_sub(self.ttl - every)
            .unwrap_or_else(Instant::now);
        loop {
            tokio::time::sleep_until(due.into()).await;
            let sent = Instant::now();
            // `extend` is cancel safe: a timed-out attempt may or may not
            // have been applied, and only a confirmed one moves the
            // deadline.
            let failure = match tokio::time::timeout(attempt, guard.extend(self.ttl)).await {
                Ok(Ok(())) => {
                    guardian.feed(self.deadline());
                    self.failure.replace(None);
                    due = sent + every;
                    // The owner note lives as long as the lease.
                    self.held.note_owner(self.ttl).await;
                    continue;
                }
                Ok(Err(redbell::Error::NotHeld)) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {}", crate::duration::human(attempt)),
            };
            self.failure.replace(Some(failure));
            due = Instant::now() + retry;
        }
    }
}
