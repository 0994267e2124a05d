//! The waiter registry: per wake channel, the local waiters parked on it,
//! and the routing of each message to the one waiter it names.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Hold;
use super::message::{self, Notice, WakeMessage};
use crate::background::{self, Work};
use crate::keys::{CLAIM_MS, HANDOFF_MS, Kind, LockKeys, SEM_RESERVE_MS, Token};
use crate::stats::{Counters, Wakeup};

/// The waiter registry: per wake channel, the local waiters; shared by the
/// hub's tasks and the waiters.
pub(super) struct Registry {
    /// Wake channel -> local waiters. Only touched with the lock held, and
    /// the lock is never held across an `.await`.
    pub(super) channels: StdMutex<HashMap<Channel, Entry>>,
    /// Where pass-ons are sent (the client's background task).
    pub(super) background: background::Sender,
    /// What the client counts (wake-ups received and passed on,
    /// reconnects).
    pub(super) counters: Arc<Counters>,
    /// This client's id: the first half of its queue members.
    pub(super) client_id: String,
    /// Source of waiter ids, unique within the client.
    pub(super) next_waiter: AtomicU64,
    /// Per channel, our own UNSUBSCRIBEs whose confirmation may still reach
    /// the dispatcher (on a cluster, as a push it must not take for the
    /// server dropping the channel). Cleared when the connection is lost.
    pub(super) own_unsubscribes: StdMutex<HashMap<String, u32>>,
    /// The channels whose last waiter left while subscribed (each once:
    /// its entry's `lingering` is set), the only ones the linger sweep
    /// looks at: a sweep of every channel, ten times a second, held the
    /// registry's lock (which each wake-up's dispatch takes) for a time
    /// that grew with the channels waited on. Taken after `channels`,
    /// never before it.
    pub(super) lingering: StdMutex<Vec<String>>,
    /// The fair acquisitions of this client's queued waiters that left with
    /// the lock. Taken after `channels`, never before it.
    pub(super) fair_holds: StdMutex<FairHolds>,
}

/// This client's fair acquisitions that may still be held, by the id of
/// the waiter that made them (one that had queued: only those can be named
/// by a grant). A grant naming such a waiter, read after its attempt
/// confirmed an earlier grant, must not be passed on: that would release a
/// lock in use. A grant naming a gone waiter whose acquisition is not held
/// any more (released, or never made) is passed on: after a failover that
/// lost the queue's last changes, the promoted replica still queues
/// members that were served on the old primary, and their grants would
/// otherwise each hold the lock for a claim while nobody takes it.
///
/// Each hold is a weak reference to its lease (what the guard alone keeps
/// alive): a hold whose guard is gone (released, or dropped and released
/// in the background), or whose lease is lost (the guard kept by a holder
/// told to stop), reads as not held. Dead entries are swept whenever the
/// map has doubled since the last sweep.
#[derive(Default)]
pub(super) struct FairHolds {
    leases: HashMap<u64, Weak<dyn Hold>>,
    /// The size at which the next insert sweeps first.
    sweep_at: usize,
}

impl FairHolds {
    /// Notes that waiter `id` left holding `lease`.
    pub(super) fn insert(&mut self, id: u64, lease: Weak<dyn Hold>) {
        if self.leases.len() >= self.sweep_at {
            self.leases.retain(|_, l| l.strong_count() > 0);
            self.sweep_at = (2 * self.leases.len()).max(64);
        }
        self.leases.insert(id, lease);
    }

    /// Whether waiter `id` left with a hold whose guard still lives and
    /// whose lease is not lost.
    pub(super) fn held(&self, id: u64) -> bool {
        self.leases
            .get(&id)
            .and_then(Weak::upgrade)
            .is_some_and(|l| l.holds())
    }
}

/// A key of the registry's map: the keys of the lock whose wake channel
/// it is, hashed and compared as that channel's name (so the map is
/// searched by name), rather than a copy of the name beside them.
#[derive(Clone)]
pub(super) struct Channel(pub(super) Arc<LockKeys>);

impl Borrow<str> for Channel {
    fn borrow(&self) -> &str {
        self.0.channel()
    }
}

impl Hash for Channel {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, which `Borrow<str>` requires.
        self.0.channel().hash(state);
    }
}

impl PartialEq for Channel {
    fn eq(&self, other: &Channel) -> bool {
        self.0.channel() == other.0.channel()
    }
}

impl Eq for Channel {}

