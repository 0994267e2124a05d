//! The command connection, and where the primary is.
//!
//! A [`Conn`] hands out the current [`ConnectionManager`] (one multiplexed
//! socket that reconnects by itself) and the [`redis::Client`] the pub/sub
//! hub connects with. Every connection is opened from the settings the user
//! gave (a URL or a [`redis::ConnectionInfo`] or a [`redis::Client`], with
//! its credentials, database, protocol and TLS), never from a bare address.
//!
//! For a client made with [`Client::sentinel`](crate::Client::sentinel) it
//! also follows failovers ([`sentinel`] finds the primary): redis-rs's
//! managers reconnect to the address they were built for, which after a
//! failover is a dead node or a demoted replica. So every command error
//! that can mean "this is no longer the primary" (refused, dropped, timed
//! out, `READONLY`) is [reported](Conn::report), and a report asks the
//! sentinels where the primary is now; when it moved, a new manager
//! replaces the old one. The hub also re-resolves before each reconnect, so
//! parked waiters follow the failover even when no command is running.
//!
//! Errors are not enough: after a failover the old primary still answers as
//! a primary for seconds, so the client also follows the sentinels'
//! `+switch-master` announcements ([`switches`]).
//!
//!
//! # A connection that stops answering
//!
//! redis-rs's manager reconnects when its socket is closed or reset, but
//! not when it merely falls silent: a response timeout is an I/O error it
//! retries on the same socket. A NAT or load balancer that dropped its
//! state, a firewall flush, or a host that died without a reset leave
//! exactly that: the server side gone, no RST, and every later command
//! timing out, forever, while a new connection would work at once. So a
//! response timeout marks the command connection suspect: [`report`]
//! (which every failing command calls) opens a fresh one in the background
//! and swaps it in ([`Conn::recover`], the same swap a failover makes),
//! and an acquire attempt that timed out waits for that swap and is sent
//! once more on the new connection (the acquire scripts are idempotent,
//! see `acquire.rs`). A timeout on a connection opened after the command
//! was sent is not the old connection's: it does not replace the new one
//! again.
//!
//! A caller may give up before its response timeout fires, dropping the
//! command, and then no timeout ever reports the connection; every command
//! is therefore [`Watched`] (`watched.rs` says how).
//!
//!
//! While Redis cannot be reached, every recovery fails, and the callers
//! that time out together must not each try to connect in turn (one
//! connect attempt after another, behind the recovery's lock: 8 callers
//! took 11 s). A failed attempt is remembered: a caller whose command was
//! sent before the last failed attempt gave up fails at once, so one
//! attempt answers every caller that waited on it, and any number of
//! concurrent callers all fail within about 2 × `T` + the connect time of
//! their send.
//!
//! Redis Cluster has the same hole: redis-rs retries a timed-out request on
//! the same node connection, up to its `retries` (16 by default) times, and
//! never reconnects for it. A timeout that reaches us gets a fresh cluster
//! connection the same way, but only after those retries (17 response
//! timeouts), so the bound below does not hold on a cluster; cutting the
//! retries or setting redis-rs's overall response timeout would also cut
//! the retries that follow a cluster failover (not done here, untested).
//!
//! The bound (one server, or sentinels): a command sent after the fault
//! times out one response timeout `T` later; in sentinel mode the
//! sentinels are asked first, and asking the silent primary its role costs
//! up to one more `T`; a fresh connection to a reachable server then takes
//! milliseconds. So the client works again within 2 × `T` + 1 s of the
//! fault (5 s with the default `T` of 2 s), the second for the handshake and the
//! scheduling, whether the command's caller waited for its timeout or gave
//! up sooner. While Redis cannot be reached at all no fresh connection
//! opens, and calls fail ([`Error::Redis`]) about 2 × `T` + the connect
//! timeout after they were sent, however many run at once (see above).
//!
//! [`report`]: Conn::report

mod sentinel;
mod switches;
mod watched;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, RwLock as StdRwLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::{Mutex as AsyncMutex, Notify, OnceCell};
use tokio::time::Instant;

