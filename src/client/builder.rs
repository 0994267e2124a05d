//! [`ClientBuilder`]: every setting with its default, the checks
//! [`connect`](ClientBuilder::connect) makes, and the connections each
//! target opens (one server, a redis-rs client, a cluster, sentinels).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    RedisResult,
};

use super::{Client, Config, Inner};
use crate::Error;
use crate::access;
use crate::background;
use crate::conn::{self, Conn, Sentinels, Tls};
use crate::hub::Hub;
use crate::keys::{Replication, lease_ms, validate_name};
use crate::lease::drift;
use crate::renewer::Renewer;
use crate::stats::Counters;

/// Where a client's server is, and how to reach it.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// One server; an invalid URL is reported by `connect`.
    Server(RedisResult<ConnectionInfo>),
    /// One server, through a client the user built.
    Client(redis::Client),
    /// A Redis Cluster, from some of its nodes.
    Cluster(Vec<String>),
    /// A Redis Cluster, through a client the user built.
    ClusterClient(Box<ClusterClient>),
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
    /// Where the server is: a URL or connection settings, a redis-rs
    /// client, cluster nodes, or a set of sentinels and a master name.
    target: Target,
    /// Certificates for `rediss://` connections. Default: none (the system's
    /// roots, no client certificate).
    tls: Option<Tls>,
    /// Sentinel mode: the primary's credentials, database and protocol (the
    /// address comes from the sentinels). Default: no credentials, db 0.
    primary: RedisConnectionInfo,
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
    metrics_lock_names: bool,
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
    /// A lease outside [`MIN_LEASE`](crate::MIN_LEASE)..=[`MAX_LEASE`](crate::MAX_LEASE)
    /// makes [`connect`](Self::connect) fail with [`Error::InvalidLease`].
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

    /// With the `metrics` feature, also labels the acquisition and release
    /// metrics (`redbell_acquisitions_total`, `redbell_wait_seconds`,
    /// `redbell_releases_total`, `redbell_hold_seconds`) with the lock's
    /// name, as `lock`. Off by default: every distinct name becomes a series
    /// of its own in the exporter, so turn it on only for a fixed, small set
    /// of names (not for names made per request or per user), and each
    /// labelled update allocates the name once. Without the feature it does
    /// nothing.
    pub fn metrics_lock_names(mut self, on: bool) -> Self {
        self.metrics_lock_names = on;
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
    /// A `hold` outside [`MIN_LEASE`](crate::MIN_LEASE)..=[`MAX_LEASE`](crate::MAX_LEASE)
    /// makes [`connect`](Self::connect) fail with [`Error::InvalidLease`].
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// Sets the timeout for establishing a connection (default 2 s): the
    /// first one, and each fresh one that replaces a command connection
    /// that stopped answering (see
    /// [`response_timeout`](Self::response_timeout)). A call whose fresh
    /// connection cannot be opened in time fails with
    /// [`Error::Redis`]. In sentinel mode it also bounds each question to a
    /// sentinel, its connection and its answer together.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the timeout for one command's response (default 2 s).
    ///
    /// A command that times out fails with [`Error::Redis`], and the
    /// command connection is taken for dead: a fresh one replaces it (a
    /// NAT, load balancer or firewall that dropped its state, or a host
    /// that died without a reset, leaves a connection that never answers
    /// again, while a new one works at once). An acquire attempt that timed out is sent once
    /// more on the fresh connection; a renewal is retried on it, so a
    /// lease rides over the fault unless it ends first. The client works
    /// again within 2 × this + 1 s of such a fault (6 s with the
    /// defaults): one timeout to notice, in sentinel mode up to one more to
    /// ask whether the silent node is still the primary, and a second for
    /// the new connection. (On a Redis Cluster redis-rs first retries a
    /// timed-out request on the same node connection, 16 times by
    /// default, so the fault is noticed that many timeouts later.) Shorter
    /// notices sooner; it must stay above the slowest command's round
    /// trip, or healthy connections are replaced.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets the certificates of TLS connections (`rediss://`): the CA that
    /// signed the server's certificate (`root_cert`, PEM; default: the
    /// system's roots), and a client certificate with its key (`client_tls`,
    /// PEM) for servers that require one (`tls-auth-clients yes`).
    ///
    /// They apply to every `rediss://` connection the client opens: the
    /// server; in sentinel mode the sentinels with `rediss://` URLs and the
    /// primary (which uses TLS when this is set or the sentinel URLs are
    /// `rediss://`); on a cluster, every node (with the `tls-rustls`
    /// feature; with `tls-native-tls` alone, build a
    /// [`ClusterClient`](redis::cluster::ClusterClient) and use
    /// [`Client::from_cluster_client`]). A `redis://` URL with
    /// certificates makes [`connect`](Self::connect) fail.
    ///
    /// Needs the `tls-rustls` or the `tls-native-tls` feature.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redbell::redis::{ClientTlsConfig, TlsCertificates};
    ///
    /// let client = redbell::Client::builder("rediss://redis.internal:6380")
    ///     .tls(TlsCertificates {
    ///         root_cert: Some(std::fs::read("ca.crt")?),
    ///         client_tls: Some(ClientTlsConfig {
    ///             client_cert: std::fs::read("client.crt")?,
    ///             client_key: std::fs::read("client.key")?,
    ///         }),
    ///     })
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub fn tls(mut self, certificates: redis::TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// Sentinel mode: the password of the primary (and of the replicas it
    /// may fail over to), sent as `AUTH password`, or `AUTH username
    /// password` with [`primary_username`](Self::primary_username). The
    /// sentinels' own credentials go in their URLs
    /// (`redis://:password@host:port`). Default: none. Ignored unless the
    /// client was made with [`Client::sentinel_builder`]. (As redis-rs's
    /// `RedisConnectionInfo::set_password`.)
    pub fn primary_password(mut self, password: impl AsRef<str>) -> Self {
        self.primary = self.primary.set_password(password);
        self
    }

    /// Sentinel mode: the ACL user of the primary (and of its replicas);
    /// default: the `default` user, as `requirepass` wants. Ignored unless
    /// the client was made with [`Client::sentinel_builder`].
    pub fn primary_username(mut self, username: impl AsRef<str>) -> Self {
        self.primary = self.primary.set_username(username);
        self
    }

    /// Sentinel mode: the database number on the primary (default 0).
    /// Ignored unless the client was made with [`Client::sentinel_builder`].
    pub fn primary_db(mut self, db: i64) -> Self {
        self.primary = self.primary.set_db(db);
        self
    }

    /// Connects to Redis and starts the client's background tasks. Must be
    /// called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// - [`Error::Redis`] when the URL is malformed, the server cannot be
    ///   reached, authentication fails, or the TLS settings are invalid
    ///   (certificates for a `redis://` URL, a PEM that does not parse, a
    ///   certificate the server rejects).
    /// - [`Error::NoPermission`] when the server's ACL denies this user a
    ///   command, key or channel a lock needs (see
    ///   [ACL users](crate#acl-users)).
    /// - [`Error::InvalidLease`] when a configured duration is zero,
    ///   shorter than [`MIN_LEASE`](crate::MIN_LEASE) or longer than
    ///   [`MAX_LEASE`](crate::MAX_LEASE), or the renewal period is not shorter
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
        // The one lease rule (`keys::lease_ms`) for every duration given,
        // so the error names the duration the caller gave; the default
        // renewal period is derived, and only the relation below judges it.
        for d in [
            self.lease,
            self.fence_ttl,
            self.probe_interval,
            self.connect_timeout,
            self.response_timeout,
        ] {
            lease_ms(d)?;
        }
        self.renew_every.map(lease_ms).transpose()?;
        self.max_hold.map(lease_ms).transpose()?;
        let renew_every = self.renew_every.unwrap_or(self.lease / 3);
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
        let timeouts = (self.connect_timeout, self.response_timeout);
        let conn = self.conn(timeouts).await?;
        access::check(&conn, &self.prefix, self.replication.is_some()).await?;
        let config = Config {
            prefix: self.prefix,
            fence_ttl: self.fence_ttl,
            linger: self.linger,
            max_park: self.max_park,
            replication: self.replication,
            response_timeout: self.response_timeout,
            max_hold: self.max_hold,
        };
        let counters = Arc::new(Counters::new(self.metrics_lock_names));
        let on_released = background::OnReleased::default();
        let background = background::start(conn.clone(), counters.clone(), on_released.clone());
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
        let notes = hub.release_notes();
        let _ = on_released.set(Box::new(move |keys| notes.released(keys)));
        let renewer = Renewer::start(conn.clone(), self.lease, renew_every, counters.clone());
        Ok(Client(Arc::new(Inner {
            conn,
            hub,
            renewer,
            background,
            id,
            tokens: crate::keys::Tokens::new(),
            config,
            counters,
            attempts: tokio::sync::Semaphore::new(super::ATTEMPTS_IN_FLIGHT),
            shared_keys: std::sync::Mutex::default(),
        })))
    }
}

