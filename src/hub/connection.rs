//! The pub/sub connection task.
//!
//! One control task owns the pub/sub sink and performs every SUBSCRIBE and
//! UNSUBSCRIBE, so an UNSUBSCRIBE of an idle channel can never overtake a
//! later SUBSCRIBE of the same channel. A dispatcher task reads messages and
//! hands them to the [registry](super::registry); it never waits on the
//! control task, so wake-ups are not delayed by a subscription in progress.
//! A subscription whose last waiter left is kept for a short linger
//! (default 2 s) so a hot lock does not SUBSCRIBE/UNSUBSCRIBE on every
//! acquisition.
//!
//! On a single node (or a sentinel-managed primary) the connection is one
//! socket, and it lives or dies whole. When it is lost (the stream ends, a
//! SUBSCRIBE fails, it fails its liveness probe, or the primary moved) the
//! control task reconnects with a jittered backoff (`backoff.rs`): the
//! first attempt 0 to 50 ms after the loss, at random, so a fleet that lost
//! its connections together (a `CLIENT KILL`, a failover) does not come
//! back in the same millisecond; then 50 ms to 1 s. It re-resolves a moved
//! primary first, resubscribes every channel that still has local waiters,
//! and only then wakes every waiter.
//!
//! On a cluster the connection is one socket per node, and everything is
//! handled per shard, so one unreachable shard costs the waiters on the
//! others nothing ([`shards`](super::shards) explains it in full):
//!
//! - SSUBSCRIBEs run concurrently, one per channel at most; one that fails
//!   marks only its channel unsubscribed, wakes only its waiters, and
//!   retries it with backoff (100 ms to 1 s).
//! - The liveness probe asks one `CLIENT ID` of each primary that holds
//!   subscriptions; a node that does not answer, or whose socket was
//!   reconnected, loses only the channels of its slots (unsubscribed,
//!   woken, resubscribed with backoff).
//! - A `sunsubscribe` push (a failover or slot migration) loses just its
//!   channel, if that channel is subscribed or has a subscription in
//!   flight: a push can overtake the control task's record of a
//!   subscription just made, so one in flight is made again once it
//!   completes (one resubscription per push, as for any loss). A
//!   `Disconnection` push (one node's socket, which redis-rs does not
//!   name) triggers an immediate probe, which finds the node by its new
//!   socket.
//! - A channel resubscribed after a loss is re-checked once more when the
//!   cluster has settled (see [`CLUSTER_RECHECK`](super::shards::CLUSTER_RECHECK)),
//!   and its waiters woken again unless the subscription is still on the
//!   connection it was made on.
//! - Only when the whole connection goes (its push stream closes, or two
//!   probes in a row find no node answering it) does the task reconnect
//!   it; the new connection subscribes channel by channel, and one that
//!   fails goes to the retry list without failing the rest.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::pubsub::{self, Event, Sink, Stream};
use super::registry::Registry;
use super::shards::Shards;
use crate::Error;
use crate::backoff::Backoff;
use crate::conn::Conn;
use crate::task::AbortOnDrop;

/// Work for the control task.
pub(super) enum Op {
    /// Answered once subscribed, or with the server's refusal (an ACL
    /// without the channel: [`Error::NoPermission`]).
    Subscribe(String, oneshot::Sender<Result<(), Error>>),
    /// The dispatcher of connection `generation` saw its stream end.
    Disconnected { generation: u64 },
    /// Cluster: the server dropped our subscription to `channel` (a
    /// failover or slot migration).
    Dropped { generation: u64, channel: String },
    /// Cluster: redis-rs lost its socket to some node.
    NodeLost { generation: u64 },
}

/// Reconnect attempts within [`STORM_WINDOW`] that make a storm worth a
/// warning.
const STORM: usize = 5;

/// The window in which [`STORM`] reconnects are counted.
const STORM_WINDOW: Duration = Duration::from_secs(10);

/// Cluster: probes in a row that no node answered before the connection
/// is replaced (see [`shards`](super::shards), "A connection that answers
/// nothing").
const SILENT_PROBES: u32 = 2;

/// The pub/sub reconnect's backoff: the first delay at least this, ...
const RECONNECT_BASE: Duration = Duration::from_millis(50);
/// ... and none longer than this.
const RECONNECT_CAP: Duration = Duration::from_secs(1);

/// The live pub/sub connection: the sink and the dispatcher reading it.
struct Connection {
    sink: Sink,
    _dispatcher: AbortOnDrop,
}

