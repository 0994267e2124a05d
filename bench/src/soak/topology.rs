//! The Redis topologies a soak runs on, each owned by the soak (started on
//! free ports, stopped at the end), and the faults of their servers.
//!
//! - `single`: one redis-server with AOF (`server.rs`); workers reach it
//!   through proxies of their own; the store lives on it too. Faults:
//!   `CLIENT KILL`, `CLIENT PAUSE`, SIGKILL + restart.

use std::path::Path;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::checker::FaultKind;
use super::plan::Planned;
use super::server::Server;
use super::worker::now_us;
use crate::fail::{EX_USAGE, Failure};

/// How long a restarted server stays down before it is started again.
const RESTART_DOWN: Duration = Duration::from_millis(500);

/// A running topology.
pub enum Topology {
    Single {
        server: Server,
        conn: ConnectionManager,
    },
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
                let server = Server::start(&dir.join("redis")).await?;
                let conn = manager(&server.url()).await?;
                Ok(Topology::Single { server, conn })
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
            Topology::Single { server, .. } => (server.url(), Some(server.port)),
        }
    }

    /// Arguments every worker gets (the library's target and the store).
    pub fn worker_args(&self) -> Vec<String> {
        match self {
            Topology::Single { server, .. } => vec!["--store-url".into(), server.url()],
        }
    }

    /// The connection holding the store and the locks' keys (for the
    /// final count).
    pub fn conn(&mut self) -> &mut ConnectionManager {
        match self {
            Topology::Single { conn, .. } => conn,
        }
    }

    /// A `CLIENT` fault (`None` if `kind` is not one).
    pub async fn inject_client(&mut self, kind: FaultKind) -> Option<String> {
        let conn = self.conn();
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

    /// A fault of the servers; returns its line and when it was over.
    pub async fn inject(&mut self, planned: &Planned) -> Result<(String, Option<u64>), Failure> {
        match (self, planned.kind) {
            (Topology::Single { server, .. }, FaultKind::Restart) => {
                server.restart(RESTART_DOWN).await?;
                let line = format!(
                    "SIGKILL redis-server, restarted after {} ms from its AOF",
                    RESTART_DOWN.as_millis()
                );
                Ok((line, Some(now_us())))
            }
            (_, kind) => Ok((
                format!("{} does not apply here", kind.name()),
                Some(now_us()),
            )),
        }
    }

    /// The keys matching `pattern` (for the final count).
    pub async fn keys(&mut self, pattern: &str) -> Result<Vec<String>, Failure> {
        scan(self.conn(), pattern)
            .await
            .map_err(|e| Failure::redis("the soak's server", "SCAN", &e))
    }

    /// Deletes `keys` (the fence counters and the stores), best effort.
    pub async fn del(&mut self, keys: &[String]) {
        let conn = self.conn();
        for key in keys {
            let _: redis::RedisResult<i64> = retried(conn, redis::cmd("DEL").arg(key)).await;
        }
    }

    pub async fn stop(&mut self) {
        match self {
            Topology::Single { server, .. } => server.stop().await,
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
