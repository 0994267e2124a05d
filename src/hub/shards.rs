//! A cluster's sharded subscriptions, handled shard by shard.
//!
//! On a cluster the pub/sub connection is one socket per node, and a node
//! (a shard) can fail while the others serve on. So the control task keeps,
//! beside each channel's `subscribed` flag in the registry, per channel:
//!
//! - **a subscription in flight**: SSUBSCRIBEs run concurrently as tasks
//!   of their own, at most one per channel, so one to an unreachable shard
//!   (which takes up to the connect timeout to fail) never holds up the
//!   others, nor a new waiter's subscription on a healthy shard;
//! - **a retry** with backoff (100 ms doubling to 1 s) for a channel whose
//!   subscription failed or was lost;
//! - **a re-check** [`CLUSTER_RECHECK`] after a subscription made to recover
//!   from a loss, with the connection that subscription was made on.
//!
//! A failed or lost subscription costs only its own channel: it is marked
//! unsubscribed, its waiters are woken (their attempts report the shard's
//! failure, or succeed after a failover) and it is resubscribed with
//! backoff; when that succeeds its waiters are woken once more, since
//! whatever was published meanwhile reached nobody.
//!
//! A loss seen while a subscription task for the channel is in flight
//! (a probe's, or a `sunsubscribe` push, which may arrive before the task
//! reports the SSUBSCRIBE it made) makes that task's result stale: it
//! neither marks the channel subscribed nor counts as the recovery, and
//! the retry subscribes the channel again and wakes its waiters.
//!
//! ## The probe
//!
//! Every probe period the hub asks each node that holds subscriptions for
//! the `CLIENT ID` of our socket to it: one command per distinct primary
//! (grouped by the slot ranges of a `CLUSTER SLOTS`, routed by slot to the
//! primary), on the pub/sub connection itself. A node that does not answer
//! within half the period, or whose id changed (redis-rs reconnected that
//! socket, and a message published in between is lost), loses the
//! subscriptions of its slots as above. The others are untouched.
//!
//! ## A lost node connection
//!
//! redis-rs reports a dropped node socket as a `Disconnection` push without
//! saying which node, and reconnects (and resubscribes) it by itself. The
//! hub answers it with an immediate probe in which a node whose id it never
//! saw counts as changed too: the reconnected node shows a new id (or no
//! answer, if it is down), so exactly the channels of the node that dropped
//! are resubscribed and woken, and a node whose socket survived is left
//! alone. The probe costs one command per node, however many channels. A
//! release published while a node's socket was down is therefore missed
//! for at most one probe period (the push, or failing that the next
//! periodic probe, reveals the new socket), never for a lease.
//!
//! ## A connection that answers nothing
//!
//! The probe also runs while channels only wait for a retry, and reports a
//! connection on which no node answered: neither `CLUSTER SLOTS` (which any
//! primary may answer) nor a `CLIENT ID`. Two such probes in a row and the
//! control task replaces the whole connection, as if it had closed. One
//! dead shard never does this (the other primaries answer); a redis-rs
//! connection stuck in a slot map rebuild does: it answers nothing, every
//! SSUBSCRIBE times out, and the waiters would be woken only by those
//! failures, seconds after each release, for as long as it lasts.
//!
//! What gets it stuck after a failover: many keyed reads at once (each
//! recovery's, see below) answered `MOVED` to the new primary, to which
//! redis-rs has no socket yet, each redirect connecting to it while the
//! first `MOVED` rebuilds the slot map. So per primary (as the last
//! `CLUSTER SLOTS` named it) a wave of subscription tasks sends one keyed
//! read first, alone: its `MOVED` refreshes the map and connects; once one
//! begun since a task started has gone through, that task's read goes
//! alongside the others, straight to the new primary, 8 at a time at most
//! over all primaries (a failover that comes after the first read meets
//! every read then in flight: 16 `MOVED` at once from two primaries were
//! seen to get the connection stuck).
//! One at a time each would cost a wave of thousands of channels
//! thousands of round trips, and make the late ones miss their checks'
//! time bound. A dead shard's first read holds up only its own; but a
//! shard that stops answering after it can hold the shared 8 for up to a
//! check's bound, and another shard's re-check that times out meanwhile
//! counts as a loss (its waiters woken, the channel retried).
//!
//! ## After a failover or migration
//!
//! A subscription made while the cluster changes may land on a demoted
//! primary, which as a replica accepts SSUBSCRIBE while the new primary's
//! publish counts no receiver (so releases drop our waiters as gone). So a
//! channel resubscribed after a loss is re-checked once when the cluster
//! has settled: a keyed read routed to its slot's primary (a demoted one
//! answers `MOVED`, which refreshes redis-rs's slot map), SSUBSCRIBE again
//! (harmless where still subscribed), and, unless the subscription is
//! found where the recovery made it, its waiters are woken, so those
//! dropped meanwhile re-queue. Only the affected channels.
//!
//! ## When the re-check wakes nobody
//!
//! A re-check that finds the recovery's subscription in place wakes
//! nobody: waking every waiter of a healthy shard after each cluster change
//! is a wasted attempt each (a thundering herd with many parked waiters),
//! and the waiters were woken already when the recovery held. The recovery
//! does the same keyed read first, then names the connection serving the
//! slot's primary ([`pubsub::socket_of`]: the server's id for it and both
//! its ends' addresses) just before and just after its SSUBSCRIBE; when the
//! two agree, the SSUBSCRIBE went to that connection (the slot map did not
//! change in between). The re-check names it again after its own keyed
//! read and SSUBSCRIBE. The same connection then means no release since the
//! recovery could have been missed:
//!
//! - the socket never closed (one that redis-rs reconnected has a new id
//!   and a new local port), so no reconnect dropped the subscription on it;
//! - it leads to the node that the refreshed slot map names as the slot's
//!   primary now, as it did at the recovery; a primary that loses the slot
//!   in between drops our subscription with an `sunsubscribe` push, which
//!   loses the channel: its re-check is cancelled, or if already in flight
//!   its result discarded (the channel is subscribed and woken anew);
//!
//! so every release published since reached that connection. In any other
//! case the re-check wakes the waiters as before: another connection or
//! node, a name missing at either end (no answer, a refusal, a server
//! before 6.2, or the slot map changed during the recovery's SSUBSCRIBE),
//! or a loss seen while the re-check was in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tokio::sync::oneshot;