impl ClientBuilder {
    pub(super) fn new(target: Target) -> ClientBuilder {
        ClientBuilder {
            target,
            tls: None,
            primary: RedisConnectionInfo::default(),
            replication: None,
            prefix: "redbell".to_owned(),
            lease: Duration::from_secs(30),
            renew_every: None,
            fence_ttl: Duration::from_secs(7 * 24 * 3600),
            linger: Duration::from_secs(2),
            max_park: Duration::from_secs(1),
            probe_interval: Duration::from_secs(1),
            metrics_lock_names: false,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            max_hold: None,
        }
    }

    /// Opens the command connection the target and the TLS settings call for.
    async fn conn(&self, (connect, response): (Duration, Duration)) -> Result<Conn, Error> {
        let tls = self.tls.as_ref();
        match &self.target {
            Target::Server(info) => {
                let client = conn::open(info.clone()?, tls)?;
                Conn::direct(client, connect, response).await
            }
            Target::Client(client) => {
                let client = match tls {
                    Some(_) => conn::open(client.get_connection_info().clone(), tls)?,
                    None => client.clone(),
                };
                Conn::direct(client, connect, response).await
            }
            Target::Cluster(nodes) => {
                let builder = |protocol| {
                    let builder = ClusterClient::builder(nodes.iter().map(String::as_str))
                        .use_protocol(protocol)
                        .connection_timeout(connect)
                        .response_timeout(response);
                    cluster_tls(builder, tls)
                };
                let commands = builder(ProtocolVersion::RESP2)?.build()?;
                let pubsub = builder(ProtocolVersion::RESP3)?.build()?;
                Conn::cluster(commands, pubsub, nodes.join(","), connect, response).await
            }
            Target::ClusterClient(client) => {
                let seeds = "the cluster of a ClusterClient".to_owned();
                let client = ClusterClient::clone(client);
                Conn::cluster(client.clone(), client, seeds, connect, response).await
            }
            Target::Sentinel { sentinels, master } => {
                let mut clients = Vec::with_capacity(sentinels.len());
                let mut tls_sentinels = false;
                for url in sentinels {
                    let info = url.as_str().into_connection_info()?;
                    let secure = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
                    tls_sentinels |= secure;
                    clients.push(conn::open(info, tls.filter(|_| secure))?);
                }
                // The primary's settings; the sentinels name its address.
                let scheme = if tls.is_some() || tls_sentinels {
                    "rediss"
                } else {
                    "redis"
                };
                let primary = format!("{scheme}://primary.invalid:6379")
                    .into_connection_info()?
                    .set_redis_settings(self.primary.clone());
                let primary = conn::open(primary, tls)?.get_connection_info().clone();
                let sentinels = Sentinels::new(clients, master.clone(), primary);
                Conn::sentinel(sentinels, connect, response).await
            }
        }
    }
}

/// Puts the certificates of [`ClientBuilder::tls`] on a cluster builder.
fn cluster_tls(
    builder: ClusterClientBuilder,
    tls: Option<&Tls>,
) -> Result<ClusterClientBuilder, Error> {
    match tls {
        None => Ok(builder),
        #[cfg(feature = "tls-rustls")]
        Some(certs) => Ok(builder.certs(certs.clone())),
        #[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
        Some(_) => Err(Error::Redis(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "certificates for cluster nodes need the tls-rustls feature; \
             with tls-native-tls, build a ClusterClient and use Client::from_cluster_client",
        )))),
        #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
        Some(never) => match *never {},
    }
}
