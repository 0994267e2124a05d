//! The pub/sub hub of one client: a [registry] (routing the [message]s) of the local
//! waiters per wake channel, and the [connection task](connection) that
//! keeps those channels subscribed. How waiters use it is the wait protocol,
//! explained where its loop runs, in `acquire.rs`.

mod connection;
mod message;
/// Also used by the election's observers, which subscribe on their own.
pub(crate) mod pubsub;
mod registry;
mod shards;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use connection::{Control, Op};
pub(crate) use registry::Waiter;
use registry::{Channel, Entry, Registry};

use crate::Error;
use crate::background::{self, Work};
use crate::conn::Conn;
use crate::keys::{Kind, LockKeys, Token};
use crate::stats::Counters;
use crate::task::AbortOnDrop;

/// The hub of one client. Dropping it stops its tasks.
pub(crate) struct Hub {
    shared: Arc<Registry>,
    ops: mpsc::UnboundedSender<Op>,
    _control: AbortOnDrop,
}

/// One waiter's place in the hub; dropping it deregisters and, unless
/// [`acquired`](Registration::acquired) was called, passes on any wake-up.
pub(crate) struct Registration {
    shared: Arc<Registry>,
    keys: Arc<LockKeys>,
    id: u64,
    /// Also holds the waiter's token, from which (with `id`) its queue
    /// member is built when needed ([`member`](Registration::member)).
    waiter: Arc<Waiter>,
    /// Set once an attempt that queues `member` was sent. (Atomic, as
    /// `acquired`, so that a waiter sets them through the shared borrow
    /// its loop keeps of the registration.)
    queued: AtomicBool,
    /// Set when the waiter got the lock: its acquire left the queue.
    acquired: AtomicBool,
}

impl Registration {
    /// What this waiter parks on; a wake-up naming it calls `notify_one`.
    pub(crate) fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// The keys of the lock it waits for.
    pub(crate) fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    /// This waiter's member in the lock's queue (see [`Hub::join`]), built
    /// anew on each call: a parked waiter keeps no copy.
    pub(crate) fn member(&self) -> String {
        self.shared.member(self.id, &self.waiter)
    }

    /// Records that an attempt queuing this waiter is about to be sent:
    /// from now on, leaving without the lock must pass on.
    pub(crate) fn queued(&self) {
        self.queued.store(true, Ordering::Relaxed);
    }

    /// Whether this waiter may queue now: it is its client's one queuing
    /// waiter of the lock (always, for an RwLock). The others attempt
    /// without queuing and park until it leaves: then the oldest of them
    /// takes its turn and is notified.
    pub(crate) fn may_queue(&self) -> bool {
        if !queues_one_per_client(self.keys.kind) {
            return true;
        }
        self.shared
            .lock()
            .get(self.keys.channel())
            .is_none_or(|entry| entry.queuer == Some(self.id))
    }

    /// At the end of a backup window (the client's queuer was asked to
    /// attempt): whether this waiter must attempt now. No, when the queuer
    /// attempted since (it is live: nothing to do, no Redis call). Yes,
    /// when it did not (its future is kept unpolled, or it is starved):
    /// this waiter takes over its turn, so it queues with its attempt, and
    /// the old queuer's member is passed on (it takes the turn again only
    /// when its turn comes round, if ever polled). Yes too when this
    /// waiter already has the turn, or nobody has.
    pub(crate) fn take_over(&self) -> bool {
        let old = {
            let mut channels = self.shared.lock();
            let Some(entry) = channels.get_mut(self.keys.channel()) else {
                return true;
            };
            match entry.queuer {
                Some(q) if q != self.id => {
                    // Read under the registry's lock, which the queuer's
                    // `may_queue` takes right after it clears `owed`: a
                    // queuer that cleared it is seen live here and keeps
                    // its turn; one that did not yet, finds the turn gone
                    // when it reads it, and attempts without queuing (no
                    // second member of this client).
                    if let Some(w) = entry.waiters.get(&q).filter(|w| w.owes()) {
                        let old = self.shared.member(q, w);
                        entry.queuer = Some(self.id);
                        old
                    } else {
                        return false;
                    }
                }
                _ => return true,
            }
        };
        // Its member, if still queued (a Semaphore's lapsed entry), must
        // not hold this client's place beside ours. Safe for a fair grant:
        // the window outlasted its claim, so `fair_pass` finds the lock
        // free (or another's), never the old queuer's confirmed hold (it
        // has not attempted). Plain: `pass` never deletes a lock.
        self.shared.counters.passed_on();
        self.shared.background.send(Work::PassOn {
            keys: self.keys.clone(),
            member: old,
        });
        true
    }

