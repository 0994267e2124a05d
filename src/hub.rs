//! The pub/sub hub: one subscription per lock per client (the client's wake
//! channel for that lock), and the local waiters parked on it.
//!
//! # Implementation details
//!
//! ## The lost wake-up race, and why the notification is armed first
//!
//! A waiter that failed to acquire must park until the holder releases. The
//! release script deletes the key and publishes the wake-up in one atomic
//! step, so the only way to miss a release is to not be listening when it
//! happens. There are two windows:
//!
//! 1. **Before the subscription exists.** A waiter that attempts, fails, and
//!    only then subscribes misses a release published between its attempt
//!    and the server's SUBSCRIBE confirmation, and sleeps for a whole lease.
//!    So a waiter whose first attempt failed while its client was not yet
//!    subscribed calls [`Hub::subscribe`], which returns only once the
//!    server confirmed the SUBSCRIBE, and attempts *again* before it parks.
//! 2. **Between the failed attempt and the park.** A release can arrive while
//!    the attempt's reply is on the wire. The waiter therefore creates and
//!    `enable`s its [`Notified`](tokio::sync::futures::Notified) *before*
//!    each attempt: a wake-up that lands during the attempt is kept by the
//!    armed future (or as its [`Notify`]'s permit) and the park returns at
//!    once.
//!
//! ```text
//! join the hub (local)          an uncontended lock costs one attempt, no SUBSCRIBE
//! loop {
//!     arm Notified              a release from here on is not lost
//!     attempt -> acquired? done (a failed attempt queues the waiter)
//!     not subscribed yet? subscribe (confirmed), then attempt again
//!     park: notified | sleep(pttl) | deadline
//! }
//! ```
//!
//! The second attempt after subscribing costs one extra script call, once per
//! client and lock while the subscription lasts (it lingers after the last
//! waiter leaves, so a busy lock pays it once); in steady state a contended
//! acquisition costs two attempts: the one that queued the waiter and the
//! one after its wake-up.
//!
//! Correctness never depends on a message arriving: every park is bounded by
//! the holder's remaining lease (its PTTL), so a holder that crashed without
//! releasing hands over when its lease expires.
//!
//! ## One waiter woken per release, across all processes
//!
//! A plain PUBLISH on one shared channel would wake every subscribed client,
//! and each would send an attempt of which all but one fail. Instead each
//! lock has a **waiter queue** in Redis, `P:{N}:waiters`: a sorted set of
//! members `"<client id>:<waiter id>"`, each scored by its expiry in server
//! time. A waiting caller's failed attempt adds (or refreshes) its member in
//! the same script call, with an expiry of the holder's PTTL plus a grace
//! period, since a parked waiter retries by then at the latest; a successful
//! attempt removes it. The release script deletes the key and publishes the
//! waiter id on the **head's client's own channel** `P:{N}:wake:<client id>`;
//! when PUBLISH counts no receiver (that client is gone) the member is
//! dropped and the next one is tried, in the same script. Nothing is
//! published when nobody waits. Redis work per hand-off is therefore O(1)
//! whatever the number of waiting clients, and within a client exactly one
//! waiter (the one named) attempts: local single flight comes for free.
//!
//! ## Passing a wake-up on
//!
//! A waiter can be gone by the time its wake-up arrives, or leave right
//! after it arrived (cancelled, timed out). Either way nobody would attempt
//! and the others would sleep until the lease ran out. So:
//!
//! - a message naming a waiter this client no longer has is passed on;
//! - a waiter that leaves without the lock (its [`Registration`] is dropped
//!   without [`Registration::acquired`]) passes on.
//!
//! Passing on is the `pass` script, run by the client's background task:
//! remove the member from the queue and, if the lock is free, wake the next
//! head. A spurious wake-up only costs the woken waiter one attempt.
//!
//! ## What a targeted wake-up cannot cover
//!
//! A client that dies (or freezes) *after* receiving its wake-up and before
//! attempting took the wake-up with it. The other waiters then retry when
//! their parks end, bounded by the PTTL they saw: at most the holder's
//! lease, the same bound as for a holder that crashed. (The fair mutex
//! narrows this to its 500 ms claim: the waiter next in line is told to
//! park no longer than that.)
//!
//! ## Lost messages
//!
//! Pub/sub is at-most-once. When the pub/sub connection drops, the hub
//! reconnects with backoff, resubscribes every channel that still has local
//! waiters, and only then wakes **every** waiter (a stored permit on each
//! waiter's own [`Notify`], so one between two parks is not missed):
//! whatever was published while we were away, they all retry. While we are
//! away, releases find no receiver on our channels and skip our members.
//!
//! ## Tasks and ordering
//!
//! One control task owns the pub/sub sink and performs every SUBSCRIBE and
//! UNSUBSCRIBE, one at a time, so an UNSUBSCRIBE of an idle channel can never
//! overtake a later SUBSCRIBE of the same channel. A dispatcher task reads
//! messages and wakes waiters; it never waits on the control task, so
//! wake-ups are not delayed by a subscription in progress. A subscription
//! whose last waiter left is kept for a short linger (default 2 s) so a hot
//! lock does not SUBSCRIBE/UNSUBSCRIBE on every acquisition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::Error;
use crate::client::{Background, Kind, LockKeys};
use crate::conn::Conn;
use crate::pubsub::{self, Event, Sink, Stream};

