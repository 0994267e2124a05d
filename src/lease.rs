//! Leases: the local deadline of each acquisition and the lost-lease signal.
//!
//! Every guard owns a [`Lease`]: the local deadline by which its key is
//! certain to have expired unless renewed, and a lost flag. A guard of a
//! lock without a fixed lease is also entered in its client's one
//! [`Renewer`](crate::renewer::Renewer) (`renewer.rs`), which moves the
//! deadline on each confirmed renewal.
//!
//! ## When is a lease lost?
//!
//! - A renewal finds the key gone or holding another token.
//! - Redis stays unreachable until the local deadline passes. The deadline
//!   is the instant the last successful acquire or renewal was *sent*, plus
//!   the lease, minus a drift margin (1% of the lease + 2 ms): the key
//!   cannot have expired on the server before then, whatever the latency.
//! - A fixed lease (`with_lease`) simply runs out at its deadline.
//! - A guard held for its `max_hold` (see
//!   [`ClientBuilder::max_hold`](crate::ClientBuilder::max_hold)) is no
//!   longer renewed: no renewal falls due at or after `max_hold` from the
//!   acquire, so its lease runs out at most one lease later, and it is
//!   lost at that deadline like any lease Redis no longer confirms. (Not at
//!   once: the holder keeps what the last renewal gave it, and a hung
//!   holder cannot tell either way.)
//!
//! Losing a lease resolves [`MutexGuard::lost`](crate::MutexGuard::lost)
//! and turns `is_lost()` true; nothing panics and nothing is thrown from a
//! timer. A lost lease is never renewed again, and `is_lost()` never turns
//! back to false: once the deadline was seen passed the lease is marked
//! lost, and a renewal confirmed after that (sent in time, answered late)
//! does not revive it.
//!
//! ## When can two holders coexist?
//!
//! This is the one place the safety condition is argued; the guards' docs
//! state it and point here.
//!
//! **Claim.** If a guard's `is_lost()` returns false at local instant `t`,
//! no other client holds the lock at `t`, provided that (a) the server has
//! not lost or dropped the write that set the key's current expiry, and
//! (b) the server's clock does not run more than 1% faster than ours over
//! one lease (nor jump forward).
//!
//! **Why.** Another client can take the lock only once our key is gone:
//! deleted by our own release (and then there is no guard to ask), or
//! expired. Every write that sets our expiry (acquire, renewal, extend) is
//! sent at some local instant `s` and applied by Redis no earlier, so the
//! key lives at least `L` of server time past `s`. The local deadline is
//! `s + L − (L/100 + 2 ms)`: by (b) less than `L` of server time has passed
//! by then, so the key still exists. The deadline only moves later on a
//! *confirmed* write, counting from when that write was *sent*, never from
//! its reply; a write that may set a *shorter* expiry (an `extend` to a
//! shorter lease) moves the deadline in before it is sent, so neither a
//! lost reply nor a cancelled future leaves the deadline behind the
//! server's expiry; a confirmation arriving after the deadline passed does
//! not revive the lease; and once `is_lost()` was true it stays true. A
//! renewal sent before an extend of unknown outcome no longer counts: on
//! one connection Redis applies them in order, so the extend's expiry is
//! the one that stays.
//!
//! **So two holders coexist exactly when:**
//!
//! 1. **The holder does not look in time.** Its local deadline passed but
//!    it went on working: it never checked `is_lost()` / `lost()`, or it
//!    checked, then was paused (a GC or scheduler stall, SIGSTOP, a VM
//!    migration, a slow disk) past the deadline before the write the check
//!    was meant to protect. No lock client can close this window: any
//!    check can be followed by a pause.
//! 2. **The server lost the write.** A failover promoted a replica that had
//!    not received the acquire or the last renewal (replication is
//!    asynchronous; [`min_replica_acks`](crate::ClientBuilder::min_replica_acks)
//!    narrows the window, it does not close it), a restart came back
//!    without the key, or someone removed it outside the protocol
//!    (`redbell unlock`, `DEL`, `FLUSHDB`, eviction under `maxmemory`).
//!    Also of this kind: on Redis Cluster, the client re-sends a request
//!    after a redirection or a reconnect, so a shortening `extend` whose
//!    connection broke may be applied after a later renewal was confirmed.
//! 3. **The clocks break (b):** the server's clock runs more than the
//!    margin faster than ours, or jumps forward (Redis expires keys by its
//!    wall clock).
//!
//! **Fencing is what protects the resource then.** Every acquisition's
//! [`fence`](crate::MutexGuard::fence) is strictly greater than every fence
//! handed out before for the lock name (`max(previous + 1, server time in
//! µs)`, which stays increasing after a failover that lost the last
//! increments, as long as the servers' clocks differ by less than a
//! failover takes). A resource that remembers the highest fence it has
//! accepted and rejects lower ones refuses the stale holder's writes in
//! all three cases: the lease makes overlap rare and short, the fence makes
//! it harmless.
//!

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::hub::Hold;
use crate::keys::LockKeys;
use crate::stats::{Counters, LostCause};

