//! The [`Client`] and its builder: configuration, connections, and the
//! handles of the background tasks. The lock handles add their own
//! constructors (`Client::mutex` in `mutex.rs`, and so on).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::Error;
use crate::background::{self, Work};
use crate::conn::Conn;
use crate::hub::Hub;
use crate::keys::{Kind, LockKeys, Replication, lease_ms, validate_name};
use crate::lease::{Renewer, drift};
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
    background: background::Sender,
    /// This client's id in waiter queues and wake channel names.
    pub(crate) id: String,
    pub(crate) config: Config,
    /// What the client did, for [`Client::stats`] (and the `metrics`
    /// feature); shared with the hub, the renewer and the worker.
    pub(crate) counters: Arc<Counters>,
}

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

/// Where a client's server is.
#[derive(Debug, Clone)]
enum Target {
    Url(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// Builds a [`Client`] with settings other than the defaults.
///
/// ```no_run
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redbell::Error> {
/// let client = redbell::Client::builder("redis://127.0.0.1:6379")
///     .prefix("billing")
///     .default_lease(Duration::from_secs(6))
///     .renew_every(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    /// Where the server is: a URL, or a set of sentinels and a master name.
    target: Target,
    /// `WAIT` for this many replicas after each acquire and renewal.
    /// Default: off.
    replication: Option<Replication>,
    /// Prefix of every key and channel. Default: `"redbell"`.
    prefix: String,
    /// Lease of a [`Mutex`](crate::Mutex) made without
    /// [`Mutex::with_lease`](crate::Mutex::with_lease), renewed
    /// while its guard lives. Default: 30 s.
    lease: Duration,
    /// How often such a lease is renewed. Default: a third of the lease
    /// (10 s for the default lease).
    renew_every: Option<Duration>,
    /// Expiry of a lock's fencing counter, reset by every acquisition.
    /// Default: 7 days.
    fence_ttl: Duration,
    /// How long a release-channel subscription is kept after its last local
    /// waiter left. Default: 2 s.
    linger: Duration,
    /// Longest single park of a waiter on a lock whose key has no expiry
    /// (not one of ours). Default: 1 s.
    max_park: Duration,
    /// How often the pub/sub connection is proven alive while waiters use
    /// it. Default: 1 s.
    probe_interval: Duration,
    /// Timeout for establishing a connection. Default: 2 s.
    connect_timeout: Duration,
    /// Timeout for one command's response. Default: 2 s.
    response_timeout: Duration,
    /// How long a guard's lease is renewed at most. Default: none (as long
    /// as the guard lives).
    max_hold: Option<Duration>,
}

impl ClientBuilder {
    /// Sets the prefix of every key and channel (default `"redbell"`). The
    /// lock named `N` lives at `PREFIX:{N}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the lease of locks made without a fixed one (default 30 s). Such
    /// a lease is renewed every [`renew_every`](Self::renew_every) while its
    /// guard lives, so it only matters when the holder dies or is cut off
    /// from Redis: it is how long the others wait for a crashed holder.
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets how often renewed leases are renewed (default: a third of the
    /// lease, so 10 s for the default lease). Must be shorter than the
    /// lease minus its drift margin (1% of the lease + 2 ms, the part of the
    /// lease the client does not count on), or
    /// [`connect`](Self::connect) fails with [`Error::InvalidLease`]; a
    /// third leaves room for two failed renewals before the lease is lost.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// Sets how long a lock's fencing counter survives without an
    /// acquisition (default 7 days). After that the counter restarts from
    /// the server clock, which still exceeds every earlier fence.
    pub fn fence_ttl(mut self, ttl: Duration) -> Self {
        self.fence_ttl = ttl;
        self
    }

    /// Sets how long a release-channel subscription is kept after the last
    /// local waiter left (default 2 s), so a hot lock does not
    /// SUBSCRIBE/UNSUBSCRIBE on every acquisition.
    pub fn subscription_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// After each acquire (and each renewal), waits until `replicas`
    /// replicas have acknowledged the write, for at most `timeout`: `WAIT`
    /// pipelined after the script on the same connection. An acquisition
    /// fewer replicas acknowledged is given up again and reported as
    /// [`Error::NotReplicated`]; a renewal that fewer replicas acknowledged
    /// counts as failed (it is retried, and the lease is lost at its
    /// deadline). Default: off.
    ///
    /// `timeout` must be shorter than the
    /// [response timeout](Self::response_timeout) (default 2 s), or
    /// [`connect`](Self::connect) fails with [`Error::InvalidLease`].
    ///
    /// Cost: one more round trip's worth of waiting on every acquire (the
    /// replicas' acknowledgement), up to `timeout` when a replica lags.
    /// Limits: `WAIT` narrows the window in which a failover loses a lock,
    /// it does not close it (Redis replication stays asynchronous: a replica
    /// that acknowledged can still lose the write, and a failover can
    /// promote a replica that did not acknowledge). Use
    /// [fencing tokens](crate::MutexGuard::fence) for what must not break.
    /// Can also be set per lock with
    /// [`Mutex::min_replica_acks`](crate::Mutex::min_replica_acks).
    pub fn min_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replication = Replication::new(replicas, timeout);
        self
    }

    /// Sets how often the pub/sub connection on which waiters learn of
    /// releases is proven alive, while any waiter uses it (default 1 s).
    /// A half-open connection (a NAT or firewall timeout, a dead primary
    /// host) delivers nothing and errs nothing; the hub sends `PING` every
    /// period and takes an answer later than half of it for a lost
    /// connection: it reconnects, resubscribes and wakes every waiter, so a
    /// wait is stalled by a dead connection for at most about 1.5 periods.
    /// Cost: one `PING` per period per client with waiters, nothing when
    /// idle.
    pub fn probe_interval(mut self, every: Duration) -> Self {
        self.probe_interval = every;
        self
    }

    /// Bounds how long the watchdog keeps a lock: once a guard has been
    /// held for `hold` (counted from its acquire), its lease is no longer
    /// renewed. The lease then runs out, at most one lease after `hold`,
    /// and the guard's [`lost`](crate::MutexGuard::lost) resolves at its
    /// local deadline, as for any lease Redis no longer confirms. Default:
    /// none, renewed for as long as the guard lives.
    ///
    /// It protects the others from a holder that hangs (a deadlock, an
    /// endless loop, a stuck call) while its process, and so its renewal
    /// task, stays alive: without it such a holder keeps the lock forever.
    /// Choose it above the longest legitimate critical section. It does not
    /// apply to fixed leases ([`Mutex::with_lease`](crate::Mutex::with_lease),
    /// which are never renewed) nor to explicit
    /// [`extend`](crate::MutexGuard::extend) calls. Can also be set per
    /// lock, e.g. with [`Mutex::max_hold`](crate::Mutex::max_hold).
    ///
    /// A zero or over-long `hold` makes [`connect`](Self::connect) fail
    /// with [`Error::InvalidLease`].
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// Sets the timeout for establishing a connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the timeout for one command's response (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Connects to Redis and starts the client's background tasks. Must be
    /// called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// - [`Error::Redis`] when the URL is malformed, the server cannot be
    ///   reached, or authentication fails.
    /// - [`Error::InvalidLease`] when a configured duration is zero or
    ///   larger than [`MAX_LEASE`](crate::MAX_LEASE), or the renewal period is not shorter
    ///   than the lease minus its drift margin (see
    ///   [`renew_every`](Self::renew_every)).
    /// - [`Error::InvalidName`] when the prefix is empty or contains `{`,
    ///   `}` or control characters.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn connect(self) -> Result<Client, Error> {
        validate_name(&self.prefix)?;
        let renew_every = self.renew_every.unwrap_or(self.lease / 3);
        for d in [
            self.lease,
            renew_every,
            self.fence_ttl,
            self.probe_interval,
            self.connect_timeout,
            self.response_timeout,
        ] {
            lease_ms(d)?;
        }
        self.max_hold.map(lease_ms).transpose()?;
        if let Some(replication) = self.replication
            && Duration::from_millis(replication.timeout_ms) >= self.response_timeout
        {
            return Err(Error::InvalidLease {
                duration: Duration::from_millis(replication.timeout_ms),
                reason: "the WAIT timeout must be shorter than the response timeout",
            });
        }
        // A renewal sent at or after the local deadline could never keep
        // the lease: it would be lost before its first renewal.
        if renew_every >= self.lease.saturating_sub(drift(self.lease)) {
            return Err(Error::InvalidLease {
                duration: renew_every,
                reason: "the renewal period must be shorter than the lease minus its drift margin (1% + 2 ms)",
            });
        }
        let conn = match &self.target {
            Target::Url(url) => {
                Conn::direct(url, self.connect_timeout, self.response_timeout).await?
            }
            Target::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                Conn::cluster(&nodes, self.connect_timeout, self.response_timeout).await?
            }
            Target::Sentinel { sentinels, master } => {
                let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
                Conn::sentinel(
                    &sentinels,
                    master,
                    self.connect_timeout,
                    self.response_timeout,
                )
                .await?
            }
        };
        let config = Config {
            prefix: self.prefix,
            fence_ttl: self.fence_ttl,
            linger: self.linger,
            max_park: self.max_park,
            replication: self.replication,
            response_timeout: self.response_timeout,
            max_hold: self.max_hold,
        };
        let counters = Arc::new(Counters::default());
        let background = background::start(conn.clone(), counters.clone());
        let id = uuid::Uuid::new_v4().simple().to_string();
        let hub = Hub::start(
            conn.clone(),
            self.connect_timeout,
            config.linger,
            self.probe_interval,
            background.clone(),
            id.clone(),
            counters.clone(),
        )
        .await?;
        let renewer = Renewer::start(conn.clone(), self.lease, renew_every, counters.clone());
        Ok(Client(Arc::new(Inner {
            conn,
            hub,
            renewer,
            background,
            id,
            config,
            counters,
        })))
    }
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