/// The hub of one client. Dropping it stops its tasks.
pub(crate) struct Hub {
    shared: Arc<Shared>,
    ops: mpsc::UnboundedSender<Op>,
    _control: AbortOnDrop,
}

/// State shared by the hub's tasks and the waiters.
struct Shared {
    /// Channel name -> local waiters. Only touched with the lock held, and
    /// the lock is never held across an `.await`.
    channels: StdMutex<HashMap<String, Entry>>,
    /// Where pass-ons are sent (the client's background task).
    background: mpsc::UnboundedSender<Background>,
    /// This client's id: the first half of its queue members.
    client_id: String,
    /// Source of waiter ids, unique within the client.
    next_waiter: AtomicU64,
    /// Per channel, our own UNSUBSCRIBEs whose confirmation may still reach
    /// the dispatcher (on a cluster, as a push it must not take for the
    /// server dropping the channel). Cleared when the connection is lost.
    own_unsubscribes: StdMutex<HashMap<String, u32>>,
}

struct Entry {
    /// The lock this channel belongs to.
    keys: Arc<LockKeys>,
    /// Waiter id -> what that waiter parks on, and the kind of lock it
    /// waits for (read-write locks mix readers and writers on one channel).
    /// An id is present from `join` until its `Registration` is dropped.
    waiters: HashMap<u64, (Arc<Waiter>, Kind)>,
    /// When `waiters` last became empty; `None` while it is not.
    idle_since: Option<Instant>,
    /// The current pub/sub connection confirmed our SUBSCRIBE. Set only by
    /// the control task; cleared for every entry when the connection drops.
    subscribed: bool,
}

/// What one waiter parks on.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    /// Notified (`notify_one`, so a wake-up between two parks is kept) when
    /// a wake-up names this waiter, and on reconnects.
    pub(crate) notify: Notify,
    /// Set with the latest notification when it was a fair lock's standby
    /// rather than a grant; read and cleared by the waiter.
    standby: AtomicBool,
}

impl Waiter {
    /// Whether the notification just received was a standby (and clears it).
    pub(crate) fn take_standby(&self) -> bool {
        self.standby.swap(false, Ordering::AcqRel)
    }
}

/// Work for the control task.
enum Op {
    Subscribe(String, oneshot::Sender<()>),
    /// The dispatcher of connection `generation` saw its stream end.
    Disconnected {
        generation: u64,
    },
}

/// One waiter's place in the hub; dropping it deregisters and, unless
/// [`acquired`](Registration::acquired) was called, passes on any wake-up.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    keys: Arc<LockKeys>,
    id: u64,
    /// `"<client id>:<waiter id>"`, this waiter's member in the queue.
    member: String,
    waiter: Arc<Waiter>,
    /// Set once an attempt that queues `member` was sent.
    queued: bool,
    /// Set when the waiter got the lock: its acquire left the queue.
    acquired: bool,
}

impl Registration {
    /// What this waiter parks on; a wake-up naming it calls `notify_one`.
    pub(crate) fn waiter(&self) -> Arc<Waiter> {
        self.waiter.clone()
    }

    /// This waiter's member in the lock's queue.
    pub(crate) fn member(&self) -> &str {
        &self.member
    }

    /// Records that an attempt queuing this waiter is about to be sent:
    /// from now on, leaving without the lock must pass on.
    pub(crate) fn queued(&mut self) {
        self.queued = true;
    }

    /// Marks the waiter as done with the lock: the acquire that succeeded
    /// also took it out of the queue, so there is nothing to pass on.
    pub(crate) fn acquired(mut self) {
        self.acquired = true;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut channels = self.shared.lock();
            if let Some(entry) = channels.get_mut(&self.keys.channel) {
                entry.waiters.remove(&self.id);
                if entry.waiters.is_empty() {
                    if entry.subscribed {
                        entry.idle_since = Some(Instant::now()); // linger
                    } else {
                        channels.remove(&self.keys.channel); // never subscribed
                    }
                }
            }
        }
        if self.queued && !self.acquired && self.keys.kind != Kind::Read {
            let _ = self.shared.background.send(Background::PassOn {
                keys: self.keys.clone(),
                member: std::mem::take(&mut self.member),
            });
        }
    }
}

