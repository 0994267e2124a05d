//! Leases: the renewal task (watchdog) and the lost-lease signal.
//!
//! Every guard owns a [`Lease`]: the local deadline by which its key is
//! certain to have expired unless renewed, and a lost flag. A guard of a
//! lock without a fixed lease is also entered in its client's one
//! [`Renewer`]: a timer queue served by a single task that renews every
//! lease falling due within a quarter period of the earliest one in **one**
//! batched script call per 512 locks (the `extend` script takes many keys).
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
//! ## The "renewals failing" warning
//!
//! A lease whose renewals go unconfirmed for a third of the lease is
//! logged at `warn` ("lease renewals are failing"), once per failing
//! spell, before it is lost. The clock starts when the first unconfirmed
//! renewal fell due; the warning fires a third of the lease later, or
//! halfway from that due to the deadline if that comes first (with a
//! `renew_every` near the lease), so always before the deadline. It is
//! timed by the renewal task's own timer, not by a failed reply: under
//! `CLIENT PAUSE` or a black-holed connection a renewal gets no reply at
//! all before the lease runs out (see `Renewer`'s `run`).
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
//! ## No orphan renewals
//!
//! Dropping or unlocking a guard removes its entry from the queue
//! synchronously, before the release is sent. A renewal already taken from
//! the queue may still reach Redis before or after the release; either way
//! it is harmless, because the script only resets the expiry of a key that
//! still holds our token: it can never bring a released key back or prolong
//! someone else's.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::keys::{LockKeys, Replication, millis};
use crate::scripts::{self, Owned};
use crate::stats::{Counters, LostCause};
use crate::task::AbortOnDrop;

/// Locks renewed by one script call at most.
const BATCH: usize = 512;

/// The margin kept off a lease for clock drift between us and the server.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The local deadline of a lease of `lease` whose request was sent at `sent`.
fn deadline(sent: Instant, lease: Duration) -> Instant {
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
                tracing::warn!(lock = %keys.name, cause = cause.as_str(), "lease lost");
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

/// A guard's place in the renewal queue; dropping it stops the renewals,
/// synchronously.
#[derive(Debug)]
pub(crate) struct Renewal {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Renewal {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(entry) = state.entries.remove(&self.id) {
            state.queue.remove(&(entry.due, self.id));
        }
    }
}

/// The renewal queue of one client and its task.
#[derive(Debug)]
pub(crate) struct Renewer {
    shared: Arc<Shared>,
    _task: AbortOnDrop,
}

#[derive(Debug)]
struct Shared {
    state: StdMutex<State>,
    /// Woken when an entry is added, so the task can re-plan its sleep.
    added: Notify,
    lease: Duration,
    every: Duration,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// Guards being renewed, by id: present from `register` until the
    /// `Renewal` is dropped or the lease is lost. An entry is out of `queue`
    /// while its renewal is in flight.
    entries: HashMap<u64, Entry>,
    /// `(due, id)` of every entry not in flight, earliest first.
    queue: BTreeSet<(Instant, u64)>,
    /// The latest instant by which the task looks at `queue` again (the
    /// due it sleeps until, or the past while it renews); `None`: it waits
    /// for `added`. An entry due no earlier needs no wake-up, so an
    /// acquisition on a client that already holds or recently held a lock
    /// costs the task nothing.
    awake_by: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    keys: Arc<LockKeys>,
    token: String,
    lease: Arc<Lease>,
    /// When the next renewal is due; the entry's key in `queue`.
    due: Instant,
    /// `WAIT` after each renewal, as for the acquire.
    replication: Option<Replication>,
    /// No renewal falls due at or after this instant (`max_hold` after the
    /// acquire was sent); `None`: renewed as long as the guard lives.
    hold_until: Option<Instant>,
    /// When the renewal not yet confirmed first fell due: `sent + every`
    /// of the last confirmed acquire or renewal (retries move `due`, not
    /// this). The "renewals failing" clock starts here.
    first_due: Instant,
    /// Set once the "renewals failing" warning went out; cleared by a
    /// confirmed renewal, so each failing spell warns once.
    warned: bool,
}

impl Entry {
    /// When the "renewals failing" warning is due if no renewal is
    /// confirmed before: a third of `lease` past `first_due`, or halfway
    /// from `first_due` to the deadline if sooner (strictly before the
    /// deadline either way, while `first_due` is before it).
    fn warn_at(&self, lease: Duration) -> Instant {
        warn_at(self.first_due, self.lease.deadline(), lease)
    }
}

/// [`Entry::warn_at`] of a renewal first due at `first_due` of a lease of
/// `lease` whose deadline is `deadline`.
fn warn_at(first_due: Instant, deadline: Instant, lease: Duration) -> Instant {
    let margin = deadline.saturating_duration_since(first_due) / 2;
    first_due + margin.min(lease / 3)
}

impl State {
    /// Warns once for every entry whose renewals have gone unconfirmed past
    /// its [`Entry::warn_at`]; returns the earliest warning still ahead
    /// (`None`: none), for the task's timer.
    fn warn_at_risk(&mut self, lease: Duration) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for entry in self.entries.values_mut().filter(|e| !e.warned) {
            let at = entry.warn_at(lease);
            if at > now {
                next = Some(next.map_or(at, |n| n.min(at)));
            } else if !entry.lease.is_lost() {
                // A lost lease has its own warning ("lease lost").
                entry.warned = true;
                tracing::warn!(lock = %entry.keys.name,
                    remaining = ?entry.lease.remaining(),
                    "lease renewals are failing; the lease is at risk");
            }
        }
        next
    }
}

