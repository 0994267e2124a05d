//! The Redis topologies a soak runs on, each owned by the soak (started on
//! free ports, stopped at the end), and the faults of their servers.
//!
//! - `single`: one redis-server with AOF (the kit's `Server`); workers reach it
//!   through proxies of their own; the store lives on it too. Faults:
//!   `CLIENT KILL`, `CLIENT PAUSE`, SIGKILL + restart.
//! - `sentinel` (`sentinel.rs`) and `cluster` (`cluster.rs`): the
//!   scripts in `scripts/redis/` on free ports; the store lives on a
//!   server of its own, outside the faults, so it judges what a failover
//!   lost.

mod cluster;
mod sentinel;

use std::path::Path;
use std::time::Duration;

use redis::aio::ConnectionManager;

use redbell_testkit::{Server, ServerOptions};

use super::checker::FaultKind;
use super::plan::Planned;
use super::worker_io::now_us;
use crate::fail::{EX_FAILURE, EX_USAGE, Failure};
use cluster::Cluster;
use sentinel::Sentinel;

/// How long a restarted server stays down before it is started again.
const RESTART_DOWN: Duration = Duration::from_millis(500);

/// A running topology.
pub enum Topology {
    Single {
        server: Server,
        conn: ConnectionManager,
    },
    Sentinel {
        sentinel: Sentinel,
        store: Server,
        conn: ConnectionManager,
    },
    Cluster {
        cluster: Cluster,
        store: Server,
        conn: ConnectionManager,
        /// The locks a server fault picks from.
        locks: Vec<String>,
    },
}

/// The kit's error as the soak's failure.
pub fn kit_failure(e: redbell_testkit::Error) -> Failure {
    Failure::new(EX_FAILURE, e.0)
}

/// The soak's own redis-server with an AOF (`appendfsync everysec`), its
/// data in `dir`: SIGKILLed and restarted, it keeps what reached the AOF
/// and loses up to about a second of writes (lock grants, renewals,
/// releases, fences and store maxima alike).
async fn aof_server(dir: &Path) -> Result<Server, Failure> {
    Server::start(ServerOptions {
        dir: Some(dir.to_owned()),
        aof: true,
        ..ServerOptions::default()
    })
    .await
    .map_err(kit_failure)
}

async fn manager(url: &str) -> Result<ConnectionManager, Failure> {
    let client = redis::Client::open(url).map_err(|e| Failure::redis(url, "bad Redis URL", &e))?;
    ConnectionManager::new(client)
        .await
        .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))
}

impl Topology {
    /// Starts topology `name` with its state under `dir`.
    pub async fn start(name: &str, dir: &Path) -> Result<Topology, Failure> {
        match name {
            "single" => {
                let server = aof_server(&dir.join("redis")).await?;
                let conn = manager(&server.url()).await?;
                Ok(Topology::Single { server, conn })
            }
            "sentinel" => {
                let store = aof_server(&dir.join("store")).await?;
                let conn = manager(&store.url()).await?;
                let sentinel = Sentinel::start().await?;
                Ok(Topology::Sentinel {
                    sentinel,
                    store,
                    conn,
                })
            }
            "cluster" => {
                let store = aof_server(&dir.join("store")).await?;
                let conn = manager(&store.url()).await?;
                let cluster = Cluster::start().await?;
                Ok(Topology::Cluster {
                    cluster,
                    store,
                    conn,
                    locks: Vec::new(),
                })
            }
            other => Err(Failure::new(
                EX_USAGE,
                format!("SOAK_TOPOLOGY={other:?} is not supported (single, sentinel, cluster)"),
            )),
        }
    }

    /// What the workers connect the library to: a URL, and the port each
    /// worker gets a proxy to (if any).
    pub fn worker_url(&self) -> (String, Option<u16>) {
        match self {
            Topology::Single { server, .. } => (server.url(), Some(server.port())),
            Topology::Sentinel { store, .. } | Topology::Cluster { store, .. } => {
                (store.url(), None)
            }
        }
    }

    /// Arguments every worker gets (the library's target and the store).
    pub fn worker_args(&self) -> Vec<String> {
        let store = |s: &Server| ["--store-url".to_owned(), s.url()];
        match self {
            Topology::Single { server, .. } => store(server).to_vec(),
            Topology::Sentinel {
                sentinel, store: s, ..
            } => [
                vec!["--sentinels".into(), sentinel.urls.join(",")],
                store(s).to_vec(),
            ]
            .concat(),
            Topology::Cluster {
                cluster, store: s, ..
            } => [
                vec!["--cluster".into(), cluster.urls.join(",")],
                store(s).to_vec(),
            ]
            .concat(),
        }
    }

    /// The locks the server faults pick from.
    pub fn set_locks(&mut self, names: &[String]) {
        if let Topology::Cluster { locks, .. } = self {
            *locks = names.to_vec();
        }
    }

    /// The connection to the store's server.
    pub fn conn(&mut self) -> &mut ConnectionManager {
        match self {
            Topology::Single { conn, .. }
            | Topology::Sentinel { conn, .. }
            | Topology::Cluster { conn, .. } => conn,
        }
    }

    /// The servers holding the locks' keys now.
    async fn lock_servers(&self) -> Vec<String> {
        let url = |p: u16| format!("redis://127.0.0.1:{p}");
        match self {
            Topology::Single { server, .. } => vec![server.url()],
            Topology::Sentinel { sentinel, .. } => {
                sentinel.primary().await.map(url).into_iter().collect()
            }
            Topology::Cluster { cluster, .. } => {
                cluster.primaries().await.into_iter().map(url).collect()
            }
        }
    }

