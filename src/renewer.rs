//! The renewal task (watchdog): one per client, serving every guard of a
//! lock without a fixed lease.
//!
//! A [`Renewer`] is a timer queue served by a single task that renews every
//! lease falling due within a quarter period of the earliest one in **one**
//! batched script call per 512 locks (the `extend` script takes many keys).
//! What a confirmed or refused renewal does to a guard's [`Lease`] (and when
//! a lease counts as lost) is `lease.rs`'s.
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
//! all before the lease runs out (see `run`).
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
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::keys::{LockKeys, Replication, millis};
use crate::lease::Lease;
use crate::scripts::{self, Owned};
use crate::stats::{Counters, LostCause};
use crate::task::AbortOnDrop;

/// Locks renewed by one script call at most.
const BATCH: usize = 512;

/// A guard's place in the renewal queue; dropping it stops the renewals,
/// synchronously.
#[derive(Debug)]
pub(crate) struct Renewal {
    shared: Arc<Schedule>,
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
    shared: Arc<Schedule>,
    _task: AbortOnDrop,
}

/// What the renewal task and the guards' [`Renewal`]s share: the queue of
/// entries and the client's renewal settings.
#[derive(Debug)]
struct Schedule {
    state: StdMutex<State>,
    /// Woken when an entry is added, so the task can re-plan its sleep.
    added: Notify,
    lease: Duration,
    every: Duration,
    counters: Arc<Counters>,
}

/// The entries and their due order, behind [`Schedule`]'s mutex.
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

/// One guard being renewed.
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
                tracing::warn!(lock = %entry.keys.name(),
                    remaining = ?entry.lease.remaining(),
                    "lease renewals are failing; the lease is at risk");
            }
        }
        next
    }
}

impl Schedule {
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
        let shared = Arc::new(Schedule {
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
async fn run(shared: Arc<Schedule>, conn: Conn) {
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
                    tracing::debug!(lock = %entry.keys.name(), "maximum hold reached; renewal stopped");
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
        batch.sort_by_key(|(_, _, _, replication)| {
            replication.map(|r| (r.replicas(), r.timeout_ms))
        });
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
    use crate::lease::deadline;

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
}