use crate::Error;
use crate::backoff::Backoff;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::pubsub::{self, Socket};
use super::registry::Registry;
use crate::keys::hash_slot;
use task::{ALONGSIDE, Gate, Keyed, subscribe};

mod task;

/// How long after a subscription made to recover from a loss it is checked
/// again (see the module docs): by then the cluster has settled.
pub(super) const CLUSTER_RECHECK: Duration = Duration::from_secs(2);

/// The shortest delay before retrying a failed or lost subscription (the
/// delays grow with jitter, `backoff.rs`).
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest wait between two retries of one channel.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// The per-shard state of a cluster's subscriptions.
pub(super) struct Shards {
    shared: Arc<Registry>,
    connect_timeout: Duration,
    probe: Duration,
    /// Channels whose subscription failed or was lost: when to try again,
    /// and the current backoff. Removed when a subscription succeeds.
    retry: HashMap<String, Retry>,
    /// Channels with an SSUBSCRIBE (or a re-check) in flight, and the
    /// callers of [`Hub::subscribe`](super::Hub::subscribe) waiting for it.
    in_flight: HashMap<String, Vec<oneshot::Sender<Result<(), Error>>>>,
    /// Channels to re-check: when, and where their recovery subscribed.
    recheck: HashMap<String, Recheck>,
    /// Channels lost while a subscription task for them was in flight: its
    /// result is stale (it may name the socket that was lost).
    lost_in_flight: HashSet<String>,
    /// The subscriptions in flight.
    tasks: JoinSet<Done>,
    /// Per primary (its node id), the `CLIENT ID` of our socket to it as the
    /// last probe saw it.
    sockets: HashMap<String, i64>,
    /// Slot ranges and the node id of their primary, from the last
    /// `CLUSTER SLOTS` that was answered.
    owners: Vec<(u16, u16, String)>,
    /// Per primary (as [`owners`](Self::owners) names it), what a
    /// subscription task holds for its keyed read (see the module docs).
    keyed: HashMap<String, Arc<Keyed>>,
    /// What the keyed reads that go alongside one another hold, whatever
    /// their primary.
    alongside: Arc<tokio::sync::Semaphore>,
}

