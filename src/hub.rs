//! The pub/sub hub: one subscription per release channel per client, and
//! the local waiters parked on it.
//!
//! # Implementation details
//!
//! ## The lost wake-up race, and why the notification is armed first
//!
//! A waiter that failed to acquire must park until the holder releases. The
//! release script deletes the key and PUBLISHes on the lock's release channel
//! in one atomic step, so the only way to miss a release is to not be
//! listening when it happens. There are two windows:
//!
//! 1. **Before the subscription exists.** A waiter that attempts, fails, and
//!    only then subscribes misses a release published between its attempt
//!    and the server's SUBSCRIBE confirmation, and sleeps for a whole lease.
//!    So [`Hub::register`] returns only after the server confirmed the
//!    SUBSCRIBE (or another local waiter's subscription is already
//!    confirmed), and the waiter attempts *after* registering.
//! 2. **Between the failed attempt and the park.** A release can arrive while
//!    the attempt's reply is on the wire. The waiter therefore creates and
//!    `enable`s its [`Notified`](tokio::sync::futures::Notified) *before*
//!    each attempt: a wake-up that lands during the attempt is kept by the
//!    armed future (or as the [`Notify`] permit) and the park returns at once.
//!
//! ```text
//! attempt                       fast path: no SUBSCRIBE when uncontended
//! register (SUBSCRIBE confirmed)
//! loop {
//!     arm Notified              a release from here on is not lost
//!     attempt -> acquired? done
//!     park: notified | sleep(pttl) | deadline
//! }
//! ```
//!
//! Correctness never depends on a message arriving: every park is bounded by
//! the holder's remaining lease (its PTTL), so a holder that crashed without
//! releasing hands over when its lease expires.
//!
//! ## Single flight
//!
//! A message on a channel wakes **one** local waiter (`notify_one`): N
//! waiters of one client cost one attempt per release, not N. A waiter that
//! is dropped after being woken but before its attempt finished passes the
//! wake-up on (`notify_one` again), so cancellation cannot strand the others.
//!
//! ## Lost messages
//!
//! Pub/sub is at-most-once. When the pub/sub connection drops, the hub
//! reconnects with backoff, resubscribes every channel that still has local
//! waiters, and only then wakes **every** waiter on every channel
//! (`notify_waiters`, plus a stored permit for a waiter that is between two
//! parks): whatever was published while we were away, they all retry.
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
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::Error;

/// The hub of one client. Dropping it stops its tasks.
pub(crate) struct Hub {
    shared: Arc<Shared>,
    ops: mpsc::UnboundedSender<Op>,
    _control: AbortOnDrop,
}

/// State shared by the hub's tasks and the waiters.
struct Shared {
    /// Channel name -> local interest. Only touched with the lock held, and
    /// the lock is never held across an `.await`.
    channels: StdMutex<HashMap<String, Entry>>,
}

struct Entry {
    chan: Arc<Channel>,
    /// Live [`Registration`]s on this channel.
    refs: usize,
    /// When `refs` last fell to zero; `None` while `refs > 0`.
    idle_since: Option<Instant>,
    /// The current pub/sub connection confirmed our SUBSCRIBE. Set only by
    /// the control task; cleared for every entry when the connection drops.
    subscribed: bool,
}

/// What waiters of one channel park on.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    pub(crate) notify: Notify,
}

/// Work for the control task.
enum Op {
    Subscribe(String, oneshot::Sender<()>),
    /// The dispatcher of connection `generation` saw its stream end.
    Disconnected {
        generation: u64,
    },
}

/// A waiter's interest in one channel; dropping it deregisters.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    name: String,
    chan: Arc<Channel>,
}

impl Registration {
    /// The channel's notification primitive.
    pub(crate) fn channel(&self) -> &Channel {
        &self.chan
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut channels = self.shared.lock();
        if let Some(entry) = channels.get_mut(&self.name) {
            entry.refs -= 1;
            if entry.refs == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> StdMutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single field write), so poisoning is ignored.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes every waiter on every channel, including one that is between
    /// two parks (the stored permit makes its next park return at once).
    fn wake_all(&self) {
        for entry in self.lock().values() {
            entry.chan.notify.notify_waiters();
            entry.chan.notify.notify_one();
        }
    }
}

impl Hub {
    /// Opens the pub/sub connection and starts the hub's tasks.
    pub(crate) async fn start(
        redis: redis::Client,
        connect_timeout: Duration,
        linger: Duration,
    ) -> Result<Hub, Error> {
        let (sink, stream) = connect(&redis, connect_timeout).await?;
        let shared = Arc::new(Shared {
            channels: StdMutex::new(HashMap::new()),
        });
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let control = Control {
            redis,
            shared: shared.clone(),
            ops_tx: ops.downgrade(),
            connect_timeout,
            linger,
            generation: 0,
            conn: None,
        };
        let task = tokio::spawn(control.run(sink, stream, ops_rx));
        Ok(Hub {
            shared,
            ops,
            _control: AbortOnDrop(task),
        })
    }

