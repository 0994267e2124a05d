//! The [`Client`]: its constructors, its configuration, and the handles of
//! the background tasks (the builder is in `builder.rs`). The lock handles
//! add their own constructors (`Client::mutex` in `mutex.rs`, and so on).

mod builder;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::cluster::ClusterClient;

pub use builder::ClientBuilder;
use builder::Target;

use crate::Error;
use crate::background::{self, Work};
use crate::conn::Conn;
use crate::hub::Hub;
use crate::keys::{Kind, LockKeys, Replication};
use crate::renewer::Renewer;
use crate::stats::{Counters, Stats};

/// A connection to one Redis server, shared by every lock made from it.
///
/// A `Client` holds one multiplexed command connection (reconnecting on its
/// own after a failure), one pub/sub connection on which waiters learn of
/// releases, and a background task that releases dropped guards. It is cheap
/// to clone; clones share all of that. The background tasks stop when the
/// last clone, and the last guard made from it, is dropped (the worker
/// finishes its queue first).
///
/// # Shutting down
///
/// Dropping a guard (or a `lock()` future) queues its release on the
/// client's background task, which needs the Tokio runtime to run. When
/// `main` returns right after the drop, the runtime goes away with the
/// release still queued: the key stays held until its lease runs out
/// (30 s by default), and the other clients wait that long. So before the
/// runtime ends, drop or unlock the guards and call
/// [`shutdown`](Client::shutdown), which waits (a bounded time) until
/// the queued releases and wake-ups have reached Redis:
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redbell::Error> {
/// let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.mutex("reports").lock().await?;
/// drop(guard); // released in the background
/// client.shutdown().await?; // ... now done
/// # Ok(())
/// # }
/// ```
///
/// [`unlock`](crate::MutexGuard::unlock) needs no shutdown: it returns
/// once Redis has answered.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redbell::Error> {
/// let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.mutex("reports").lock().await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client(pub(crate) Arc<Inner>);

/// The engine behind [`Client`].
pub(crate) struct Inner {
    /// The command connection (following the primary in sentinel mode).
    pub(crate) conn: Conn,
    /// Parked waiters and the pub/sub connection.
    pub(crate) hub: Hub,
    /// Renews the leases of guards without a fixed lease.
    pub(crate) renewer: Renewer,
    /// Work for the background worker: releases of dropped guards and
    /// cancelled acquires, and wake-ups to pass on. The worker ends when
    /// every sender (here and in the hub) is gone.
    pub(super) background: background::Sender,
    /// This client's id in waiter queues and wake channel names.
    pub(crate) id: String,
    /// This client's owner tokens.
    pub(crate) tokens: crate::keys::Tokens,
    pub(crate) config: Config,
    /// What the client did, for [`Client::stats`] (and the `metrics`
    /// feature); shared with the hub, the renewer and the worker.
    pub(crate) counters: Arc<Counters>,
    /// Slots for the acquire attempts of waiting callers in flight at once
    /// ([`ATTEMPTS_IN_FLIGHT`]).
    pub(crate) attempts: tokio::sync::Semaphore,
    /// The keys of the live lock handles, shared by name and kind.
    pub(crate) shared_keys: std::sync::Mutex<SharedKeys>,
}

/// How many acquire attempts of waiting callers (`lock`, `lock_timeout`)
/// one client has in flight at once; the others wait their turn in the
/// client, in order. A burst of N waiters (100,000 tasks calling `lock()`
/// at once) would otherwise put N script calls on the one command
/// connection together: the last reply then waits behind all the others,
/// past the response timeout of a healthy connection (so the callers saw
/// errors), and each call's state (~11 KB while in flight) is allocated at
/// once, which the allocator keeps after the burst. 256 calls in flight
/// are more than enough to keep one connection's pipeline full.
pub(crate) const ATTEMPTS_IN_FLIGHT: usize = 256;

/// Settings fixed when the client is built.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) fence_ttl: Duration,
    pub(crate) linger: Duration,
    pub(crate) max_park: Duration,
    /// `WAIT` after acquires and renewals, unless a lock says otherwise.
    pub(crate) replication: Option<Replication>,
    /// Timeout for one command's response.
    pub(crate) response_timeout: Duration,
    /// Renewal stops once a guard has been held this long, unless a lock
    /// says otherwise.
    pub(crate) max_hold: Option<Duration>,
}

impl Client {
    /// A snapshot of what this client did: acquisitions by outcome,
    /// releases by what they found, lost leases by cause, renewals, pub/sub
    /// reconnects, wake-ups, and the waiters and guards of the moment. Cheap
    /// (a few relaxed atomic loads), with no exporter and no Redis command.
    /// With the `metrics` feature the same figures also go to the `metrics`
    /// facade; see [`Stats`].
    pub fn stats(&self) -> Stats {
        self.0.counters.snapshot()
    }
}