/// The control task's state.
pub(super) struct Control {
    /// Where the primary is; re-resolved before each reconnect.
    primary: Conn,
    shared: Arc<Registry>,
    /// Lets dispatchers report a disconnect without keeping the hub alive.
    ops_tx: mpsc::WeakUnboundedSender<Op>,
    connect_timeout: Duration,
    linger: Duration,
    /// How often a connection with subscriptions is proven alive by a PING;
    /// an answer later than half of this counts as a lost connection.
    probe: Duration,
    /// When the next probe is due.
    next_probe: Instant,
    /// The primary's [epoch](Conn::epoch) this connection was made for: a
    /// newer one means a failover moved the primary, so start over.
    epoch: u64,
    /// Counts connections, so a late report from an old dispatcher is ignored.
    generation: u64,
    /// Reconnect attempts within the last [`STORM_WINDOW`].
    recent: VecDeque<Instant>,
    /// When the last reconnect-storm warning went out.
    warned_storm: Option<Instant>,
    /// `None` while disconnected.
    conn: Option<Connection>,
    /// Cluster only: the per-shard state of the subscriptions.
    shards: Shards,
    /// Cluster only: a node's socket was lost; probe at the next tick.
    probe_now: bool,
    /// Cluster only: probes in a row that no node answered.
    silent_probes: u32,
}

impl Control {
    pub(super) fn new(
        primary: Conn,
        shared: Arc<Registry>,
        ops_tx: mpsc::WeakUnboundedSender<Op>,
        connect_timeout: Duration,
        linger: Duration,
        probe: Duration,
    ) -> Control {
        Control {
            shards: Shards::new(shared.clone(), connect_timeout, probe),
            probe_now: false,
            silent_probes: 0,
            epoch: primary.epoch(),
            primary,
            shared,
            ops_tx,
            connect_timeout,
            linger,
            probe,
            next_probe: Instant::now() + probe,
            generation: 0,
            recent: VecDeque::new(),
            warned_storm: None,
            conn: None,
        }
    }

    pub(super) async fn run(
        mut self,
        sink: Sink,
        stream: Stream,
        mut ops: mpsc::UnboundedReceiver<Op>,
    ) {
        self.install(sink, stream);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Backoff::new(RECONNECT_BASE, RECONNECT_CAP);
        let mut next_reconnect = Instant::now();
        loop {
            tokio::select! {
                op = ops.recv() => match op {
                    None => return, // the hub was dropped
                    Some(Op::Subscribe(channel, done)) => match self.cluster() {
                        Some(conn) => {
                            self.shards.subscribe(&conn, self.generation, &channel, done);
                        }
                        None => {
                            let _ = done.send(self.subscribe(&channel).await);
                        }
                    },
                    Some(Op::Disconnected { generation }) => {
                        if generation == self.generation && self.conn.is_some() {
                            self.disconnected();
                            backoff.reset();
                            next_reconnect = Instant::now() + backoff.first_delay();
                        }
                    }
                    Some(Op::Dropped { generation, channel }) => {
                        // Subscribed, or a subscription in flight (which the
                        // push may have dropped as soon as it was made).
                        let ours = self.shared.wants(&channel) || self.shards.busy(&channel);
                        if generation == self.generation && ours {
                            tracing::debug!(%channel, "the server dropped a sharded subscription");
                            self.shards.lose(&[channel]);
                        }
                    }
                    Some(Op::NodeLost { generation }) => {
                        if generation == self.generation {
                            tracing::debug!("a node's pub/sub socket was lost; probing the shards");
                            self.probe_now = true;
                        }
                    }
                },
                () = tokio::time::sleep_until(next_reconnect), if self.conn.is_none() => {
                    self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                }
                Some(done) = self.shards.next_done() => {
                    if let Some(channel) = self.shards.finished(self.generation, done) {
                        self.unsubscribe_unused(&channel).await;
                    }
                }
                _ = tick.tick() => {
                    if self.conn.is_none() {
                        if Instant::now() >= next_reconnect {
                            self.try_reconnect(&mut backoff, &mut next_reconnect).await;
                        }
                    } else if let Some(conn) = self.cluster() {
                        self.shards.due(&conn, self.generation);
                        if self.probe_now || Instant::now() >= self.next_probe {
                            self.next_probe = Instant::now() + self.probe;
                            let after_push = std::mem::take(&mut self.probe_now);
                            if self.shards.probe(&conn, after_push).await {
                                self.silent_probes = 0;
                            } else {
                                self.silent_probes += 1;
                            }
                            if self.silent_probes >= SILENT_PROBES {
                                tracing::warn!(
                                    probes = self.silent_probes,
                                    "no node answered the cluster pub/sub connection; replacing it"
                                );
                                self.disconnected();
                                backoff.reset();
                                next_reconnect = Instant::now() + backoff.first_delay();
                            }
                        } else {
                            self.unsubscribe_idle().await;
                        }
                    } else if self.primary.epoch() != self.epoch {
                        tracing::info!("the primary moved; moving the pub/sub connection too");
                        self.disconnected();
                        backoff.reset();
                        next_reconnect = Instant::now() + backoff.first_delay();
                    } else if Instant::now() >= self.next_probe {
                        self.next_probe = Instant::now() + self.probe;
                        if !self.alive().await {
                            tracing::info!("the pub/sub connection failed its liveness probe; reconnecting");
                            self.disconnected();
                            backoff.reset();
                            next_reconnect = Instant::now() + backoff.first_delay();
                        }
                    } else {
                        self.unsubscribe_idle().await;
                    }
                }
            }
        }
    }