/// A re-check due (see the module docs).
struct Recheck {
    at: Instant,
    /// The connection the recovery's SSUBSCRIBE went to, if it could tell.
    socket: Option<Socket>,
}

struct Retry {
    /// When to subscribe again.
    at: Instant,
    /// The delays between attempts.
    backoff: Backoff,
}

/// What a finished subscription task reports.
pub(super) struct Done {
    channel: String,
    /// The connection it was made on.
    generation: u64,
    why: Why,
    /// Once subscribed: the connection that holds the subscription, when
    /// the task could tell (a recovery or a re-check; see the module docs).
    result: Result<Option<Socket>, String>,
}

/// Why a channel is being subscribed.
enum Why {
    /// A waiter asked: nothing was missed, nobody to wake.
    Asked,
    /// Its subscription failed or was lost (or the connection is new):
    /// wake its waiters once it holds, and re-check it later.
    Recover,
    /// The re-check after a recovery, with the connection the recovery
    /// subscribed on: wake its waiters once it holds, unless it finds that
    /// same connection.
    Recheck(Option<Socket>),
}

impl Shards {
    pub(super) fn new(shared: Arc<Registry>, connect_timeout: Duration, probe: Duration) -> Shards {
        Shards {
            shared,
            connect_timeout,
            probe,
            retry: HashMap::new(),
            in_flight: HashMap::new(),
            recheck: HashMap::new(),
            lost_in_flight: HashSet::new(),
            tasks: JoinSet::new(),
            sockets: HashMap::new(),
            owners: Vec::new(),
            keyed: HashMap::new(),
            alongside: Arc::new(tokio::sync::Semaphore::new(ALONGSIDE)),
        }
    }

    /// The next finished subscription task; pending while there is none.
    pub(super) async fn next_done(&mut self) -> Option<Done> {
        loop {
            match self.tasks.join_next().await {
                None => return std::future::pending().await,
                Some(Ok(done)) => return Some(done),
                Some(Err(_)) => {} // aborted by `reset`
            }
        }
    }

    /// Forgets everything: the connection is gone (the reconnect
    /// subscribes every wanted channel again). Callers waiting for a
    /// subscription are answered: the reconnect will wake their waiters.
    pub(super) fn reset(&mut self) {
        self.tasks.abort_all();
        for (_, waiting) in self.in_flight.drain() {
            for done in waiting {
                let _ = done.send(Ok(()));
            }
        }
        self.retry.clear();
        self.recheck.clear();
        self.lost_in_flight.clear();
        self.sockets.clear();
        self.keyed.clear();
    }

    /// Whether a subscription task for `channel` is in flight.
    pub(super) fn busy(&self, channel: &str) -> bool {
        self.in_flight.contains_key(channel)
    }

    /// A waiter asks for `channel`. Answered at once when there is nothing
    /// to do, or when the channel is waiting for a retry (its shard failed:
    /// the retry wakes the waiter once it holds); otherwise when the
    /// subscription in flight for it finishes.
    pub(super) fn subscribe(
        &mut self,
        conn: &ClusterConnection,
        generation: u64,
        channel: &str,
        done: oneshot::Sender<Result<(), Error>>,
    ) {
        let wanted = matches!(self.shared.lock().get(channel), Some(e) if !e.subscribed);
        if !wanted || self.retry.contains_key(channel) {
            let _ = done.send(Ok(()));
            return;
        }
        if let Some(waiting) = self.in_flight.get_mut(channel) {
            waiting.push(done);
            return;
        }
        self.start(conn, generation, channel, Why::Asked, vec![done]);
    }

    /// A new connection: subscribes every channel in `wanted`, each on its
    /// own; one that fails goes to the retry list.
    pub(super) fn resubscribe(
        &mut self,
        conn: &ClusterConnection,
        generation: u64,
        wanted: &[String],
    ) {
        for channel in wanted {
            if !self.in_flight.contains_key(channel) {
                self.start(conn, generation, channel, Why::Recover, Vec::new());
            }
        }
    }