pub(super) struct Entry {
    /// Waiter id -> what that waiter parks on. An id is present from
    /// `join` until its `Registration` is dropped. Ordered: ids grow with
    /// each `join`, so the first is the oldest.
    pub(super) waiters: BTreeMap<u64, Arc<Waiter>>,
    /// The one local waiter that may put a member in the lock's queue
    /// (Mutex, FairMutex, Semaphore; see "One place per client" in
    /// `acquire.rs`): `Some` with an id of `waiters` whenever `waiters` is
    /// not empty, the oldest when it was chosen. When it leaves (with the
    /// lock or without), the oldest remaining waiter takes its turn and is
    /// notified, so that it attempts (and queues) at once. Unused (`None`)
    /// for an RwLock, whose release is broadcast.
    pub(super) queuer: Option<u64>,
    /// When `waiters` last became empty; `None` while it is not.
    pub(super) idle_since: Option<Instant>,
    /// Listed in the registry's `lingering`.
    pub(super) lingering: bool,
    /// The current pub/sub connection confirmed our SUBSCRIBE. Set only by
    /// the control task; cleared for every entry when the connection drops,
    /// and on a cluster for the entries of one shard when that shard's
    /// subscription is lost.
    pub(super) subscribed: bool,
    /// When this client last released the lock (it was ours) while a local
    /// waiter waited; taken by the next local waiter to acquire it, for the
    /// hand-off gap. With the waiter id the next `join` drew then: the
    /// waiters below it joined before this release (the one they waited
    /// for).
    pub(super) released_at: Option<(Instant, u64)>,
}

/// What one waiter parks on. One per waiting `lock()` call, for as long
/// as it waits: kept small (its queue member is built when needed, from
/// the client id, its id and, for a fair lock, its token).
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Its owner token: the one its attempts set, and the last part of a
    /// fair member (which the release writes into the lock).
    token: Token,
    /// The kind of lock it waits for (read-write locks mix readers and
    /// writers on one channel).
    pub(super) kind: Kind,
    /// Notified (`notify_one`, so a wake-up between two parks is kept) when
    /// a wake-up names this waiter, and on reconnects.
    pub(crate) notify: Notify,
    /// Set with the latest notification when it was a standby (the waiter
    /// ahead was just woken or granted the lock) rather than a wake-up or
    /// grant: the window in ms to park at most before attempting, 0 for
    /// none. Read and cleared by the waiter.
    standby: AtomicU32,
    /// Set with the latest notification when it was a fair grant (the lock
    /// holds this waiter's token on a claim, until its own attempt sets its
    /// lease); read and cleared by the waiter.
    grant: AtomicBool,
    /// Set when a notification asks this waiter, as its client's queuer of
    /// the lock, to attempt (a wake-up, grant or standby naming it; its
    /// turn to queue); cleared by the waiter before each attempt (before
    /// it reads its turn). Still set when a sibling's backup window ends:
    /// the queuer has not attempted since (its future is not polled), and
    /// the sibling takes over its turn (see "One place per client" in
    /// `acquire.rs`).
    owed: AtomicBool,
    /// Set with a notification that the client's queuer of the lock was
    /// just asked to attempt: the window in ms after which this waiter
    /// checks that it did (`owed` cleared), 0 for none. Read and cleared by
    /// the waiter.
    backup: AtomicU32,
}

impl Waiter {
    /// A waiter for a lock of `kind`, attempting with `token`.
    pub(super) fn new(token: Token, kind: Kind) -> Waiter {
        Waiter {
            token,
            kind,
            notify: Notify::new(),
            standby: AtomicU32::new(0),
            grant: AtomicBool::new(false),
            owed: AtomicBool::new(false),
            backup: AtomicU32::new(0),
        }
    }

    /// Its owner token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The window of the standby just received, if the notification was
    /// one (and clears it).
    pub(crate) fn take_standby(&self) -> Option<Duration> {
        match self.standby.swap(0, Ordering::AcqRel) {
            0 => None,
            ms => Some(Duration::from_millis(ms.into())),
        }
    }

    /// Whether the notification just received was a fair grant (and
    /// clears it).
    pub(crate) fn take_grant(&self) -> bool {
        self.grant.swap(false, Ordering::AcqRel)
    }

    /// The backup window just received, if the notification was one (and
    /// clears it): the client's queuer was asked to attempt.
    pub(crate) fn take_backup(&self) -> Option<Duration> {
        match self.backup.swap(0, Ordering::AcqRel) {
            0 => None,
            ms => Some(Duration::from_millis(ms.into())),
        }
    }

    /// Notes that this waiter is about to attempt: whatever it was asked
    /// to do, it does now.
    pub(crate) fn attempting(&self) {
        self.owed.store(false, Ordering::Release);
    }