impl Client {
    /// Connects to one Redis server with the default settings: a URL
    /// (`redis://[[user]:password@]host[:port][/db]`, `rediss://` with a TLS
    /// feature, `redis+unix:///path`) or anything else redis-rs takes for
    /// one server (see [`Client::builder`], which also sets the options).
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when the URL is malformed, the server cannot be
    /// reached, or authentication fails; [`Error::NoPermission`] when the
    /// server's ACL denies the user something a lock needs.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn connect(server: impl IntoConnectionInfo) -> Result<Client, Error> {
        Client::builder(server).connect().await
    }

    /// Connects to the primary that the Redis Sentinels at `sentinel_urls`
    /// name for `master_name`, and follows it across failovers: when a
    /// command fails in a way that may mean the primary moved (refused,
    /// dropped, timed out, `READONLY`), the client asks the sentinels again
    /// and switches to the new primary; the pub/sub hub does the same before
    /// each reconnect and then wakes every waiter. Commands in flight during
    /// a failover fail with a retryable [`Error::Redis`]. It also listens to
    /// every sentinel's `+switch-master` (the old primary answers as one for
    /// seconds after a failover, so errors alone come late): the
    /// subscriptions are made before the primary is first asked for, so the
    /// first connection waits for them too, up to the connect timeout (at
    /// least 1 s) for a sentinel that does not answer.
    ///
    /// The sentinel URLs carry the sentinels' own credentials; the
    /// primary's (and its database) are set with
    /// [`ClientBuilder::primary_password`], [`ClientBuilder::primary_username`]
    /// and [`ClientBuilder::primary_db`] on
    /// [`Client::sentinel_builder`]; the primary uses TLS when
    /// `ClientBuilder::tls` was given or the sentinel URLs are `rediss://`.
    /// A node a sentinel names is only used once it answers `ROLE` with
    /// `master`; otherwise the next sentinel is asked (a stale sentinel,
    /// not yet told of a failover, names a replica). When no named node is
    /// the primary (a failover in progress), the sentinels are asked again,
    /// with backoff, for up to 5 s.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when no sentinel answers, none knows the master, the
    /// primary cannot be reached, or after 5 s no named node is the primary.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn sentinel(
        sentinel_urls: impl IntoIterator<Item = impl AsRef<str>>,
        master_name: &str,
    ) -> Result<Client, Error> {
        Client::sentinel_builder(sentinel_urls, master_name)
            .connect()
            .await
    }

    /// Starts building a client that finds its primary through Redis
    /// Sentinel; see [`Client::sentinel`].
    pub fn sentinel_builder(
        sentinel_urls: impl IntoIterator<Item = impl AsRef<str>>,
        master_name: &str,
    ) -> ClientBuilder {
        ClientBuilder::new(Target::Sentinel {
            sentinels: sentinel_urls
                .into_iter()
                .map(|url| url.as_ref().to_owned())
                .collect(),
            master: master_name.to_owned(),
        })
    }

    /// Connects to the Redis Cluster that `node_urls` (some of its nodes)
    /// belong to. Locks, guards and waiting work as on one server: every key
    /// and channel of a lock shares its `{name}` hash tag, so each lock lives
    /// in one slot; wake-ups use sharded pub/sub (SPUBLISH from the release
    /// script, SSUBSCRIBE on a dedicated connection), so they stay inside
    /// the lock's shard; renewals are batched per slot. Failovers and slot
    /// migrations are followed by redis-rs; the hub resubscribes and wakes
    /// every waiter after either. Calls in flight during a failover fail
    /// with a retryable [`Error::Redis`].
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when no node can be reached or the URLs are invalid.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn cluster(
        node_urls: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Client, Error> {
        Client::cluster_builder(node_urls).connect().await
    }

    /// Starts building a client for a Redis Cluster; see [`Client::cluster`].
    pub fn cluster_builder(node_urls: impl IntoIterator<Item = impl AsRef<str>>) -> ClientBuilder {
        ClientBuilder::new(Target::Cluster(
            node_urls
                .into_iter()
                .map(|url| url.as_ref().to_owned())
                .collect(),
        ))
    }

    /// Starts building a client for one Redis server: a URL
    /// (`redis://[[user]:password@]host[:port][/db]`, `rediss://...` for
    /// TLS, `redis+unix:///path`, `valkey://`), or anything else redis-rs
    /// takes for one ([`redis::IntoConnectionInfo`]: a
    /// [`ConnectionInfo`](redis::ConnectionInfo), `(host, port)`, ...). An
    /// invalid URL is reported by [`connect`](ClientBuilder::connect).
    pub fn builder(server: impl IntoConnectionInfo) -> ClientBuilder {
        ClientBuilder::new(Target::Server(server.into_connection_info()))
    }

    /// Starts building a client that connects through `client`, a redis-rs
    /// client built by the application (its address, credentials,
    /// database, protocol and TLS settings are used as they are). The
    /// redbell client opens connections of its own from it: a command
    /// connection, a pub/sub connection, and a slow lane when
    /// [`min_replica_acks`](ClientBuilder::min_replica_acks) is set.
    pub fn from_redis_client(client: redis::Client) -> ClientBuilder {
        ClientBuilder::new(Target::Client(client))
    }

    /// Starts building a client for the Redis Cluster that `client`, a
    /// redis-rs cluster client built by the application, connects to (see
    /// [`Client::cluster`] for how locks work on a cluster). `client` must
    /// speak RESP3 (`ClusterClientBuilder::use_protocol(ProtocolVersion::RESP3)`):
    /// the wake-ups arrive as RESP3 pushes on a connection of its own;
    /// with RESP2 the first wait fails.
    pub fn from_cluster_client(client: ClusterClient) -> ClientBuilder {
        ClientBuilder::new(Target::ClusterClient(Box::new(client)))
    }

    /// Waits until the client's background work is done: the releases of
    /// dropped guards and of acquires cancelled in flight, and the wake-ups
    /// passed on by waiters that left (see [Shutting down](Client#shutting-down)).
    /// Call it before the runtime ends, once the guards are dropped or
    /// unlocked.
    ///
    /// Waits at most twice the [response
    /// timeout](ClientBuilder::response_timeout) (4 s by default): long
    /// enough for an attempt that times out and a retry. Work that failed
    /// for good (retried a few times, then given up) counts as done; it is
    /// logged at `warn` level, and the leases bound the damage.
    ///
    /// The client stays usable: this only waits. Guards still alive are
    /// not released, and their leases go on being renewed.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when work was still pending at the bound (Redis
    /// not answering). It goes on in the background while the runtime
    /// lives; past that, leases end the holds by themselves.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits. The work goes on in the background
    /// whether or not the future is dropped.
    pub async fn shutdown(&self) -> Result<(), Error> {
        let bound = self.0.config.response_timeout.saturating_mul(2);
        tokio::time::timeout(bound, self.0.background.drain())
            .await
            .map_err(|_| Error::Timeout)
    }

    /// The Redis keys and channel of the lock called `name`.
    pub(crate) fn keys(&self, name: &str, kind: Kind) -> Result<LockKeys, Error> {
        let config = &self.0.config;
        LockKeys::new(&config.prefix, &self.0.id, name, kind, config.fence_ttl)
    }

    /// As [`keys`](Self::keys), shared with every live handle of the same
    /// lock and kind: a lock's keys are a few hundred bytes, and a
    /// task parked in `lock()` keeps its handle's, so 10 tasks waiting on
    /// one lock each through their own handle kept 10 copies.
    pub(crate) fn shared_keys(&self, name: &str, kind: Kind) -> Result<Arc<LockKeys>, Error> {
        let mut shared = self.0.shared_keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(keys) = shared.live.get(name).and_then(|kinds| {
            kinds
                .iter()
                .filter_map(Weak::upgrade)
                .find(|k| k.kind == kind)
        }) {
            return Ok(keys);
        }
        let keys = Arc::new(self.keys(name, kind)?);
        shared
            .live
            .entry(name.to_owned())
            .or_default()
            .push(Arc::downgrade(&keys));
        // Names whose handles are all gone are swept once the map has
        // doubled since the last sweep: amortised O(1) per handle.
        if shared.live.len() >= shared.sweep_at {
            shared.live.retain(|_, kinds| {
                kinds.retain(|k| k.strong_count() > 0);
                !kinds.is_empty()
            });
            shared.sweep_at = (2 * shared.live.len()).max(64);
        }
        Ok(keys)
    }
}

/// The lock keys of the client's live handles, by name (see
/// [`Client::shared_keys`]).
#[derive(Default)]
pub(crate) struct SharedKeys {
    live: HashMap<String, Vec<Weak<LockKeys>>>,
    /// The map's size at which the next sweep runs.
    sweep_at: usize,
}

impl Inner {
    /// Releases `token` in the background: for dropped guards and for
    /// acquire attempts cancelled while in flight. Never blocks.
    pub(crate) fn release_in_background(&self, keys: Arc<LockKeys>, token: String) {
        self.background.send(Work::Release { keys, token });
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.0.config)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
        assert_send_sync::<Client>();
        assert_send_sync::<ClientBuilder>();
    }
}