/// The margin kept off a lease for clock drift between us and the server.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The local deadline of a lease of `lease` whose request was sent at `sent`.
pub(crate) fn deadline(sent: Instant, lease: Duration) -> Instant {
    (sent + lease)
        .checked_sub(drift(lease))
        .unwrap_or(sent)
        .max(sent)
}

/// The local view of one acquisition's lease.
#[derive(Debug)]
pub(crate) struct Lease {
    /// When the latest acquire, renewal or extend that counts was sent, and
    /// the deadline it set. Replaced only by a confirmation of a request sent
    /// no earlier, so a late reply never undoes a newer one; an extend whose
    /// outcome is unknown moves the deadline earlier (never later) and
    /// counts as sent. Checked against `lost` under this lock.
    times: StdMutex<Times>,
    /// Set once, when the lease is known lost or its deadline was seen
    /// passed; never cleared. Set while `times` is locked, except by
    /// [`Lease::set_lost`], which needs no ordering with the deadline.
    lost: AtomicBool,
    /// Woken when `lost` is set or the deadline moves.
    changed: Notify,
    /// Told once when the lease is lost: the client's counters and the
    /// lock's name (for the warning). Set right after the acquisition.
    observer: OnceLock<(Arc<Counters>, Arc<LockKeys>)>,
}

#[derive(Debug, Clone, Copy)]
struct Times {
    sent: Instant,
    deadline: Instant,
}