    /// Marks the waiter as done with the lock: the acquire that succeeded
    /// also took it out of the queue, so there is nothing to pass on.
    /// `lease` is the acquisition's (what its guard alone keeps alive):
    /// while it lives and [holds](Hold::holds), a fair grant naming this
    /// waiter that arrives after it left is not passed on.
    ///
    /// The lease is noted in the hub's fair holds at once, not kept here
    /// until the registration drops: every parked waiter carries its
    /// registration, and it would grow by the reference. A grant read
    /// before the waiter leaves finds it among the waiters; after, among
    /// the holds.
    pub(crate) fn acquired<L: Hold + 'static>(&self, lease: &Arc<L>) {
        self.acquired.store(true, Ordering::Relaxed);
        if self.keys.kind == Kind::Fair && self.queued.load(Ordering::Relaxed) {
            let lease: Weak<L> = Arc::downgrade(lease);
            self.shared.fair_holds().insert(self.id, lease);
        }
    }
}

/// The lease of an acquisition, as the hub sees it: whether it still holds
/// the lock. A fair grant naming a waiter that left with the lock is not
/// passed on while its lease lives (its guard does) and holds; once the
/// lease is lost, its holder no longer has the lock (it was told to stop),
/// and the grant is passed on like any grant to a waiter the client no
/// longer has.
pub(crate) trait Hold: Send + Sync {
    /// Whether the acquisition still holds the lock (its lease not lost).
    fn holds(&self) -> bool;
}

impl Drop for Registration {
    fn drop(&mut self) {
        let acquired = *self.acquired.get_mut();
        {
            let mut channels = self.shared.lock();
            if let Some(entry) = channels.get_mut(self.keys.channel()) {
                if acquired
                    && let Some((released, _)) =
                        entry.released_at.take_if(|(_, next)| self.id < *next)
                {
                    // Only a release after it joined (its id was drawn
                    // before) is the one it waited for.
                    self.shared.counters.handoff(released.elapsed());
                }
                entry.waiters.remove(&self.id);
                if entry.queuer == Some(self.id) {
                    // Our turn to queue ends: the oldest local waiter left
                    // takes it, and attempts (so queues) at once.
                    // It may be kept unpolled in its turn: backed up.
                    entry.queuer = entry.waiters.first_key_value().map(|(id, _)| *id);
                    if let Some(id) = entry.queuer {
                        entry.prod_queuer(self.keys.kind, id, 0);
                    }
                }
                if entry.waiters.is_empty() {
                    if entry.subscribed {
                        entry.idle_since = Some(Instant::now()); // linger
                        if !entry.lingering {
                            entry.lingering = true;
                            self.shared.lingering().push(self.keys.channel().to_owned());
                        }
                    } else {
                        channels.remove(self.keys.channel()); // never subscribed
                    }
                }
            }
        }
        if *self.queued.get_mut() && !acquired && self.keys.kind != Kind::Read {
            self.shared.counters.passed_on();
            self.shared.background.send(Work::PassOn {
                keys: self.keys.clone(),
                member: self.member(),
            });
        }
    }
}

/// Whether a client queues one waiter at a time for locks of this kind
/// (see "One place per client" in `acquire.rs`): every kind with a waiter
/// queue, not an RwLock (its release is broadcast, its writers' intents
/// only hold readers back).
fn queues_one_per_client(kind: Kind) -> bool {
    matches!(kind, Kind::Plain | Kind::Fair | Kind::Semaphore)
}

/// A handle the background worker notes its releases with (for the
/// hand-off gap), without keeping the hub alive.
#[derive(Clone, Default)]
pub(crate) struct ReleaseNotes(std::sync::Weak<Registry>);