use sentinel::Looked;
pub(crate) use sentinel::Sentinels;
use switches::{follow_switches, subscribe_switches, subscribe_timeout};
use watched::Watch;
pub(crate) use watched::Watched;

use crate::Error;
use crate::task::AbortOnDrop;

/// TLS certificates given to [`ClientBuilder::tls`](crate::ClientBuilder::tls).
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
pub(crate) type Tls = redis::TlsCertificates;

/// Without a TLS feature there are no certificates to give.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
#[derive(Debug, Clone)]
pub(crate) enum Tls {}

/// A redis-rs client for `info`, with `tls`'s certificates when given
/// (which needs a `rediss://` address).
pub(crate) fn open(info: ConnectionInfo, tls: Option<&Tls>) -> RedisResult<redis::Client> {
    match tls {
        None => redis::Client::open(info),
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
        Some(never) => match *never {},
    }
}

/// The command connection of one client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Conn(Arc<Inner>);

struct Inner {
    /// The primary in use. Replaced whole, only by `resolve`.
    current: StdRwLock<Current>,
    /// Fixed address, or the sentinels to ask.
    source: Source,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Set while a re-resolution or a recovery started by `report` runs
    /// (one at a time).
    resolving: AtomicBool,
    /// Held while [`Conn::recover`] opens a fresh command connection: one
    /// at a time, and a caller that waited finds the connection opened
    /// meanwhile (its `opened` is later than the caller's request). Holds
    /// when the last recovery that could open no connection gave up: a
    /// caller whose request was sent before that learns nothing from
    /// connecting again (Redis was unreachable after its send), so one
    /// failed attempt answers every caller that waited on it.
    recovering: AsyncMutex<Option<Instant>>,
    /// Counts switches to a new primary (see [`Conn::epoch`]).
    epoch: AtomicU64,
    /// Notified (`notify_waiters`) at each switch to a new primary.
    switched: Arc<Notify>,
    /// In sentinel mode, the tasks following `+switch-master` (see
    /// [`follow_switches`]); they end with the last clone of the `Conn`.
    watchers: StdMutex<Vec<AbortOnDrop>>,
}

#[derive(Clone)]
struct Current {
    /// `host:port` of the server (the primary in sentinel mode), or the
    /// cluster's seed nodes.
    addr: String,
    /// In sentinel mode, the configuration epoch the sentinels named
    /// `addr` in (0 otherwise): a re-resolution never goes back to an
    /// older configuration.
    config_epoch: u64,
    /// The client the pub/sub hub connects with (single node and sentinel).
    client: Option<redis::Client>,
    manager: Manager,
    /// The lane for slow calls (those followed by `WAIT`), so they never
    /// hold up the hot path's multiplexed socket; opened on first use, so a
    /// client that never asks for replication pays nothing. Each `Current`
    /// has its own: [`Conn::recover`] tells by it whether `current` is
    /// still the connection it replaces.
    slow: Arc<OnceCell<Manager>>,
    /// When the opening of `manager` began: a request sent before this was
    /// not sent on it, so its timeout says nothing about it.
    opened: Instant,
    /// What `manager` has answered (its own, replaced with it).
    watch: Arc<Watch>,
}

enum Source {
    Direct,
    Sentinel(Box<Sentinels>),
    /// Redis Cluster: redis-rs follows slots, failovers and migrations.
    Cluster {
        /// For the command connections (and the slow lane).
        commands: Box<ClusterClient>,
        /// For the hub's pub/sub connection: RESP3, whose pushes carry the
        /// sharded messages (the same client when the user built it).
        pubsub: Box<ClusterClient>,
    },
}