impl Shared {
    fn lock(&self) -> StdMutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert, remove or field write), so
        // poisoning is ignored.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that we are about to unsubscribe from `channels`.
    fn expect_unsubscribes(&self, channels: &[String]) {
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
    fn own_unsubscribe(&self, channel: &str) -> bool {
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
    fn wants(&self, channel: &str) -> bool {
        self.lock().get(channel).is_some_and(|e| e.subscribed)
    }

    /// Wakes every waiter: a stored permit on each one's own `Notify`, so a
    /// waiter between two parks returns from its next park at once.
    fn wake_all(&self) {
        for entry in self.lock().values() {
            for (waiter, _) in entry.waiters.values() {
                waiter.notify.notify_one();
            }
        }
    }

    /// Routes a wake-up on `channel` whose payload is the woken member
    /// without its client id (`"<waiter id>"`, or `"<waiter id>:<token>"`
    /// for a fair grant); one for a waiter this client no longer has is
    /// passed on.
    fn deliver(&self, channel: &str, payload: &[u8]) {
        let channels = self.lock();
        let Some(entry) = channels.get(channel) else {
            return; // not ours any more: the publisher counted no receiver
        };
        if matches!(entry.keys.kind, Kind::Read | Kind::Write) {
            // A read-write lock's release is broadcast: wake every local
            // reader and one local writer.
            let mut writer_woken = false;
            for (waiter, kind) in entry.waiters.values() {
                if *kind == Kind::Read || !writer_woken {
                    writer_woken |= *kind == Kind::Write;
                    waiter.notify.notify_one();
                }
            }
            return;
        }
        // "<waiter id>", "<waiter id>:<token>" (a fair grant) or
        // "<waiter id>:<token>:s" (a fair standby: park no longer than the
        // claim of the grant just made to the waiter ahead).
        let text = std::str::from_utf8(payload).unwrap_or("");
        let mut parts = text.split(':');
        let id = parts.next().and_then(|id| id.parse::<u64>().ok());
        let standby = parts.nth(1) == Some("s");
        match id.and_then(|id| entry.waiters.get(&id)) {
            Some((waiter, _)) => {
                waiter.standby.store(standby, Ordering::Release);
                waiter.notify.notify_one();
            }
            None if standby => {} // nothing was granted to the gone waiter
            None => {
                let member = format!("{}:{}", self.client_id, String::from_utf8_lossy(payload));
                let _ = self.background.send(Background::PassOn {
                    keys: entry.keys.clone(),
                    member,
                });
            }
        }
    }
}

impl Hub {
    /// Opens the pub/sub connection and starts the hub's tasks.
    pub(crate) async fn start(
        conn: Conn,
        connect_timeout: Duration,
        linger: Duration,
        background: mpsc::UnboundedSender<Background>,
        client_id: String,
    ) -> Result<Hub, Error> {
        let (sink, stream) = pubsub::connect(&conn, connect_timeout).await?;
        let shared = Arc::new(Shared {
            channels: StdMutex::new(HashMap::new()),
            background,
            client_id,
            next_waiter: AtomicU64::new(1),
            own_unsubscribes: StdMutex::new(HashMap::new()),
        });
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let control = Control {
            primary: conn,
            shared: shared.clone(),
            ops_tx: ops.downgrade(),
            connect_timeout,
            linger,
            generation: 0,
            conn: None,
            recheck: None,
        };
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
    pub(crate) fn join(&self, keys: &Arc<LockKeys>, token: &str) -> (Registration, bool) {
        let id = self.shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Waiter::default());
        let subscribed = {
            let mut channels = self.shared.lock();
            let entry = channels
                .entry(keys.channel.clone())
                .or_insert_with(|| Entry {
                    keys: keys.clone(),
                    waiters: HashMap::new(),
                    idle_since: None,
                    subscribed: false,
                });
            entry.waiters.insert(id, (waiter.clone(), keys.kind));
            entry.idle_since = None;
            entry.subscribed
        };
        let registration = Registration {
            shared: self.shared.clone(),
            keys: keys.clone(),
            id,
            member: match keys.kind {
                Kind::Fair => format!("{}:{id}:{token}", self.shared.client_id),
                _ => format!("{}:{id}", self.shared.client_id),
            },
            waiter,
            queued: false,
            acquired: false,
        };
        (registration, subscribed)
    }

    /// Returns once the server has confirmed the subscription to the
    /// registration's wake channel, or the pub/sub connection is down (the
    /// reconnect will then resubscribe and wake the waiter).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the subscription is made by the control task either way,
    /// and lingers until unused.
    pub(crate) async fn subscribe(&self, registration: &Registration) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Op::Subscribe(registration.keys.channel.clone(), tx))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)
    }
}