    /// Whether this waiter was asked to attempt and has not since.
    pub(super) fn owes(&self) -> bool {
        self.owed.load(Ordering::Acquire)
    }
}

impl Entry {
    /// Asks the queuer `id` to attempt (its wake-up, grant or standby, or
    /// its turn, is already stored) and gives the oldest other local waiter
    /// a backup: after the kind's window, plus `after_ms` (the window of a
    /// standby the queuer was given: it parks that long first), it checks
    /// that the queuer did (see "One place per client" in `acquire.rs`).
    /// Costs no Redis call.
    pub(super) fn prod_queuer(&self, kind: Kind, id: u64, after_ms: u64) {
        let Some(queuer) = self.waiters.get(&id) else {
            return;
        };
        // Set before the notify: the queuer clears it before its attempt,
        // so an attempt that follows this notification always clears it.
        queuer.owed.store(true, Ordering::Release);
        queuer.notify.notify_one();
        if let Some(sibling) = self.waiters.iter().find(|(i, _)| **i != id).map(|(_, w)| w) {
            sibling
                .backup
                .store(window_ms(after_ms + backup_ms(kind)), Ordering::Release);
            sibling.notify.notify_one();
        }
    }
}

/// How long a sibling waits for its client's queuer to attempt after it
/// was asked to, before taking over its turn: the window of the kind's
/// standby, which outlasts what the queuer was given (the plain
/// reservation, the fair claim, the semaphore's reserved place), so the
/// lock is free to anyone by then if the queuer did not take it.
/// A window in ms as a waiter keeps it (`u32`: 49 days, far past any
/// window; one beyond is cut to that).
fn window_ms(ms: u64) -> u32 {
    u32::try_from(ms).unwrap_or(u32::MAX)
}

fn backup_ms(kind: Kind) -> u64 {
    match kind {
        Kind::Fair => CLAIM_MS + 100,
        Kind::Semaphore => 2 * SEM_RESERVE_MS,
        _ => 2 * HANDOFF_MS,
    }
}

impl Registry {
    /// The queue member of this client's waiter `id`: `"<client
    /// id>:<waiter id>"`, followed by `":<token>"` for a fair lock (whose
    /// release writes that token into the lock). Built for each attempt
    /// that queues and each pass-on, rather than kept by every parked
    /// waiter.
    pub(super) fn member(&self, id: u64, waiter: &Waiter) -> String {
        let mut member = String::with_capacity(self.client_id.len() + 22 + waiter.token.len());
        let _ = write!(member, "{}:{id}", self.client_id);
        if waiter.kind == Kind::Fair {
            member.push(':');
            member.push_str(&waiter.token);
        }
        member
    }

    pub(super) fn lock(&self) -> StdMutexGuard<'_, HashMap<Channel, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert, remove or field write), so
        // poisoning is ignored.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fair acquisitions that may still be held (see [`FairHolds`]).
    pub(super) fn fair_holds(&self) -> StdMutexGuard<'_, FairHolds> {
        self.fair_holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The list of lingering channels.
    pub(super) fn lingering(&self) -> StdMutexGuard<'_, Vec<String>> {
        self.lingering.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that we are about to unsubscribe from `channels`.
    pub(super) fn expect_unsubscribes(&self, channels: &[String]) {
        let mut own = self
            .own_unsubscribes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for channel in channels {
            *own.entry(channel.clone()).or_default() += 1;
        }
    }