/// A command connection: to one server, or to a cluster (commands routed by
/// their first key's slot). Cheap to clone; clones share their sockets.
#[derive(Clone)]
pub(crate) enum Manager {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Manager {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Manager::Single(c) => c.req_packed_command(cmd),
            Manager::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Manager::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Manager::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Manager::Single(c) => c.get_db(),
            Manager::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    fn new(mut current: Current, source: Source, timeouts: (Duration, Duration)) -> Conn {
        Conn(Arc::new_cyclic(|conn| {
            // The constructors' watch could not know the `Conn` yet.
            current.watch = Watch::new(&current.manager, conn.clone(), timeouts.1);
            Inner {
                current: StdRwLock::new(current),
                source,
                connect_timeout: timeouts.0,
                response_timeout: timeouts.1,
                resolving: AtomicBool::new(false),
                recovering: AsyncMutex::new(None),
                epoch: AtomicU64::new(0),
                switched: Arc::default(),
                watchers: StdMutex::new(Vec::new()),
            }
        }))
    }

    /// Connects to the one server `client` points at.
    pub(crate) async fn direct(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let opened = Instant::now();
        let manager = manager(&client, connect_timeout, response_timeout).await?;
        let watch = Watch::new(&manager, Weak::new(), response_timeout);
        let current = Current {
            addr: client.get_connection_info().addr().to_string(),
            config_epoch: 0,
            client: Some(client),
            manager,
            slow: Arc::default(),
            opened,
            watch,
        };
        Ok(Conn::new(
            current,
            Source::Direct,
            (connect_timeout, response_timeout),
        ))
    }

    /// Asks `sentinels` for their master's primary and connects to it.
    pub(crate) async fn sentinel(
        sentinels: Sentinels,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let timeouts = (connect_timeout, response_timeout);
        // Listening first: a switch announced after this is heard, and one
        // announced before it is in the sentinels' answers below. (Asking
        // first left a window: a client that connected to the old primary
        // just before the announcement, and subscribed just after it,
        // stayed there for seconds.)
        let watched = sentinels.sentinel_clients().to_vec();
        let listening = join_all(
            watched
                .iter()
                .map(|s| subscribe_switches(s, subscribe_timeout(connect_timeout))),
        )
        .await;
        let opened = Instant::now();
        let found = sentinels.find(timeouts).await?;
        let watch = Watch::new(&found.manager, Weak::new(), response_timeout);
        let current = Current {
            addr: found.addr,
            config_epoch: found.config_epoch,
            client: Some(found.client),
            manager: found.manager,
            slow: Arc::default(),
            opened,
            watch,
        };
        let conn = Conn::new(current, Source::Sentinel(Box::new(sentinels)), timeouts);
        let watchers = watched
            .into_iter()
            .zip(listening)
            .map(|(sentinel, switches)| {
                let weak = Arc::downgrade(&conn.0);
                AbortOnDrop(tokio::spawn(follow_switches(weak, sentinel, switches)))
            })
            .collect();
        *conn.0.watchers.lock().unwrap_or_else(|p| p.into_inner()) = watchers;
        Ok(conn)
    }

    /// Connects to a Redis Cluster: commands through `commands`, the hub's
    /// sharded subscriptions through `pubsub` (which must speak RESP3).
    pub(crate) async fn cluster(
        commands: ClusterClient,
        pubsub: ClusterClient,
        seeds: String,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let opened = Instant::now();
        let manager = Manager::Cluster(commands.get_async_connection().await?);
        let watch = Watch::new(&manager, Weak::new(), response_timeout);
        let current = Current {
            addr: seeds,
            config_epoch: 0,
            client: None,
            manager,
            slow: Arc::default(),
            opened,
            watch,
        };
        Ok(Conn::new(
            current,
            Source::Cluster {
                commands: Box::new(commands),
                pubsub: Box::new(pubsub),
            },
            (connect_timeout, response_timeout),
        ))
    }

    /// How many times [`resolve`](Conn::resolve) switched to a new primary:
    /// the hub moves its pub/sub connection when this changes.
    pub(crate) fn epoch(&self) -> u64 {
        self.0.epoch.load(Ordering::Acquire)
    }

    /// Notified at each switch to a new primary: the background worker
    /// retries its failed work then, rather than at its next retry time.
    pub(crate) fn switches(&self) -> Arc<Notify> {
        self.0.switched.clone()
    }