/// After a cluster's pub/sub connection was lost or a subscription dropped
/// (failover, slot migration), the hub reconnects at once, but the new
/// connection may still see the old slot map and subscribe on the demoted
/// primary, where a replica accepts SSUBSCRIBE and the new primary's SPUBLISH
/// counts no receiver (so the release drops the member as gone). So it
/// starts over once more this long after, when the cluster has settled, and
/// wakes every waiter again: those dropped meanwhile re-queue.
const CLUSTER_RECHECK: Duration = Duration::from_secs(2);

/// The live pub/sub connection: the sink and the dispatcher reading it.
struct Connection {
    sink: Sink,
    _dispatcher: AbortOnDrop,
}

/// The control task's state.
struct Control {
    /// Where the primary is; re-resolved before each reconnect.
    primary: Conn,
    shared: Arc<Shared>,
    /// Lets dispatchers report a disconnect without keeping the hub alive.
    ops_tx: mpsc::WeakUnboundedSender<Op>,
    connect_timeout: Duration,
    linger: Duration,
    /// Counts connections, so a late report from an old dispatcher is ignored.
    generation: u64,
    /// `None` while disconnected.
    conn: Option<Connection>,
    /// Cluster only: when to start over once more, set by every successful
    /// reconnect (see [`CLUSTER_RECHECK`]).
    recheck: Option<Instant>,
}

impl Control {
    async fn run(mut self, sink: Sink, stream: Stream, mut ops: mpsc::UnboundedReceiver<Op>) {
        self.install(sink, stream);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Duration::from_millis(50);
        let mut next_reconnect = Instant::now();
        loop {
            tokio::select! {
                op = ops.recv() => match op {
                    None => return, // the hub was dropped
                    Some(Op::Subscribe(channel, done)) => {
                        self.subscribe(&channel).await;
                        let _ = done.send(());
                    }
                    Some(Op::Disconnected { generation }) => {
                        if generation == self.generation && self.conn.is_some() {
                            self.disconnected();
                            backoff = Duration::from_millis(50);
                            next_reconnect = Instant::now();
                            self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                        }
                    }
                },
                _ = tick.tick() => {
                    if self.conn.is_some() && self.recheck.is_some_and(|at| Instant::now() >= at) {
                        tracing::debug!("re-checking sharded subscriptions after a cluster change");
                        self.disconnected();
                        self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                        // This reconnect was the re-check: none after it.
                        if self.conn.is_some() {
                            self.recheck = None;
                        }
                    } else if self.conn.is_some() {
                        self.unsubscribe_idle().await;
                    } else if Instant::now() >= next_reconnect {
                        self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                    }
                }
            }
        }
    }

    /// Makes `sink`/`stream` the current connection and starts its dispatcher.
    fn install(&mut self, sink: Sink, stream: Stream) {
        self.generation += 1;
        let dispatcher = tokio::spawn(dispatch(
            stream,
            self.shared.clone(),
            self.ops_tx.clone(),
            self.generation,
        ));
        self.conn = Some(Connection {
            sink,
            _dispatcher: AbortOnDrop(dispatcher),
        });
    }

    fn disconnected(&mut self) {
        tracing::debug!("pub/sub connection lost");
        self.conn = None;
        self.shared
            .own_unsubscribes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        for entry in self.shared.lock().values_mut() {
            entry.subscribed = false;
        }
    }

    async fn subscribe(&mut self, channel: &str) {
        let Some(conn) = self.conn.as_mut() else {
            return; // the reconnect will subscribe it and wake its waiters
        };
        let wanted = matches!(self.shared.lock().get(channel), Some(e) if !e.subscribed);
        if !wanted {
            return;
        }
        match tokio::time::timeout(
            self.connect_timeout,
            conn.sink.subscribe(&[channel.to_owned()]),
        )
        .await
        {
            Ok(Ok(())) => {
                let kept = match self.shared.lock().get_mut(channel) {
                    Some(entry) => {
                        entry.subscribed = true;
                        true
                    }
                    None => false, // its waiters left while we subscribed
                };
                if !kept {
                    if self.primary.is_cluster() {
                        self.shared.expect_unsubscribes(&[channel.to_owned()]);
                    }
                    let _ = tokio::time::timeout(
                        self.connect_timeout,
                        conn.sink.unsubscribe(&[channel.to_owned()]),
                    )
                    .await;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "SUBSCRIBE failed; reconnecting");
                self.disconnected();
            }
            Err(_) => {
                tracing::debug!("SUBSCRIBE timed out; reconnecting");
                self.disconnected();
            }
        }
    }