    fn start(
        &mut self,
        conn: &ClusterConnection,
        generation: u64,
        channel: &str,
        why: Why,
        waiting: Vec<oneshot::Sender<Result<(), Error>>>,
    ) {
        self.in_flight.insert(channel.to_owned(), waiting);
        let conn = conn.clone();
        let channel = channel.to_owned();
        let timeout = self.connect_timeout;
        let owner = self.owner_of(hash_slot(&channel));
        let gate = Gate {
            keyed: self.keyed.entry(owner).or_default().clone(),
            alongside: self.alongside.clone(),
            started: Instant::now(),
        };
        self.tasks.spawn(async move {
            let result = subscribe(&conn, &channel, &why, timeout, &gate).await;
            Done {
                channel,
                generation,
                why,
                result,
            }
        });
    }

    /// Records a finished subscription task. Returns the channel when it
    /// must be unsubscribed again (its waiters left meanwhile).
    pub(super) fn finished(&mut self, generation: u64, done: Done) -> Option<String> {
        for waiting in self.in_flight.remove(&done.channel).unwrap_or_default() {
            let _ = waiting.send(Ok(()));
        }
        let lost = self.lost_in_flight.remove(&done.channel);
        if done.generation != generation {
            return None; // made on a connection since replaced
        }
        let channel = done.channel;
        match done.result {
            Ok(_) if lost => {
                // Lost while this was in flight: it may have subscribed on
                // the very socket that was lost. The retry that `lose` set
                // up subscribes it again and wakes its waiters; unless they
                // all left: then this subscription goes.
                tracing::debug!(%channel, "sharded subscription lost while being made; retrying");
                let wanted = self.shared.lock().get(channel.as_str()).is_some();
                (!wanted).then_some(channel)
            }
            Ok(socket) => {
                let kept = match self.shared.lock().get_mut(channel.as_str()) {
                    Some(entry) => {
                        entry.subscribed = true;
                        true
                    }
                    None => false,
                };
                self.retry.remove(&channel);
                if !kept {
                    return Some(channel);
                }
                match done.why {
                    Why::Asked => {}
                    Why::Recover => {
                        let at = Instant::now() + CLUSTER_RECHECK;
                        self.recheck.insert(channel.clone(), Recheck { at, socket });
                        tracing::debug!(%channel, "sharded subscription restored; waking its waiters");
                        self.shared.wake_channel(&channel);
                    }
                    // The module docs argue why the same connection means
                    // nothing was missed since the recovery woke them.
                    Why::Recheck(made_on) if socket.is_some() && socket == made_on => {
                        tracing::debug!(%channel, "re-check found the subscription where it was made; waking nobody");
                    }
                    Why::Recheck(_) => {
                        tracing::debug!(%channel, "re-check moved the subscription; waking its waiters");
                        self.shared.wake_channel(&channel);
                    }
                }
                None
            }
            Err(error) => {
                let retry = self.retry.entry(channel.clone()).or_insert_with(|| Retry {
                    at: Instant::now(),
                    backoff: Backoff::new(FIRST_RETRY, MAX_RETRY),
                });
                let delay = retry.backoff.next_delay();
                retry.at = Instant::now() + delay;
                tracing::debug!(%channel, %error, retry_in = ?delay, "SSUBSCRIBE failed");
                if let Some(entry) = self.shared.lock().get_mut(channel.as_str()) {
                    entry.subscribed = false;
                }
                self.shared.wake_channel(&channel);
                None
            }
        }
    }

    /// The subscriptions of `channels` were lost: mark them unsubscribed,
    /// wake their waiters and resubscribe them (with backoff).
    pub(super) fn lose(&mut self, channels: &[String]) {
        let now = Instant::now();
        {
            let mut registry = self.shared.lock();
            for channel in channels {
                if let Some(entry) = registry.get_mut(channel.as_str()) {
                    entry.subscribed = false;
                    for waiter in entry.waiters.values() {
                        waiter.notify.notify_one();
                    }
                }
            }
        }
        for channel in channels {
            self.recheck.remove(channel);
            if self.in_flight.contains_key(channel) {
                self.lost_in_flight.insert(channel.clone());
            }
            self.retry.entry(channel.clone()).or_insert_with(|| Retry {
                at: now,
                backoff: Backoff::new(FIRST_RETRY, MAX_RETRY),
            });
        }
    }