impl Lease {
    /// A lease whose acquire request was sent at `sent` and lasts `lease`.
    pub(crate) fn new(sent: Instant, lease: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            times: StdMutex::new(Times {
                sent,
                deadline: deadline(sent, lease),
            }),
            lost: AtomicBool::new(false),
            changed: Notify::new(),
            observer: OnceLock::new(),
        })
    }

    fn times(&self) -> StdMutexGuard<'_, Times> {
        // `Times` is two plain values, consistent whatever panicked.
        self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the lease is lost, with `times` locked: a deadline seen
    /// passed sets `lost`, so the answer never turns back to false.
    fn check(&self, times: &Times) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= times.deadline {
            self.set_lost(LostCause::Deadline);
            return true;
        }
        false
    }

    /// Records a successful renewal (or extend) sent at `sent`. Returns
    /// whether the lease is still held: a lease already lost (reported, or
    /// past its deadline) stays lost and its deadline does not move, however
    /// late the reply that would have renewed it.
    pub(crate) fn renewed(&self, sent: Instant, lease: Duration) -> bool {
        {
            let mut times = self.times();
            if self.check(&times) {
                return false;
            }
            if sent < times.sent {
                return true; // a newer request counts already
            }
            *times = Times {
                sent,
                deadline: deadline(sent, lease),
            };
        }
        self.changed.notify_waiters();
        true
    }

    /// Records an extend to `lease` about to be sent at `sent`, before its
    /// outcome is known: the server may apply it whatever becomes of the
    /// reply, so the deadline moves earlier if it is shorter (never later),
    /// and a renewal sent before it no longer counts (the server applies it
    /// first, so the extend's expiry is the one that stays).
    pub(crate) fn shortened(&self, sent: Instant, lease: Duration) {
        {
            let mut times = self.times();
            times.sent = times.sent.max(sent);
            times.deadline = times.deadline.min(deadline(sent, lease));
        }
        self.changed.notify_waiters(); // `lost` re-plans its sleep
    }

    /// The instant after which the key may have expired on the server.
    pub(crate) fn deadline(&self) -> Instant {
        self.times().deadline
    }

    /// How long until the deadline (zero once it passed).
    pub(crate) fn remaining(&self) -> Duration {
        self.times()
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// Reports this lease's loss (once) to `counters`, as the lock `keys` names
    /// (an `Arc` the guard holds already: no allocation per acquisition).
    pub(crate) fn observe(&self, counters: Arc<Counters>, keys: Arc<LockKeys>) {
        let _ = self.observer.set((counters, keys));
    }

    /// Marks the lease lost, for `cause`, and wakes everyone waiting on
    /// [`Lease::lost`]. The first time, the loss is counted and logged: a
    /// critical section may have lost its protection, which an operator
    /// must hear of.
    pub(crate) fn set_lost(&self, cause: LostCause) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            // Counted before anyone waiting on `lost()` runs.
            if let Some((counters, keys)) = self.observer.get() {
                counters.lost(cause);
                tracing::warn!(lock = %keys.name(), cause = cause.as_str(), "lease lost");
            }
            self.changed.notify_waiters();
        }
    }

    /// Whether the lease is lost: reported lost, or past its deadline.
    /// Once true, always true.
    pub(crate) fn is_lost(&self) -> bool {
        self.check(&self.times())
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn lost(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let deadline = {
                let times = self.times();
                if self.check(&times) {
                    return;
                }
                times.deadline
            };
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

/// A fair grant read after the lease's waiter left is passed on once the
/// lease is lost (see [`Hold`]).
impl Hold for Lease {
    fn holds(&self) -> bool {
        !self.is_lost()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lease_deadline_and_lost() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(1));
        assert!(!lease.is_lost());
        let expected = Instant::now() + Duration::from_secs(1) - drift(Duration::from_secs(1));
        assert_eq!(lease.deadline(), expected);
        // A renewal moves the deadline; lost() resolves only at the new one.
        tokio::time::advance(Duration::from_millis(500)).await;
        lease.renewed(Instant::now(), Duration::from_secs(1));
        let started = Instant::now();
        lease.lost().await;
        assert!(Instant::now() >= started + Duration::from_millis(900));
        assert!(lease.is_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_extend_moves_the_deadline_back_and_late_replies_do_not_undo_it() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_secs(30));
        tokio::time::advance(Duration::from_millis(10)).await;
        let extend_sent = Instant::now();
        lease.renewed(extend_sent, Duration::from_secs(1));
        assert_eq!(
            lease.deadline(),
            deadline(extend_sent, Duration::from_secs(1))
        );
        // A renewal sent before the extend, confirmed after it, is ignored.
        lease.renewed(t0 + Duration::from_millis(5), Duration::from_secs(30));
        assert_eq!(
            lease.deadline(),
            deadline(extend_sent, Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_renewal_does_not_revive_a_lost_lease() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(1));
        let renewal_sent = Instant::now() + Duration::from_millis(300);
        tokio::time::advance(Duration::from_millis(400)).await;
        lease.set_lost(LostCause::Taken); // e.g. another renewal found the key taken
        let before = lease.deadline();
        lease.renewed(renewal_sent, Duration::from_secs(1));
        assert_eq!(lease.deadline(), before, "a lost lease was renewed");
        assert!(lease.is_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn is_lost_never_turns_back_to_false() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(lease.is_lost(), "past the deadline");
        // A renewal sent before the deadline, confirmed after it.
        lease.renewed(t0 + Duration::from_millis(500), Duration::from_secs(1));
        assert!(lease.is_lost(), "is_lost() turned back to false");
        tokio::time::timeout(Duration::from_millis(1), lease.lost())
            .await
            .expect("lost() resolves at once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_extend_of_unknown_outcome_outranks_earlier_renewals() {
        let t0 = Instant::now();
        let lease = Lease::new(t0, Duration::from_secs(30));
        let renewal_sent = t0 + Duration::from_millis(10);
        tokio::time::advance(Duration::from_millis(20)).await;
        let extend_sent = Instant::now();
        lease.shortened(extend_sent, Duration::from_secs(1)); // reply never seen
        // The renewal was sent before the extend, so the server applied
        // the extend after it: its late reply must not undo the extend.
        lease.renewed(renewal_sent, Duration::from_secs(30));
        assert_eq!(
            lease.deadline(),
            deadline(extend_sent, Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shortened_deadline_wakes_lost() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        let waiter = {
            let lease = lease.clone();
            tokio::spawn(async move { lease.lost().await })
        };
        tokio::task::yield_now().await; // parked until the 60 s deadline
        let sent = Instant::now();
        lease.shortened(sent, Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("lost() resolves at the shortened deadline")
            .expect("no panic");
        assert!(Instant::now() >= deadline(sent, Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn set_lost_wakes_waiters() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(3600));
        let waiter = {
            let lease = lease.clone();
            tokio::spawn(async move { lease.lost().await })
        };
        tokio::task::yield_now().await;
        lease.set_lost(LostCause::Taken);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("lost() resolves")
            .expect("no panic");
        assert!(lease.is_lost());
    }
}