    /// Registers interest in `channel`; returns once the server has
    /// confirmed the subscription (or the pub/sub connection is down, in
    /// which case the reconnect will resubscribe and wake this waiter).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future deregisters; the subscription lingers and is then
    /// removed by the control task.
    pub(crate) async fn register(&self, channel: &str) -> Result<Registration, Error> {
        let (reg, subscribed) = {
            let mut channels = self.shared.lock();
            let entry = channels.entry(channel.to_owned()).or_insert_with(|| Entry {
                chan: Arc::default(),
                refs: 0,
                idle_since: None,
                subscribed: false,
            });
            entry.refs += 1;
            entry.idle_since = None;
            let reg = Registration {
                shared: self.shared.clone(),
                name: channel.to_owned(),
                chan: entry.chan.clone(),
            };
            (reg, entry.subscribed)
        };
        if !subscribed {
            let (tx, rx) = oneshot::channel();
            self.ops
                .send(Op::Subscribe(channel.to_owned(), tx))
                .map_err(|_| Error::Closed)?;
            rx.await.map_err(|_| Error::Closed)?;
        }
        Ok(reg)
    }
}

/// The live pub/sub connection: the sink and the dispatcher reading it.
struct Connection {
    sink: PubSubSink,
    _dispatcher: AbortOnDrop,
}

/// The control task's state.
struct Control {
    redis: redis::Client,
    shared: Arc<Shared>,
    /// Lets dispatchers report a disconnect without keeping the hub alive.
    ops_tx: mpsc::WeakUnboundedSender<Op>,
    connect_timeout: Duration,
    linger: Duration,
    /// Counts connections, so a late report from an old dispatcher is ignored.
    generation: u64,
    /// `None` while disconnected.
    conn: Option<Connection>,
}

impl Control {
    async fn run(
        mut self,
        sink: PubSubSink,
        stream: PubSubStream,
        mut ops: mpsc::UnboundedReceiver<Op>,
    ) {
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
                    if self.conn.is_some() {
                        self.unsubscribe_idle().await;
                    } else if Instant::now() >= next_reconnect {
                        self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                    }
                }
            }
        }
    }

    /// Makes `sink`/`stream` the current connection and starts its dispatcher.
    fn install(&mut self, sink: PubSubSink, stream: PubSubStream) {
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
        match tokio::time::timeout(self.connect_timeout, conn.sink.subscribe(channel)).await {
            Ok(Ok(())) => {
                if let Some(entry) = self.shared.lock().get_mut(channel) {
                    entry.subscribed = true;
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

    async fn unsubscribe_idle(&mut self) {
        let idle: Vec<String> = {
            let mut channels = self.shared.lock();
            let linger = self.linger;
            let idle: Vec<String> = channels
                .iter()
                .filter(|(_, e)| e.idle_since.is_some_and(|t| t.elapsed() >= linger))
                .map(|(name, _)| name.clone())
                .collect();
            for name in &idle {
                channels.remove(name);
            }
            idle
        };
        if idle.is_empty() {
            return;
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let result = tokio::time::timeout(self.connect_timeout, conn.sink.unsubscribe(&idle)).await;
        if !matches!(result, Ok(Ok(()))) {
            self.disconnected();
        }
    }

    async fn try_reconnect(&mut self, backoff: &mut Duration, next: &mut Instant) {
        match connect(&self.redis, self.connect_timeout).await {
            Ok((mut sink, stream)) => {
                let wanted: Vec<String> = {
                    let mut channels = self.shared.lock();
                    channels.retain(|_, e| e.refs > 0);
                    channels.keys().cloned().collect()
                };
                if !wanted.is_empty() {
                    let result =
                        tokio::time::timeout(self.connect_timeout, sink.subscribe(&wanted)).await;
                    if !matches!(result, Ok(Ok(()))) {
                        *next = Instant::now() + *backoff;
                        return;
                    }
                    for entry in self.shared.lock().values_mut() {
                        entry.subscribed = true;
                    }
                }
                self.install(sink, stream);
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
    mut stream: PubSubStream,
    shared: Arc<Shared>,
    ops: mpsc::WeakUnboundedSender<Op>,
    generation: u64,
) {
    while let Some(msg) = stream.next().await {
        let channels = shared.lock();
        if let Some(entry) = channels.get(msg.get_channel_name()) {
            entry.chan.notify.notify_one();
        }
    }
    if let Some(ops) = ops.upgrade() {
        let _ = ops.send(Op::Disconnected { generation });
    }
}

async fn connect(
    redis: &redis::Client,
    timeout: Duration,
) -> Result<(PubSubSink, PubSubStream), Error> {
    match tokio::time::timeout(timeout, redis.get_async_pubsub()).await {
        Ok(Ok(pubsub)) => Ok(pubsub.split()),
        Ok(Err(e)) => Err(Error::Redis(e)),
        Err(_) => Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out connecting the pub/sub connection",
        )))),
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