    /// Whether this is a Redis Cluster (sharded pub/sub, per-slot batches).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.0.source, Source::Cluster { .. })
    }

    /// The cluster client for the hub's dedicated pub/sub connection;
    /// `None` unless this is a cluster.
    pub(crate) fn cluster_pubsub(&self) -> Option<&ClusterClient> {
        match &self.0.source {
            Source::Cluster { pubsub, .. } => Some(pubsub),
            _ => None,
        }
    }

    /// The current command connection (a clone sharing its sockets),
    /// watched for silence (see [`Watched`]).
    pub(crate) fn manager(&self) -> Watched {
        // The hot path: clone the manager and its watch only, not the
        // whole `Current`.
        let current = self.0.current.read().unwrap_or_else(|p| p.into_inner());
        Watched {
            manager: current.manager.clone(),
            watch: Some(current.watch.clone()),
        }
    }

    /// The slow lane: a command connection of its own for calls that block
    /// on the server (`WAIT`), opened on first use. Not watched for
    /// silence: a `WAIT` is silent by design; it is replaced with the
    /// command connection.
    pub(crate) async fn slow_manager(&self) -> RedisResult<Watched> {
        let current = self.current();
        let timeouts = (self.0.connect_timeout, self.0.response_timeout);
        let cluster = match &self.0.source {
            Source::Cluster { commands, .. } => Some(ClusterClient::clone(commands)),
            _ => None,
        };
        let client = current.client.clone();
        current
            .slow
            .get_or_try_init(|| async move {
                match (client, cluster) {
                    (_, Some(cluster)) => {
                        Ok(Manager::Cluster(cluster.get_async_connection().await?))
                    }
                    (Some(client), _) => manager(&client, timeouts.0, timeouts.1).await,
                    (None, None) => Ok(current.manager.clone()),
                }
            })
            .await
            .map(|manager| Watched {
                manager: manager.clone(),
                watch: None,
            })
    }

    /// The current primary's client, for the pub/sub connection; `None` on
    /// a cluster (see [`Conn::cluster_pubsub`]).
    pub(crate) fn client(&self) -> Option<redis::Client> {
        self.current().client
    }