    /// The cluster connection (a clone), while connected to a cluster.
    fn cluster(&self) -> Option<redis::cluster_async::ClusterConnection> {
        self.conn.as_ref().and_then(|c| c.sink.cluster())
    }

    /// Whether a single-node connection answers a PING within half the
    /// probe period. A connection without subscriptions is not asked:
    /// nothing waits on it.
    async fn alive(&mut self) -> bool {
        let subscribed = self.shared.lock().values().any(|e| e.subscribed);
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if !subscribed {
            return true;
        }
        matches!(
            tokio::time::timeout(self.probe / 2, conn.sink.ping()).await,
            Ok(Ok(()))
        )
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
        self.shards.reset();
        self.probe_now = false;
        self.silent_probes = 0;
    }

    /// Subscribes `channel` if a waiter still wants it. An error only for
    /// a refusal that a reconnect would not cure (the ACL); anything else
    /// counts as a lost connection, whose reconnect subscribes the channel
    /// and wakes its waiters.
    async fn subscribe(&mut self, channel: &str) -> Result<(), Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(()); // the reconnect will subscribe it and wake its waiters
        };
        let wanted = matches!(self.shared.lock().get(channel), Some(e) if !e.subscribed);
        if !wanted {
            return Ok(());
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
                    self.unsubscribe_unused(channel).await;
                }
            }
            Ok(Err(e)) => match Error::from(e) {
                // Refused by the ACL: reconnecting would be refused again.
                // The waiter that asked fails; the connection is fine.
                denied @ Error::NoPermission { .. } => {
                    // Counted and warned (once) by the waiter it fails.
                    tracing::debug!(error = %denied, channel, "SUBSCRIBE refused");
                    return Err(denied);
                }
                e => {
                    tracing::debug!(error = %e, "SUBSCRIBE failed; reconnecting");
                    self.disconnected();
                }
            },
            Err(_) => {
                tracing::debug!("SUBSCRIBE timed out; reconnecting");
                self.disconnected();
            }
        }
        Ok(())
    }

    /// Unsubscribes `channel`, whose waiters left while it was being
    /// subscribed.
    async fn unsubscribe_unused(&mut self, channel: &str) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let channels = [channel.to_owned()];
        if self.primary.is_cluster() {
            self.shared.expect_unsubscribes(&channels);
        }
        let done =
            tokio::time::timeout(self.connect_timeout, conn.sink.unsubscribe(&channels)).await;
        if !matches!(done, Ok(Ok(()))) && self.primary.is_cluster() {
            self.shared.own_unsubscribe(channel); // no confirmation will come
        }
    }

    /// Unsubscribes channels idle for longer than the linger. Their entries
    /// stay (marked unsubscribed, so a new waiter subscribes again, after
    /// this) until the server confirmed: a wake-up published meanwhile still
    /// finds its lock and is passed on.
    ///
    /// Only the channels listed as lingering are looked at (each listed
    /// once, when its last waiter left): the sweep costs nothing per
    /// channel in use, so a wake-up's dispatch, which takes the same lock,
    /// never waits behind a scan of every channel waited on.
    async fn unsubscribe_idle(&mut self) {
        let listed = std::mem::take(&mut *self.shared.lingering());
        if listed.is_empty() {
            return;
        }
        let mut still = Vec::new();
        let idle: Vec<String> = {
            let mut channels = self.shared.lock();
            let linger = self.linger;
            let mut idle = Vec::new();
            for name in listed {
                let Some(entry) = channels.get_mut(name.as_str()) else {
                    continue; // gone (a reconnect dropped it)
                };
                let Some(since) = entry.idle_since else {
                    entry.lingering = false; // in use again
                    continue;
                };
                // Not while a re-check's SSUBSCRIBE of it is in flight: that
                // could overtake this UNSUBSCRIBE.
                if entry.subscribed && since.elapsed() >= linger && !self.shards.busy(&name) {
                    entry.subscribed = false;
                    entry.lingering = false;
                    idle.push(name);
                } else {
                    still.push(name); // lingers on (or waits to be resubscribed)
                }
            }
            idle
        };
        self.shared.lingering().extend(still);
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
            if !self.primary.is_cluster() {
                self.disconnected();
                return;
            }
            // One shard failed to answer: its subscriptions go with its
            // socket (or it is frozen, and they are of no use to anyone).
            tracing::debug!("SUNSUBSCRIBE of idle channels failed; forgetting them");
            for name in &idle {
                self.shared.own_unsubscribe(name);
            }
        }
        let mut channels = self.shared.lock();
        for name in &idle {
            if channels
                .get(name.as_str())
                .is_some_and(|e| e.waiters.is_empty() && !e.subscribed)
            {
                channels.remove(name.as_str());
            }
        }
    }

    /// Notes a reconnect attempt, and warns (once per [`STORM_WINDOW`]) when
    /// [`STORM`] of them fall within one window: something keeps dropping
    /// the connection (a proxy, a missing channel right, a flapping node),
    /// and every reconnect wakes every waiter.
    fn note_reconnect(&mut self) {
        let now = Instant::now();
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > STORM_WINDOW)
        {
            self.recent.pop_front();
        }
        let quiet = self
            .warned_storm
            .is_none_or(|t| now.duration_since(t) > STORM_WINDOW);
        if self.recent.len() >= STORM && quiet {
            self.warned_storm = Some(now);
            tracing::warn!(
                reconnects = self.recent.len(),
                within = ?STORM_WINDOW,
                "the pub/sub connection keeps reconnecting; every reconnect wakes every waiter"
            );
        }
    }

    async fn try_reconnect(&mut self, backoff: &mut Backoff, next: &mut Instant) {
        self.note_reconnect();
        // After a failover the primary has moved: ask first (sentinel mode).
        if let Err(e) = self.primary.resolve().await {
            tracing::debug!(error = %e, "could not resolve the primary");
        }
        self.epoch = self.primary.epoch();
        match pubsub::connect(&self.primary, self.connect_timeout).await {
            Ok((mut sink, stream)) => {
                let wanted: Vec<String> = {
                    let mut channels = self.shared.lock();
                    channels.retain(|_, e| !e.waiters.is_empty());
                    channels.keys().map(|c| c.0.channel().to_owned()).collect()
                };
                if let Some(conn) = sink.cluster() {
                    // Channel by channel: each wakes its own waiters once
                    // it holds, or retries on its own if its shard fails.
                    self.install(sink, stream);
                    self.shards.resubscribe(&conn, self.generation, &wanted);
                    self.shared.counters.hub_reconnect();
                    tracing::info!(
                        channels = wanted.len(),
                        "pub/sub reconnected; resubscribing"
                    );
                    return;
                }
                if !wanted.is_empty() {
                    let result =
                        tokio::time::timeout(self.connect_timeout, sink.subscribe(&wanted)).await;
                    if !matches!(result, Ok(Ok(()))) {
                        *next = Instant::now() + backoff.next_delay();
                        self.shared.wake_all();
                        return;
                    }
                    // Only what this SUBSCRIBE named: a channel first used while
                    // it was in flight still has its own request queued.
                    let mut channels = self.shared.lock();
                    for name in &wanted {
                        if let Some(entry) = channels.get_mut(name.as_str()) {
                            entry.subscribed = true;
                        }
                    }
                }
                self.install(sink, stream);
                self.shared.counters.hub_reconnect();
                tracing::info!(
                    channels = wanted.len(),
                    "pub/sub reconnected; waking every waiter"
                );
                self.shared.wake_all();
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::debug!(error = %e, retry_in = ?delay, "pub/sub reconnect failed");
                *next = Instant::now() + delay;
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
    shared: Arc<Registry>,
    ops: mpsc::WeakUnboundedSender<Op>,
    generation: u64,
) {
    while let Some(event) = stream.next().await {
        match event {
            Event::Message { channel, payload } => shared.deliver(&channel, &payload),
            Event::Unsubscribed { channel } if shared.own_unsubscribe(&channel) => {}
            // The server dropped a channel we still have (a cluster slot
            // moved): the control task resubscribes it if it is subscribed
            // or being subscribed. Not only when marked subscribed: a push
            // that overtakes the control task's record of a subscription
            // just made would otherwise be lost, and the subscription
            // recorded as made.
            Event::Unsubscribed { channel } if shared.has(&channel) => {
                let Some(ops) = ops.upgrade() else { return };
                let _ = ops.send(Op::Dropped {
                    generation,
                    channel,
                });
            }
            Event::Unsubscribed { .. } => {}
            Event::NodeLost => {
                let Some(ops) = ops.upgrade() else { return };
                let _ = ops.send(Op::NodeLost { generation });
            }
        }
    }
    if let Some(ops) = ops.upgrade() {
        let _ = ops.send(Op::Disconnected { generation });
    }
}