    /// Connects to the Redis server at `url` (`redis://[:password@]host:port[/db]`)
    /// with the default settings; see [`Client::builder`] for the others.
    /// Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when the URL is malformed, the server cannot be
    /// reached, or authentication fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Client::builder(url).connect().await
    }

    /// Connects to the primary that the Redis Sentinels at `sentinel_urls`
    /// name for `master_name`, and follows it across failovers: when a
    /// command fails in a way that may mean the primary moved (refused,
    /// dropped, timed out, `READONLY`), the client asks the sentinels again
    /// and switches to the new primary; the pub/sub hub does the same before
    /// each reconnect and then wakes every waiter. Commands in flight during
    /// a failover fail with a retryable [`Error::Redis`].
    ///
    /// The primary is connected to without a password (sentinel URLs may
    /// carry their own).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when no sentinel answers, none knows the master, or
    /// the primary cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes closes any connection it
    /// opened; nothing is left running.
    pub async fn sentinel(sentinel_urls: &[&str], master_name: &str) -> Result<Client, Error> {
        Client::sentinel_builder(sentinel_urls, master_name)
            .connect()
            .await
    }

    /// Starts building a client that finds its primary through Redis
    /// Sentinel; see [`Client::sentinel`].
    pub fn sentinel_builder(sentinel_urls: &[&str], master_name: &str) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.target = Target::Sentinel {
            sentinels: sentinel_urls.iter().map(|url| (*url).to_owned()).collect(),
            master: master_name.to_owned(),
        };
        builder
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
    pub async fn cluster(node_urls: &[&str]) -> Result<Client, Error> {
        Client::cluster_builder(node_urls).connect().await
    }

    /// Starts building a client for a Redis Cluster; see [`Client::cluster`].
    pub fn cluster_builder(node_urls: &[&str]) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.target = Target::Cluster(node_urls.iter().map(|url| (*url).to_owned()).collect());
        builder
    }

    /// Starts building a client for the Redis server at `url`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            target: Target::Url(url.to_owned()),
            replication: None,
            prefix: "redbell".to_owned(),
            lease: Duration::from_secs(30),
            renew_every: None,
            fence_ttl: Duration::from_secs(7 * 24 * 3600),
            linger: Duration::from_secs(2),
            max_park: Duration::from_secs(1),
            probe_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            max_hold: None,
        }
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