    fn current(&self) -> Current {
        self.0
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Notes a command error. A response timeout starts a
    /// [recovery](Conn::recover) in the background; in sentinel mode an
    /// error that may mean the primary moved starts a re-resolution (one
    /// at a time); other errors change nothing.
    pub(crate) fn report(&self, err: &redis::RedisError) {
        let timed_out = err.is_timeout();
        let moved = matches!(self.0.source, Source::Sentinel(_))
            && (err.is_io_error()
                || err.is_connection_refusal()
                || err.is_connection_dropped()
                || matches!(err.code(), Some("READONLY" | "NOREPLICAS")));
        if !timed_out && !moved {
            return;
        }
        if self.0.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        // The request that timed out was sent a response timeout ago (or a
        // little later): a connection opened since is not the silent one.
        let now = Instant::now();
        let sent = now.checked_sub(self.0.response_timeout).unwrap_or(now);
        let conn = self.clone();
        tokio::spawn(async move {
            if timed_out {
                conn.recover(sent).await;
            } else if let Err(e) = conn.resolve().await {
                tracing::debug!(error = %e, "could not re-resolve the primary");
            }
            conn.0.resolving.store(false, Ordering::Release);
        });
    }

    /// After a request sent at `sent` timed out: unless the command
    /// connection was replaced since, replaces it (in sentinel mode with
    /// the primary the sentinels name now, else with a fresh connection to
    /// the same server or cluster). Returns whether the connection in use
    /// now was opened after `sent`, so a retry goes to a new one; `false`
    /// when no fresh connection could be opened (Redis unreachable).
    ///
    /// Cancel safe: dropped before the swap, nothing changes.
    pub(crate) async fn recover(&self, sent: Instant) -> bool {
        let mut failed = self.0.recovering.lock().await;
        if self.current().opened > sent {
            return true; // replaced meanwhile (by a recovery or a failover)
        }
        if failed.is_some_and(|gave_up| gave_up > sent) {
            // An attempt still trying after this request was sent (most
            // often the one this caller waited on) opened nothing: Redis
            // is unreachable, and N waiting callers must not connect N
            // times in turn (one connect timeout apart each).
            return false;
        }
        if let Source::Sentinel(_) = &self.0.source {
            match self.resolve().await {
                Ok(true) => return true,
                Ok(false) => {} // still the primary: a fresh connection to it
                Err(e) => tracing::debug!(error = %e, "could not re-resolve the primary"),
            }
        }
        let current = self.current();
        let opened = Instant::now();
        let fresh = match (&self.0.source, &current.client) {
            (Source::Cluster { commands, .. }, _) => {
                let connecting = commands.get_async_connection();
                match tokio::time::timeout(self.0.connect_timeout, connecting).await {
                    Ok(connected) => connected.map(Manager::Cluster),
                    Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
                }
            }
            (_, Some(client)) => {
                manager(client, self.0.connect_timeout, self.0.response_timeout).await
            }
            (_, None) => return false, // not reached: only a cluster has no client
        };
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::debug!(error = %e, "the command connection stopped answering, and no new one opens");
                *failed = Some(Instant::now());
                return false;
            }
        };
        let mut slot = self.0.current.write().unwrap_or_else(|p| p.into_inner());
        // A failover that switched while we connected wins: ours goes to
        // the node it left.
        if Arc::ptr_eq(&slot.slow, &current.slow) {
            tracing::info!(server = %current.addr, "the command connection stopped answering; using a fresh one");
            slot.slow = Arc::default();
            slot.opened = opened;
            slot.watch = Watch::new(&fresh, Arc::downgrade(&self.0), self.0.response_timeout);
            slot.manager = fresh;
        }
        true
    }

    /// In sentinel mode, asks where the primary is and switches to it if it
    /// moved. Returns whether it switched.
    pub(crate) async fn resolve(&self) -> Result<bool, Error> {
        let Source::Sentinel(sentinels) = &self.0.source else {
            return Ok(false);
        };
        let current = self.current();
        let timeouts = (self.0.connect_timeout, self.0.response_timeout);
        let found = match sentinels
            .moved(
                (&current.addr, &current.manager, current.config_epoch),
                timeouts,
            )
            .await?
        {
            Looked::Moved(found) => *found,
            Looked::Stays { epoch } => {
                let mut slot = self.0.current.write().unwrap_or_else(|p| p.into_inner());
                // Named at a newer configuration (a failover and one back
                // that the client missed): an answer of the configuration
                // in between, from a stale sentinel, is old news now.
                if slot.addr == current.addr && epoch > slot.config_epoch {
                    slot.config_epoch = epoch;
                }
                return Ok(false);
            }
        };
        let mut slot = self.0.current.write().unwrap_or_else(|p| p.into_inner());
        if found.config_epoch < slot.config_epoch {
            // Only sentinels that have not heard of the last failover
            // answered: stay on the newer primary.
            return Ok(false);
        }
        tracing::info!(primary = %found.addr, "following a failover to the new primary");
        let watch = Watch::new(
            &found.manager,
            Arc::downgrade(&self.0),
            self.0.response_timeout,
        );
        *slot = Current {
            addr: found.addr,
            config_epoch: found.config_epoch,
            client: Some(found.client),
            manager: found.manager,
            slow: Arc::default(),
            opened: Instant::now(),
            watch,
        };
        drop(slot);
        self.0.epoch.fetch_add(1, Ordering::AcqRel);
        self.0.switched.notify_waiters();
        Ok(true)
    }
}

/// A reconnecting manager for `client`, failing fast when unreachable.
async fn manager(
    client: &redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> RedisResult<Manager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    Ok(Manager::Single(
        client.get_connection_manager_with_config(config).await?,
    ))
}