    /// Starts the retries and re-checks that are due. A channel to retry
    /// whose waiters all left is forgotten.
    pub(super) fn due(&mut self, conn: &ClusterConnection, generation: u64) {
        let now = Instant::now();
        let retries: Vec<String> = self
            .retry
            .iter()
            .filter(|(c, r)| r.at <= now && !self.in_flight.contains_key(*c))
            .map(|(c, _)| c.clone())
            .collect();
        for channel in retries {
            let used = {
                let mut registry = self.shared.lock();
                let used = registry
                    .get(channel.as_str())
                    .is_some_and(|e| !e.waiters.is_empty());
                if !used
                    && registry
                        .get(channel.as_str())
                        .is_some_and(|e| !e.subscribed)
                {
                    registry.remove(channel.as_str());
                }
                used
            };
            if used {
                self.start(conn, generation, &channel, Why::Recover, Vec::new());
            } else {
                self.retry.remove(&channel);
            }
        }
        let rechecks: Vec<String> = self
            .recheck
            .iter()
            .filter(|(c, r)| r.at <= now && !self.in_flight.contains_key(*c))
            .map(|(c, _)| c.clone())
            .collect();
        for channel in rechecks {
            let Some(Recheck { socket, .. }) = self.recheck.remove(&channel) else {
                continue;
            };
            if self.shared.wants(&channel) {
                tracing::debug!(%channel, "re-checking a sharded subscription after a cluster change");
                self.start(conn, generation, &channel, Why::Recheck(socket), Vec::new());
            }
        }
    }

    /// The node id of `slot`'s primary as the last `CLUSTER SLOTS` named
    /// it; `slot N` without one.
    fn owner_of(&self, slot: u16) -> String {
        self.owners
            .iter()
            .find(|(start, end, _)| *start <= slot && slot <= *end)
            .map_or_else(|| format!("slot {slot}"), |(_, _, node)| node.clone())
    }

    /// The probe of the module docs. `after_push`: a node connection was
    /// just lost, so a node whose socket id is unknown counts as changed.
    /// Whether the connection answered: `false` when it has channels to
    /// serve (subscribed, or waiting for a retry) and no node answered.
    pub(super) async fn probe(&mut self, conn: &ClusterConnection, after_push: bool) -> bool {
        let subscribed: Vec<String> = self
            .shared
            .lock()
            .iter()
            .filter(|(_, e)| e.subscribed)
            .map(|(name, _)| name.0.channel().to_owned())
            .collect();
        if subscribed.is_empty() && self.retry.is_empty() {
            return true;
        }
        let half = self.probe / 2;
        let mut answered = false;
        if let Ok(Ok(owners)) =
            tokio::time::timeout(half, pubsub::slot_owners(&mut conn.clone())).await
        {
            answered = true;
            if !owners.is_empty() {
                self.owners = owners;
            } // else keep the last map; without one, each slot is its own group
        }
        // Per primary: one slot of it to route by, and its channels.
        let mut groups: HashMap<String, (u16, Vec<String>)> = HashMap::new();
        for channel in subscribed {
            let slot = hash_slot(&channel);
            let node = self.owner_of(slot);
            groups
                .entry(node)
                .or_insert((slot, Vec::new()))
                .1
                .push(channel);
        }
        let mut asks = JoinSet::new();
        for (node, (slot, _)) in &groups {
            let (mut conn, node, slot) = (conn.clone(), node.clone(), *slot);
            asks.spawn(async move {
                let id = match tokio::time::timeout(half, pubsub::client_id(&mut conn, slot)).await
                {
                    Ok(Ok(id)) => Some(id),
                    _ => None,
                };
                (node, id)
            });
        }
        let mut lost = Vec::new();
        while let Some(asked) = asks.join_next().await {
            let Ok((node, id)) = asked else { continue };
            answered |= id.is_some();
            let Some((_, channels)) = groups.remove(&node) else {
                continue;
            };
            let changed = match id {
                Some(id) => match self.sockets.insert(node.clone(), id) {
                    Some(before) => before != id,
                    None => after_push,
                },
                None => {
                    self.sockets.remove(&node);
                    true
                }
            };
            if changed {
                tracing::info!(
                    %node,
                    channels = channels.len(),
                    reachable = id.is_some(),
                    "a shard's pub/sub socket failed its probe or was reconnected; resubscribing its channels"
                );
                lost.extend(channels);
            }
        }
        if !lost.is_empty() {
            self.lose(&lost);
        }
        answered
    }
}