impl ReleaseNotes {
    /// As [`Hub::released`].
    pub(crate) fn released(&self, keys: &LockKeys) {
        if let Some(shared) = self.0.upgrade() {
            shared.released(keys.channel());
        }
    }
}

impl Hub {
    /// Opens the pub/sub connection and starts the hub's tasks; `probe` is
    /// the period of its liveness check.
    pub(crate) async fn start(
        conn: Conn,
        connect_timeout: Duration,
        linger: Duration,
        probe: Duration,
        background: background::Sender,
        client_id: String,
        counters: Arc<Counters>,
    ) -> Result<Hub, Error> {
        let (sink, stream) = pubsub::connect(&conn, connect_timeout).await?;
        let shared = Arc::new(Registry {
            channels: StdMutex::new(HashMap::new()),
            background,
            client_id,
            counters,
            next_waiter: AtomicU64::new(1),
            own_unsubscribes: StdMutex::new(HashMap::new()),
            lingering: StdMutex::new(Vec::new()),
            fair_holds: StdMutex::default(),
        });
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let control = Control::new(
            conn,
            shared.clone(),
            ops.downgrade(),
            connect_timeout,
            linger,
            probe,
        );
        let task = tokio::spawn(control.run(sink, stream, ops_rx));
        Ok(Hub {
            shared,
            ops,
            _control: AbortOnDrop(task),
        })
    }

    /// Registers a waiter on the lock `keys`, locally only: wake-ups naming
    /// it reach its `Notify` from now on. Returns whether this client's wake
    /// channel for the lock is already subscribed (another local waiter, or
    /// a lingering subscription); if not, the caller must
    /// [`subscribe`](Hub::subscribe) before it may rely on wake-ups.
    ///
    /// The waiter's queue member is `"<client id>:<waiter id>"`, followed by
    /// `":<token>"` for a fair lock (whose release writes that token).
    pub(crate) fn join(&self, keys: &Arc<LockKeys>, token: Token) -> (Registration, bool) {
        let id = self.shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Waiter::new(token, keys.kind));
        let subscribed = {
            let mut channels = self.shared.lock();
            let queuer = queues_one_per_client(keys.kind).then_some(id);
            if let Some(entry) = channels.get_mut(keys.channel()) {
                entry.waiters.insert(id, waiter.clone());
                entry.idle_since = None;
                if entry.queuer.is_none() {
                    entry.queuer = queuer;
                }
                entry.subscribed
            } else {
                let mut waiters = BTreeMap::new();
                waiters.insert(id, waiter.clone());
                channels.insert(
                    Channel(keys.clone()),
                    Entry {
                        waiters,
                        queuer,
                        idle_since: None,
                        lingering: false,
                        subscribed: false,
                        released_at: None,
                    },
                );
                false
            }
        };
        let registration = Registration {
            shared: self.shared.clone(),
            keys: keys.clone(),
            id,
            waiter,
            queued: AtomicBool::new(false),
            acquired: AtomicBool::new(false),
        };
        (registration, subscribed)
    }

    /// Notes that this client released the lock `keys` (it was ours), for
    /// the hand-off gap of a local waiter that takes it next.
    pub(crate) fn released(&self, keys: &LockKeys) {
        self.shared.released(keys.channel());
    }

    /// What the client's background worker notes its releases with.
    pub(crate) fn release_notes(&self) -> ReleaseNotes {
        ReleaseNotes(Arc::downgrade(&self.shared))
    }

    /// Returns once the server has confirmed the subscription to the
    /// registration's wake channel, or the pub/sub connection is down (the
    /// reconnect will then resubscribe and wake the waiter).
    ///
    /// # Errors
    ///
    /// [`Error::NoPermission`] when the server refused the subscription
    /// (the ACL denies the channel); [`Error::Closed`] when the hub is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the subscription is made by the control task either way,
    /// and lingers until unused.
    pub(crate) async fn subscribe(&self, registration: &Registration) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Op::Subscribe(registration.keys.channel().to_owned(), tx))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}