impl Shared {
    fn lock(&self) -> StdMutexGuard<'_, State> {
        // Every update leaves `State` consistent before any call that could
        // panic, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Renewer {
    /// Starts the renewal task: leases of `lease`, renewed every `every`.
    pub(crate) fn start(
        conn: Conn,
        lease: Duration,
        every: Duration,
        counters: Arc<Counters>,
    ) -> Renewer {
        let shared = Arc::new(Shared {
            state: StdMutex::default(),
            added: Notify::new(),
            lease,
            every,
            counters,
        });
        let task = tokio::spawn(run(shared.clone(), conn));
        Renewer {
            shared,
            _task: AbortOnDrop(task),
        }
    }

    /// The lease every renewed lock gets.
    pub(crate) fn lease(&self) -> Duration {
        self.shared.lease
    }

    /// Enters an acquisition whose acquire request was sent at `sent`.
    pub(crate) fn register(
        &self,
        keys: Arc<LockKeys>,
        token: String,
        lease: Arc<Lease>,
        sent: Instant,
        replication: Option<Replication>,
        max_hold: Option<Duration>,
    ) -> Renewal {
        let due = sent + self.shared.every;
        let hold_until = max_hold.and_then(|hold| sent.checked_add(hold));
        let id = {
            let mut state = self.shared.lock();
            let id = state.next_id;
            state.next_id += 1;
            state.entries.insert(
                id,
                Entry {
                    keys,
                    token,
                    lease,
                    due,
                    replication,
                    hold_until,
                    first_due: due,
                    warned: false,
                },
            );
            state.queue.insert((due, id));
            let wake = state.awake_by.is_none_or(|by| due < by);
            if wake {
                state.awake_by = Some(due);
                self.shared.added.notify_one();
            }
            id
        };
        Renewal {
            shared: self.shared.clone(),
            id,
        }
    }
}

/// One renewal taken from the queue: entry id, lock, token, `WAIT`.
type Due = (u64, Arc<LockKeys>, String, Option<Replication>);