    /// Unsubscribes channels idle for longer than the linger. Their entries
    /// stay (marked unsubscribed, so a new waiter subscribes again, after
    /// this) until the server confirmed: a wake-up published meanwhile still
    /// finds its lock and is passed on.
    async fn unsubscribe_idle(&mut self) {
        let idle: Vec<String> = {
            let mut channels = self.shared.lock();
            let linger = self.linger;
            let mut idle = Vec::new();
            for (name, entry) in channels.iter_mut() {
                if entry.subscribed && entry.idle_since.is_some_and(|t| t.elapsed() >= linger) {
                    entry.subscribed = false;
                    idle.push(name.clone());
                }
            }
            idle
        };
        if idle.is_empty() {
            return;
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if self.primary.is_cluster() {
            // Only a cluster connection echoes our own unsubscribes.
            self.shared.expect_unsubscribes(&idle);
        }
        let result = tokio::time::timeout(self.connect_timeout, conn.sink.unsubscribe(&idle)).await;
        if !matches!(result, Ok(Ok(()))) {
            self.disconnected();
            return;
        }
        let mut channels = self.shared.lock();
        for name in &idle {
            if channels
                .get(name)
                .is_some_and(|e| e.waiters.is_empty() && !e.subscribed)
            {
                channels.remove(name);
            }
        }
    }

    async fn try_reconnect(&mut self, backoff: &mut Duration, next: &mut Instant) {
        // After a failover the primary has moved: ask first (sentinel mode).
        if let Err(e) = self.primary.resolve().await {
            tracing::debug!(error = %e, "could not resolve the primary");
        }
        match pubsub::connect(&self.primary, self.connect_timeout).await {
            Ok((mut sink, stream)) => {
                let wanted: Vec<String> = {
                    let mut channels = self.shared.lock();
                    channels.retain(|_, e| !e.waiters.is_empty());
                    channels.keys().cloned().collect()
                };
                if !wanted.is_empty() {
                    let result =
                        tokio::time::timeout(self.connect_timeout, sink.subscribe(&wanted)).await;
                    if !matches!(result, Ok(Ok(()))) {
                        *next = Instant::now() + *backoff;
                        *backoff = (*backoff * 2).min(Duration::from_secs(1));
                        self.shared.wake_all();
                        return;
                    }
                    // Only what this SUBSCRIBE named: a channel first used while
                    // it was in flight still has its own request queued.
                    let mut channels = self.shared.lock();
                    for name in &wanted {
                        if let Some(entry) = channels.get_mut(name) {
                            entry.subscribed = true;
                        }
                    }
                }
                self.install(sink, stream);
                if self.primary.is_cluster() {
                    self.recheck = Some(Instant::now() + CLUSTER_RECHECK);
                }
                tracing::debug!(
                    channels = wanted.len(),
                    "pub/sub reconnected; waking every waiter"
                );
                self.shared.wake_all();
            }
            Err(e) => {
                tracing::debug!(error = %e, retry_in = ?*backoff, "pub/sub reconnect failed");
                *next = Instant::now() + *backoff;
                *backoff = (*backoff * 2).min(Duration::from_secs(1));
                // Waiters keep their bounded parks; wake them so they see the
                // outage as an error from their next attempt instead of
                // sleeping on a channel that cannot deliver.
                self.shared.wake_all();
            }
        }
    }
}

/// Reads messages and wakes one waiter of the message's channel; reports a
/// disconnect when the stream ends.
async fn dispatch(
    mut stream: Stream,
    shared: Arc<Shared>,
    ops: mpsc::WeakUnboundedSender<Op>,
    generation: u64,
) {
    while let Some(event) = stream.next().await {
        match event {
            Event::Message { channel, payload } => shared.deliver(&channel, &payload),
            Event::Unsubscribed { channel } if shared.own_unsubscribe(&channel) => {}
            // The server dropped a channel we still want (a cluster slot
            // moved): start over as after a lost connection.
            Event::Unsubscribed { channel } if shared.wants(&channel) => break,
            Event::Unsubscribed { .. } => {}
        }
    }
    if let Some(ops) = ops.upgrade() {
        let _ = ops.send(Op::Disconnected { generation });
    }
}

/// Aborts the task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