    /// Whether an unsubscribe of `channel` is the confirmation of one of
    /// ours (and counts it off).
    pub(super) fn own_unsubscribe(&self, channel: &str) -> bool {
        let mut own = self
            .own_unsubscribes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match own.get_mut(channel) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                own.remove(channel);
                true
            }
            None => false,
        }
    }

    /// Whether `channel` is subscribed for waiters (a server-side
    /// unsubscribe of it must be undone).
    pub(super) fn wants(&self, channel: &str) -> bool {
        self.lock().get(channel).is_some_and(|e| e.subscribed)
    }

    /// Whether `channel` has an entry: waiters, or a subscription that
    /// lingers, is being made, or waits to be made again.
    pub(super) fn has(&self, channel: &str) -> bool {
        self.lock().contains_key(channel)
    }

    /// Wakes every waiter: a stored permit on each one's own `Notify`, so a
    /// waiter between two parks returns from its next park at once.
    pub(super) fn wake_all(&self) {
        for entry in self.lock().values() {
            for waiter in entry.waiters.values() {
                waiter.notify.notify_one();
            }
        }
    }

    /// Wakes the waiters of `channel` only (as [`wake_all`](Self::wake_all)
    /// does for every channel): its subscription was lost or renewed.
    pub(super) fn wake_channel(&self, channel: &str) {
        if let Some(entry) = self.lock().get(channel) {
            for waiter in entry.waiters.values() {
                waiter.notify.notify_one();
            }
        }
    }

    /// Notes that this client released the lock of `channel` (it was ours),
    /// if a local waiter waits for it: the next to acquire it times the
    /// hand-off gap from now.
    pub(super) fn released(&self, channel: &str) {
        // The common release (nobody of ours waits) costs one atomic load.
        if !self.counters.any_parked() {
            return;
        }
        if let Some(entry) = self.lock().get_mut(channel)
            && !entry.waiters.is_empty()
        {
            let next = self.next_waiter.load(Ordering::Relaxed);
            entry.released_at = Some((Instant::now(), next));
        }
    }

    /// Routes a wake-up on `channel` whose payload is the woken member
    /// without its client id (`"<waiter id>"`, or `"<waiter id>:<token>"`
    /// for a fair grant); one for a waiter this client no longer has is
    /// passed on (a fair grant unless that waiter's acquisition is held).
    pub(super) fn deliver(&self, channel: &str, payload: &[u8]) {
        let channels = self.lock();
        let Some((Channel(keys), entry)) = channels.get_key_value(channel) else {
            // Not ours any more (unsubscribed while it was on its way).
            self.counters.wakeup(Wakeup::Skipped);
            return;
        };
        if matches!(keys.kind, Kind::Read | Kind::Write) {
            // A read-write lock's release is broadcast: wake every local
            // reader and one local writer.
            let mut writer_woken = false;
            for waiter in entry.waiters.values() {
                if waiter.kind == Kind::Read || !writer_woken {
                    writer_woken |= waiter.kind == Kind::Write;
                    waiter.notify.notify_one();
                }
            }
            return;
        }
        // The forms are message.rs's.
        let WakeMessage { waiter: id, notice } = message::parse(payload);
        let (standby, grant) = match notice {
            // Checks our subscription; not for the waiter.
            Notice::Probe => return,
            Notice::Wake => (None, false),
            Notice::Grant => (None, true),
            Notice::Standby(ms) => (Some(ms), false),
        };
        match id.and_then(|id| entry.waiters.get(&id)) {
            Some(waiter) => {
                if standby.is_none() {
                    self.counters.wakeup(Wakeup::Received);
                }
                waiter
                    .standby
                    .store(window_ms(standby.unwrap_or(0)), Ordering::Release);
                waiter.grant.store(grant, Ordering::Release);
                match id {
                    // Our queuer: its future may be kept but not polled, so
                    // a sibling backs it up.
                    Some(id) if entry.queuer == Some(id) => {
                        entry.prod_queuer(keys.kind, id, standby.unwrap_or(0));
                    }
                    _ => waiter.notify.notify_one(),
                }
            }
            None if standby.is_some() => {} // nothing was granted to the gone waiter
            // A fair grant to a waiter this client no longer has. If it
            // holds the lock (its attempt found the grant first, and this
            // message came late), passing on would release a lock in use.
            // Otherwise the grant is passed on: the waiter left without the
            // lock (its registration's pass-on did the same; the second
            // finds nothing), or it was served and let go or lost its lease,
            // and this grant comes from a promoted replica that still queues
            // its member (see `FairHolds`).
            None if keys.kind == Kind::Fair => {
                let held = id.is_some_and(|id| self.fair_holds().held(id));
                // `<waiter id>:<token>`, the member without the client id.
                let named = payload
                    .splitn(3, |b| *b == b':')
                    .take(2)
                    .collect::<Vec<_>>();
                if held || id.is_none() || named.len() < 2 || named[1].is_empty() {
                    return;
                }
                self.counters.wakeup(Wakeup::Skipped);
                self.counters.passed_on();
                let member = format!(
                    "{}:{}:{}",
                    self.client_id,
                    String::from_utf8_lossy(named[0]),
                    String::from_utf8_lossy(named[1])
                );
                self.background.send(Work::PassOn {
                    keys: keys.clone(),
                    member,
                });
            }
            None => {
                self.counters.wakeup(Wakeup::Skipped);
                self.counters.passed_on();
                let member = format!("{}:{}", self.client_id, String::from_utf8_lossy(payload));
                self.background.send(Work::PassOn {
                    keys: keys.clone(),
                    member,
                });
            }
        }
    }
}