/// The renewal task: sleep until the earliest due entry, renew everything
/// due within a quarter period in batches, repeat.
async fn run(shared: Arc<Shared>, conn: Conn) {
    let slack = shared.every / 4;
    let retry = (shared.every / 4).min(Duration::from_millis(250));
    loop {
        let (next, mut warn_at) = {
            let mut state = shared.lock();
            let next = state.queue.first().map(|(due, _)| *due);
            state.awake_by = next;
            (next, state.warn_at_risk(shared.lease))
        };
        // An entry at risk was due before its warning, so it is in the
        // queue or in flight; the warning timer only matters while a
        // renewal is in flight (below), and costs nothing here.
        match next {
            Some(due) if due > Instant::now() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = shared.added.notified() => continue,
                }
            }
            Some(_) => {}
            None => {
                shared.added.notified().await;
                continue;
            }
        }

        // Take every entry due within the slack out of the queue.
        let horizon = Instant::now() + slack;
        let mut batch: Vec<Due> = {
            let mut guard = shared.lock();
            let state = &mut *guard;
            let mut batch = Vec::new();
            while let Some(&(due, id)) = state.queue.first() {
                if due > horizon {
                    break;
                }
                state.queue.pop_first();
                let Some(entry) = state.entries.get(&id) else {
                    continue;
                };
                if entry.lease.is_lost() {
                    state.entries.remove(&id); // never renew a lost lease
                    continue;
                }
                if entry.hold_until.is_some_and(|until| entry.due >= until) {
                    // Held for its maximum: the lease runs out, and `lost`
                    // fires at its deadline.
                    tracing::debug!(lock = %entry.keys.name, "maximum hold reached; renewal stopped");
                    state.entries.remove(&id);
                    continue;
                }
                batch.push((
                    id,
                    entry.keys.clone(),
                    entry.token.clone(),
                    entry.replication,
                ));
            }
            batch
        };

        // Locks that must be confirmed by replicas go in calls of their own.
        batch.sort_by_key(|(_, _, _, replication)| replication.map(|r| (r.replicas, r.timeout_ms)));
        let chunks = batch
            .chunk_by(|a, b| a.3 == b.3)
            .flat_map(|same| same.chunks(BATCH));
        for chunk in chunks {
            let sent = Instant::now();
            let locks: Vec<(&LockKeys, &str)> = chunk
                .iter()
                .map(|(_, k, t, _)| (&**k, t.as_str()))
                .collect();
            let length = shared.lease;
            let extend = scripts::extend(&conn, &locks, millis(length), chunk[0].3);
            tokio::pin!(extend);
            // A renewal may get no reply before the lease runs out (a
            // paused server, a black hole): the warning is timed here, not
            // by the reply, so it still comes before `lost()`.
            let outcome = loop {
                let timer = async {
                    match warn_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    outcome = &mut extend => break outcome,
                    () = timer => warn_at = shared.lock().warn_at_risk(shared.lease),
                }
            };
            let (mut renewed, mut failed) = (0, 0);
            let mut state = shared.lock();
            for (i, (id, _, _, _)) in chunk.iter().enumerate() {
                let Some(entry) = state.entries.get_mut(id) else {
                    continue; // unlocked or dropped while in flight
                };
                let verdict = outcome.get(i).and_then(|o| o.as_ref().ok()).copied();
                let lost = match verdict {
                    // A confirmation that arrives after the lease was lost
                    // (by deadline, or by `extend`) does not revive it.
                    Some(Owned::Ours) if !entry.lease.renewed(sent, length) => {
                        Some(LostCause::Deadline)
                    }
                    Some(Owned::Ours) => {
                        renewed += 1;
                        entry.due = sent + shared.every;
                        entry.first_due = entry.due;
                        entry.warned = false;
                        None
                    }
                    Some(Owned::Theirs) => Some(LostCause::Taken),
                    Some(Owned::Gone) => Some(LostCause::Gone),
                    None => {
                        failed += 1;
                        if entry.lease.is_lost() {
                            Some(LostCause::Deadline)
                        } else {
                            entry.due = Instant::now() + retry;
                            None
                        }
                    }
                };
                match lost {
                    None => {
                        let due = entry.due;
                        state.queue.insert((due, *id));
                    }
                    Some(cause) => {
                        entry.lease.set_lost(cause);
                        state.entries.remove(id);
                    }
                }
            }
            // Failed replies warn here, at the latest a retry after the
            // warning fell due.
            warn_at = state.warn_at_risk(shared.lease);
            drop(state);
            shared.counters.renewals(renewed, failed);
            if let Some(Err(e)) = outcome.iter().find(|o| o.is_err()) {
                tracing::debug!(error = %e, locks = chunk.len(), "lease renewal failed; retrying");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_at_risk_warning_is_after_the_due_and_before_the_deadline() {
        let lease = Duration::from_secs(3);
        let sent = Instant::now();
        // Renewed every third: about a third of the lease after the first
        // due (a little less: halfway to a deadline the drift moved in).
        let due = sent + Duration::from_secs(1);
        let at = warn_at(due, deadline(sent, lease), lease);
        assert!(
            at <= due + lease / 3 && at >= due + Duration::from_millis(950),
            "{:?}",
            at - due
        );
        // Renewed just before the deadline: halfway from the due to it, so
        // neither before the renewal was tried nor after the loss.
        let due = sent + Duration::from_millis(2_900);
        let at = warn_at(due, deadline(sent, lease), lease);
        assert!(at > due && at < deadline(sent, lease), "{:?}", at - sent);
    }

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
