//! `cluster`: `scripts/redis/cluster.sh` on free ports (three primaries,
//! one replica each). Faults: `CLUSTER FAILOVER` on the replica of the
//! shard that owns a lock's slot, and a migration of a lock's slot to
//! another primary (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT
//! NODE`).

use std::time::{Duration, Instant};

use super::{connect, free_base, script};
use crate::fail::Failure;

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    port: u16,
    master: bool,
    /// The primary's id, for a replica.
    of: String,
    slots: Vec<(u16, u16)>,
}

/// The cluster of one run.
pub struct Cluster {
    pub base: u16,
    pub urls: Vec<String>,
}

async fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    let mut c = connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .map_err(|e| e.message)?;
    cmd.query_async(&mut c).await.map_err(|e| e.to_string())
}

impl Cluster {
    pub async fn start() -> Result<Cluster, Failure> {
        let base = free_base(&[
            0, 1, 2, 3, 4, 5, 10_000, 10_001, 10_002, 10_003, 10_004, 10_005,
        ])?;
        let out = script("cluster.sh", "start", base).await?;
        let urls = out
            .lines()
            .filter(|l| l.starts_with("redis://"))
            .map(str::to_owned)
            .collect();
        Ok(Cluster { base, urls })
    }

    pub async fn stop(&self) {
        let _ = script("cluster.sh", "stop", self.base).await;
    }

    /// The cluster as the first node that answers sees it.
    async fn nodes(&self) -> Vec<Node> {
        for i in 0..6 {
            let Ok(text) = query::<String>(self.base + i, redis::cmd("CLUSTER").arg("NODES")).await
            else {
                continue;
            };
            return text
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    if f.len() < 8 || f[2].contains("fail") {
                        return None;
                    }
                    let port = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
                    let slots = f[8..]
                        .iter()
                        .filter(|s| !s.starts_with('['))
                        .filter_map(|s| {
                            let (a, b) = s.split_once('-').unwrap_or((s, s));
                            Some((a.parse().ok()?, b.parse().ok()?))
                        })
                        .collect();
                    Some(Node {
                        id: f[0].to_owned(),
                        port,
                        master: f[2].contains("master"),
                        of: f[3].to_owned(),
                        slots,
                    })
                })
                .collect();
        }
        Vec::new()
    }

    pub async fn primaries(&self) -> Vec<u16> {
        self.nodes()
            .await
            .iter()
            .filter(|n| n.master)
            .map(|n| n.port)
            .collect()
    }

    /// The slot of `lock` and the primary that owns it.
    async fn owner(&self, lock: &str) -> Option<(u16, Node, Vec<Node>)> {
        let slot: u16 = query(self.base, redis::cmd("CLUSTER").arg("KEYSLOT").arg(lock))
            .await
            .ok()?;
        let nodes = self.nodes().await;
        let owner = nodes
            .iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))?
            .clone();
        Some((slot, owner, nodes))
    }

    /// `CLUSTER FAILOVER` on the replica of `lock`'s shard; returns once it
    /// reports the master role.
    pub async fn failover(&self, lock: &str) -> String {
        let Some((slot, owner, nodes)) = self.owner(lock).await else {
            return format!("no owner found for {lock}");
        };
        let Some(replica) = nodes.iter().find(|n| !n.master && n.of == owner.id) else {
            return format!("no replica of {} for {lock}", owner.port);
        };
        if let Err(e) = query::<String>(replica.port, redis::cmd("CLUSTER").arg("FAILOVER")).await {
            return format!("CLUSTER FAILOVER on {} refused: {e}", replica.port);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let info: String = query(replica.port, redis::cmd("INFO").arg("replication"))
                .await
                .unwrap_or_default();
            if info.contains("role:master") {
                return format!(
                    "CLUSTER FAILOVER: {} (slot {slot} of {lock}) replaced {}",
                    replica.port, owner.port
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        format!(
            "CLUSTER FAILOVER on {}: not a master after 20 s",
            replica.port
        )
    }

    /// Migrates `lock`'s slot to another primary (picked by `pick`).
    pub async fn migrate(&self, lock: &str, pick: usize) -> String {
        let Some((slot, from, nodes)) = self.owner(lock).await else {
            return format!("no owner found for {lock}");
        };
        let others: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.master && n.id != from.id)
            .collect();
        let Some(to) = others.get(pick % others.len().max(1)) else {
            return "no other primary".into();
        };
        let setslot = |what: &str, id: &str| {
            let mut c = redis::cmd("CLUSTER");
            c.arg("SETSLOT").arg(slot).arg(what).arg(id);
            c
        };
        let step = async {
            query::<()>(to.port, &setslot("IMPORTING", &from.id)).await?;
            query::<()>(from.port, &setslot("MIGRATING", &to.id)).await?;
            let mut moved = 0;
            loop {
                let keys: Vec<String> = query(
                    from.port,
                    redis::cmd("CLUSTER")
                        .arg("GETKEYSINSLOT")
                        .arg(slot)
                        .arg(100),
                )
                .await?;
                if keys.is_empty() {
                    break;
                }
                moved += keys.len();
                let mut m = redis::cmd("MIGRATE");
                m.arg("127.0.0.1")
                    .arg(to.port)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys);
                query::<redis::Value>(from.port, &m).await?;
            }
            query::<()>(to.port, &setslot("NODE", &to.id)).await?;
            query::<()>(from.port, &setslot("NODE", &to.id)).await?;
            for n in nodes
                .iter()
                .filter(|n| n.master && n.id != from.id && n.id != to.id)
            {
                query::<()>(n.port, &setslot("NODE", &to.id)).await?;
            }
            Ok::<usize, String>(moved)
        };
        match step.await {
            Ok(moved) => format!(
                "migrated slot {slot} ({lock}) from {} to {}: {moved} keys",
                from.port, to.port
            ),
            Err(e) => format!("migration of slot {slot} ({lock}) failed: {e}"),
        }
    }
}