    /// A `CLIENT` fault (`None` if `kind` is not one).
    pub async fn inject_client(&mut self, kind: FaultKind) -> Option<String> {
        let Topology::Single { conn, .. } = self else {
            return None;
        };
        let ty = match kind {
            FaultKind::ClientKillNormal => "normal",
            FaultKind::ClientKillPubsub => "pubsub",
            FaultKind::ClientPause => {
                let mut cmd = redis::cmd("CLIENT");
                cmd.arg("PAUSE").arg(300).arg("ALL");
                let r: redis::RedisResult<()> = retried(conn, &cmd).await;
                return Some(match r {
                    Ok(()) => "CLIENT PAUSE 300 ALL".to_owned(),
                    Err(e) => format!("CLIENT PAUSE failed: {e}"),
                });
            }
            _ => return None,
        };
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("KILL").arg("TYPE").arg(ty);
        let n: redis::RedisResult<i64> = retried(conn, &cmd).await;
        Some(match n {
            Ok(n) => format!("CLIENT KILL TYPE {ty}: {n} connections"),
            Err(e) => format!("CLIENT KILL TYPE {ty} failed: {e}"),
        })
    }

    /// A fault of the servers; returns its line and when it was over
    /// (`None`: it was skipped, and is no fault).
    pub async fn inject(&mut self, planned: &Planned) -> Result<(String, Option<u64>), Failure> {
        match (self, planned.kind) {
            (Topology::Single { server, .. }, FaultKind::Restart) => {
                server.restart(RESTART_DOWN).await.map_err(kit_failure)?;
                let line = format!(
                    "SIGKILL redis-server, restarted after {} ms from its AOF",
                    RESTART_DOWN.as_millis()
                );
                Ok((line, Some(now_us())))
            }
            (Topology::Sentinel { sentinel, .. }, FaultKind::Failover) => {
                Ok((sentinel.failover().await?, Some(now_us())))
            }
            (Topology::Sentinel { sentinel, .. }, FaultKind::FreezeSentinel) => {
                Ok((sentinel.frozen_failover().await?, Some(now_us())))
            }
            (Topology::Sentinel { sentinel, .. }, FaultKind::KillPrimary) => {
                let line = sentinel.kill_primary().await?;
                Ok((line, Some(now_us())))
            }
            (Topology::Cluster { cluster, locks, .. }, FaultKind::ClusterFailover) => {
                let lock = &locks[planned.slot % locks.len().max(1)];
                let (line, injected) = cluster.failover(lock).await;
                Ok((line, injected.then(now_us)))
            }
            (Topology::Cluster { cluster, locks, .. }, FaultKind::KillThenFailover) => {
                let lock = &locks[planned.slot % locks.len().max(1)];
                let (line, injected) = cluster.kill_then_failover(lock).await;
                Ok((line, injected.then(now_us)))
            }
            (Topology::Cluster { cluster, locks, .. }, FaultKind::Migrate) => {
                let lock = &locks[planned.slot % locks.len().max(1)];
                Ok((
                    cluster.migrate(lock, planned.slot / 7).await,
                    Some(now_us()),
                ))
            }
            (_, kind) => Ok((
                format!("{} does not apply here", kind.name()),
                Some(now_us()),
            )),
        }
    }

    /// The failovers the servers made on their own during the run, given
    /// the faults injected, and how many switches were announced in all
    /// (Sentinel only; see `sentinel.rs`).
    pub fn own_failovers(
        &self,
        injected: &[super::checker::Fault],
    ) -> Option<(Vec<super::checker::Fault>, usize)> {
        match self {
            Topology::Sentinel { sentinel, .. } => Some(sentinel.own_failovers(injected)),
            _ => None,
        }
    }

    /// The keys matching `pattern` (for the final count).
    pub async fn keys(&mut self, pattern: &str) -> Result<Vec<String>, Failure> {
        let mut out = Vec::new();
        for url in self.lock_servers().await {
            let mut conn = manager(&url).await?;
            out.extend(
                scan(&mut conn, pattern)
                    .await
                    .map_err(|e| Failure::redis(&url, "SCAN", &e))?,
            );
        }
        Ok(out)
    }

    /// Deletes `keys` (the fence counters and the stores), best effort.
    pub async fn del(&mut self, keys: &[String]) {
        let mut conns = vec![self.conn().clone()];
        for url in self.lock_servers().await {
            if let Ok(c) = manager(&url).await {
                conns.push(c);
            }
        }
        for conn in &mut conns {
            for key in keys {
                // Each key lives on one of them; the others refuse it.
                let _: redis::RedisResult<i64> = retried(conn, redis::cmd("DEL").arg(key)).await;
            }
        }
    }

    pub async fn stop(&mut self) {
        match self {
            Topology::Single { server, .. } => server.kill(),
            Topology::Sentinel {
                sentinel, store, ..
            } => {
                sentinel.stop().await;
                store.kill();
            }
            Topology::Cluster { cluster, store, .. } => {
                cluster.stop().await;
                store.kill();
            }
        }
    }
}

async fn scan(conn: &mut ConnectionManager, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<String>) = retried(conn, &cmd).await?;
        out.extend(keys);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// `cmd` on `conn`, tried again (up to three times) when the connection
/// met a restarted server.
pub async fn retried<T: redis::FromRedisValue>(
    conn: &mut ConnectionManager,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    let mut tries = 0;
    loop {
        match cmd.query_async(conn).await {
            Err(e) if tries < 3 && (e.is_io_error() || e.is_connection_dropped()) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}
