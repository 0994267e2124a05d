//! The command connection, and where the primary is.
//!
//! A [`Conn`] hands out the current [`ConnectionManager`] (one multiplexed
//! socket that reconnects by itself) and the [`redis::Client`] the pub/sub
//! hub connects with. For a client made with
//! [`Client::sentinel`](crate::Client::sentinel) it also follows failovers:
//! redis-rs's managers reconnect to the address they were built for, which
//! after a failover is a dead node or a demoted replica. So every command
//! error that can mean "this is no longer the primary" (refused, dropped,
//! timed out, `READONLY`) is [reported](Conn::report), and a report asks
//! the sentinels where the primary is now; when it moved, a new manager
//! replaces the old one. The hub also re-resolves before each reconnect, so
//! parked waiters follow the failover even when no command is running.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock as StdRwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::OnceCell;

use crate::Error;

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
    /// Set while a re-resolution started by `report` runs (one at a time).
    resolving: AtomicBool,
    /// Counts switches to a new primary (see [`Conn::epoch`]).
    epoch: AtomicU64,
}

#[derive(Clone)]
struct Current {
    /// `host:port` of the primary (sentinel mode), or the URL.
    addr: String,
    /// The client the pub/sub hub connects with (single node and sentinel).
    client: Option<redis::Client>,
    /// The cluster client (cluster only), for the slow lane.
    cluster: Option<ClusterClient>,
    manager: Manager,
    /// The lane for slow calls (those followed by `WAIT`), so they never
    /// hold up the hot path's multiplexed socket; opened on first use, so a
    /// client that never asks for replication pays nothing.
    slow: Arc<OnceCell<Manager>>,
}

enum Source {
    Direct,
    Sentinel {
        sentinels: Vec<redis::Client>,
        master: String,
    },
    /// Redis Cluster: redis-rs follows slots, failovers and migrations.
    Cluster {
        nodes: Vec<String>,
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
    /// Connects to the server at `url`.
    pub(crate) async fn direct(
        url: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let client = redis::Client::open(url)?;
        let manager = manager(&client, connect_timeout, response_timeout).await?;
        Ok(Conn(Arc::new(Inner {
            current: StdRwLock::new(Current {
                addr: url.to_owned(),
                client: Some(client),
                cluster: None,
                manager,
                slow: Arc::default(),
            }),
            source: Source::Direct,
            connect_timeout,
            response_timeout,
            resolving: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        })))
    }

    /// Asks the sentinels at `sentinel_urls` for the primary of `master`
    /// and connects to it.
    pub(crate) async fn sentinel(
        sentinel_urls: &[&str],
        master: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let sentinels = sentinel_urls
            .iter()
            .map(|url| redis::Client::open(*url))
            .collect::<Result<Vec<_>, _>>()?;
        let source = Source::Sentinel {
            sentinels,
            master: master.to_owned(),
        };
        let addr = primary_of(&source, connect_timeout).await?;
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let manager = manager(&client, connect_timeout, response_timeout).await?;
        Ok(Conn(Arc::new(Inner {
            current: StdRwLock::new(Current {
                addr,
                client: Some(client),
                cluster: None,
                manager,
                slow: Arc::default(),
            }),
            source,
            connect_timeout,
            response_timeout,
            resolving: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        })))
    }

    /// Connects to the Redis Cluster that `node_urls` belong to.
    pub(crate) async fn cluster(
        node_urls: &[&str],
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Conn, Error> {
        let client = ClusterClient::builder(node_urls.iter().copied())
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .build()?;
        let manager = client.get_async_connection().await?;
        Ok(Conn(Arc::new(Inner {
            current: StdRwLock::new(Current {
                addr: node_urls.join(","),
                client: None,
                cluster: Some(client),
                manager: Manager::Cluster(manager),
                slow: Arc::default(),
            }),
            source: Source::Cluster {
                nodes: node_urls.iter().map(|url| (*url).to_owned()).collect(),
            },
            connect_timeout,
            response_timeout,
            resolving: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
        })))
    }

    /// How many times [`resolve`](Conn::resolve) switched to a new primary:
    /// the hub moves its pub/sub connection when this changes.
    pub(crate) fn epoch(&self) -> u64 {
        self.0.epoch.load(Ordering::Acquire)
    }

    /// Whether this is a Redis Cluster (sharded pub/sub, per-slot batches).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.0.source, Source::Cluster { .. })
    }

    /// The cluster's seed nodes, for the hub's dedicated pub/sub
    /// connection; `None` unless this is a cluster.
    pub(crate) fn cluster_nodes(&self) -> Option<&[String]> {
        match &self.0.source {
            Source::Cluster { nodes } => Some(nodes),
            _ => None,
        }
    }

    /// The current command connection (a clone sharing its sockets).
    pub(crate) fn manager(&self) -> Manager {
        self.current().manager
    }

    /// The slow lane: a command connection of its own for calls that block
    /// on the server (`WAIT`), opened on first use.
    pub(crate) async fn slow_manager(&self) -> RedisResult<Manager> {
        let current = self.current();
        let (timeouts, client, cluster) = (
            (self.0.connect_timeout, self.0.response_timeout),
            current.client.clone(),
            current.cluster.clone(),
        );
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
            .cloned()
    }

    /// The current primary's client, for the pub/sub connection; `None` on
    /// a cluster (see [`Conn::cluster_nodes`]).
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

    /// Notes a command error. In sentinel mode an error that may mean the
    /// primary moved starts a re-resolution in the background (one at a
    /// time); otherwise it does nothing.
    pub(crate) fn report(&self, err: &redis::RedisError) {
        let moved = err.is_io_error()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || err.is_timeout()
            || err.code() == Some("READONLY");
        if !moved || !matches!(self.0.source, Source::Sentinel { .. }) {
            return;
        }
        if self.0.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        let conn = self.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.resolve().await {
                tracing::debug!(error = %e, "could not re-resolve the primary");
            }
            conn.0.resolving.store(false, Ordering::Release);
        });
    }

    /// In sentinel mode, asks where the primary is and switches to it if it
    /// moved. Returns whether it switched.
    pub(crate) async fn resolve(&self) -> Result<bool, Error> {
        if !matches!(self.0.source, Source::Sentinel { .. }) {
            return Ok(false);
        }
        let addr = primary_of(&self.0.source, self.0.connect_timeout).await?;
        if addr == self.current().addr {
            return Ok(false);
        }
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let manager = manager(&client, self.0.connect_timeout, self.0.response_timeout).await?;
        tracing::info!(primary = %addr, "following a failover to the new primary");
        *self.0.current.write().unwrap_or_else(|p| p.into_inner()) = Current {
            addr,
            client: Some(client),
            cluster: None,
            manager,
            slow: Arc::default(),
        };
        self.0.epoch.fetch_add(1, Ordering::AcqRel);
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

/// `host:port` of the primary the first answering sentinel names.
async fn primary_of(source: &Source, timeout: Duration) -> Result<String, Error> {
    let Source::Sentinel { sentinels, master } = source else {
        return Err(Error::Closed); // not reached: callers check the mode
    };
    let mut last = None;
    for sentinel in sentinels {
        let asked = tokio::time::timeout(timeout, async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        })
        .await;
        match asked {
            Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
            Ok(Ok(None)) => {
                last = Some(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the sentinels do not know this master",
                    master.clone(),
                )))
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                last = Some(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "a sentinel did not answer in time",
                )))
            }
        }
    }
    Err(last.map_or(Error::Closed, Error::Redis))
}
