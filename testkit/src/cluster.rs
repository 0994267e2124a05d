//! [`Cluster`]: a Redis Cluster of three primaries and three replicas,
//! started by `scripts/redis/cluster.sh` on a free base port, and the
//! changes of who serves what: SIGKILL of a node, `CLUSTER FAILOVER`, a
//! slot migration.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use redis::aio::MultiplexedConnection;

use crate::{
    Error, Node, Result, command, connect, free_base, kill_pidfile, log_tail, node_url,
    parse_nodes, poll_until, query, redis_script, replication_field, run_redis_script,
};

/// How often the cluster's state is polled: 50 ms.
const POLL: Duration = Duration::from_millis(50);

/// Six nodes started by `cluster.sh start BASE` (nodes on BASE..BASE+5,
/// their buses 10000 above); stopped by the script on drop unless
/// [stopped](Cluster::stop) before.
#[derive(Debug)]
pub struct Cluster {
    base: u16,
    /// The script's state directory: node dirs, pid files, logs.
    dir: PathBuf,
    /// Nodes SIGKILLed through [`Cluster::kill`].
    killed: Vec<u16>,
    /// Set by [`Cluster::stop`]: drop does nothing more.
    stopped: bool,
}

impl Cluster {
    /// Starts a fresh cluster on a free base with `cluster.sh start`
    /// (which waits until every node reports `cluster_state:ok`).
    ///
    /// # Errors
    ///
    /// When no base is free, or the script fails or prints other URLs than
    /// the six nodes'.
    pub async fn start() -> Result<Cluster> {
        let offsets: Vec<u16> = (0..6).chain(10_000..10_006).collect();
        let base = free_base(8, &offsets, "a cluster")?;
        // Created first, so that a failed start is stopped too.
        let cluster = Cluster {
            base,
            dir: crate::repo_root()
                .join("target/redis-cluster")
                .join(base.to_string()),
            killed: Vec::new(),
            stopped: false,
        };
        let printed: Vec<String> = run_redis_script("cluster.sh", "start", base, &[])
            .await?
            .lines()
            .filter(|l| l.starts_with("redis://"))
            .map(str::to_owned)
            .collect();
        if printed != cluster.urls() {
            return Err(Error::new(format!(
                "cluster.sh start {base} printed {printed:?}"
            )));
        }
        Ok(cluster)
    }

    /// The base port: the nodes listen on BASE..BASE+5.
    pub fn base(&self) -> u16 {
        self.base
    }

    /// The script's state directory (`target/redis-cluster/BASE`): node
    /// dirs, pid files (`<port>.pid`), logs (`<port>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The six node ports.
    pub fn ports(&self) -> Vec<u16> {
        (0..6).map(|o| self.base + o).collect()
    }

    /// The ports of the nodes not [killed](Cluster::kill).
    pub fn live_ports(&self) -> Vec<u16> {
        self.ports()
            .into_iter()
            .filter(|p| !self.killed.contains(p))
            .collect()
    }

    /// The six node URLs, as `cluster.sh` prints them.
    pub fn urls(&self) -> Vec<String> {
        self.ports().into_iter().map(node_url).collect()
    }

    /// The tail of every node's log.
    pub fn log_tails(&self) -> String {
        self.ports()
            .into_iter()
            .map(|port| {
                log_tail(
                    &format!("cluster {} node {port}", self.base),
                    &self.dir.join(format!("{port}.log")),
                )
            })
            .collect()
    }

    /// SIGKILLs the node on `port` (its pid from the script's pid file) and
    /// waits (up to 5 s) until it no longer answers.
    ///
    /// # Errors
    ///
    /// When there is no pid, `kill` fails, or the node still answers.
    pub async fn kill(&mut self, port: u16) -> Result<()> {
        kill_pidfile(&self.dir.join(format!("{port}.pid"))).await?;
        self.killed.push(port);
        let gone = poll_until(Duration::from_secs(5), POLL, || async move {
            query::<String>(port, &redis::cmd("PING")).await.is_none()
        })
        .await;
        if gone {
            Ok(())
        } else {
            Err(Error::new(format!(
                "node {port} still answers after SIGKILL"
            )))
        }
    }

    /// `CLUSTER NODES` as the first live node that answers sees it.
    ///
    /// # Errors
    ///
    /// When no live node answers.
    pub async fn nodes(&self) -> Result<Vec<Node>> {
        for port in self.live_ports() {
            if let Some(text) = query::<String>(port, redis::cmd("CLUSTER").arg("NODES")).await {
                return Ok(parse_nodes(&text));
            }
        }
        Err(Error::new(format!(
            "no live node of cluster {} answers",
            self.base
        )))
    }

    /// The live primaries serving slots, by port.
    ///
    /// # Errors
    ///
    /// As [`Cluster::nodes`].
    pub async fn primaries(&self) -> Result<Vec<Node>> {
        Ok(self
            .nodes()
            .await?
            .into_iter()
            .filter(|n| n.is_primary() && !n.failed() && !n.slots.is_empty())
            .collect())
    }

    /// The primary serving `slot`.
    ///
    /// # Errors
    ///
    /// When none does, or as [`Cluster::nodes`].
    pub async fn owner(&self, slot: u16) -> Result<Node> {
        self.primaries()
            .await?
            .into_iter()
            .find(|n| n.serves(slot))
            .ok_or_else(|| Error::new(format!("no primary serves slot {slot}")))
    }

    /// The port of the live replica of the primary on `primary`.
    ///
    /// # Errors
    ///
    /// When it has none, or as [`Cluster::nodes`].
    pub async fn replica_of(&self, primary: u16) -> Result<u16> {
        let nodes = self.nodes().await?;
        let id = &nodes
            .iter()
            .find(|n| n.port == primary)
            .ok_or_else(|| Error::new(format!("no node on port {primary}")))?
            .id;
        nodes
            .iter()
            .find(|n| n.master.as_ref() == Some(id) && !n.failed())
            .map(|n| n.port)
            .ok_or_else(|| Error::new(format!("primary {primary} has no live replica")))
    }

    /// The node id of the node on `port`.
    ///
    /// # Errors
    ///
    /// When there is none, or as [`Cluster::nodes`].
    pub async fn id_of(&self, port: u16) -> Result<String> {
        self.nodes()
            .await?
            .into_iter()
            .find(|n| n.port == port)
            .map(|n| n.id)
            .ok_or_else(|| Error::new(format!("no node on port {port}")))
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`; returns as soon as it
    /// reports the master role (the rest of the cluster may not know yet).
    /// How long that took.
    ///
    /// Do not ask a replica again within 4 × the node timeout (8 s) of its
    /// last election: Redis Cluster reuses that election's state, so within
    /// 4 s the replica reports the master role with its old epoch for a few
    /// milliseconds (this may return then, or miss it and fail after 20 s)
    /// and turns back into a replica, and later the attempt expires. No
    /// failover happens either way, and the old primary holds its clients'
    /// writes paused until its manual failover times out (5 s).
    ///
    /// # Errors
    ///
    /// When the replica refuses, or is no master within 20 s.
    pub async fn promote(&self, replica: u16) -> Result<Duration> {
        let started = Instant::now();
        let ok: String = command(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await?;
        if ok != "OK" {
            return Err(Error::new(format!("CLUSTER FAILOVER on {replica}: {ok}")));
        }
        let promoted = poll_until(Duration::from_secs(20), POLL, || async move {
            replication_field(replica, "role").await.as_deref() == Some("master")
        })
        .await;
        if !promoted {
            return Err(Error::new(format!(
                "replica {replica} was not promoted within 20 s"
            )));
        }
        Ok(started.elapsed())
    }

    /// Moves `slot` from the primary on `from` to the primary on `to`:
    /// `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the
    /// source, `MIGRATE` of every key in the slot, then `SETSLOT NODE` on
    /// the target, the source and the other primaries. Returns once every
    /// primary was told the new owner (the replicas may not know yet); how
    /// many keys moved.
    ///
    /// # Errors
    ///
    /// When a step fails (the slot may be left half-moved).
    pub async fn move_slot(&self, slot: u16, from: u16, to: u16) -> Result<usize> {
        let (from_id, to_id) = (self.id_of(from).await?, self.id_of(to).await?);
        let setslot = |what: &'static str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(what).arg(id);
            cmd
        };
        command::<()>(to, &setslot("IMPORTING", &from_id)).await?;
        command::<()>(from, &setslot("MIGRATING", &to_id)).await?;
        let moved = migrate_keys(&mut connect(&node_url(from)).await?, slot, to).await?;
        command::<()>(to, &setslot("NODE", &to_id)).await?;
        command::<()>(from, &setslot("NODE", &to_id)).await?;
        for p in self.primaries().await? {
            if p.port != from && p.port != to {
                command::<()>(p.port, &setslot("NODE", &to_id)).await?;
            }
        }
        Ok(moved)
    }

    /// Runs `cluster.sh stop BASE` (once stopped, drop does nothing).
    ///
    /// # Errors
    ///
    /// When the script fails.
    pub async fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        run_redis_script("cluster.sh", "stop", self.base, &[])
            .await
            .map(drop)
    }
}

impl Drop for Cluster {
    /// Stops the nodes; when that fails or the thread is panicking (a
    /// failed test), prints the nodes' log tails and keeps their directory.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let out = redis_script("cluster.sh", "stop", self.base).output();
        let stopped = matches!(&out, Ok(o) if o.status.success());
        if std::thread::panicking() || !stopped {
            if let Ok(o) = &out {
                eprintln!(
                    "cluster.sh stop {}: {}",
                    self.base,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            eprint!("{}", self.log_tails());
            eprintln!("(kept {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `MIGRATE`s every key of `slot`, a hundred at a time, from the node of
/// connection `from` (its slot `MIGRATING`) to the node on port `to`; how
/// many keys moved. [`Cluster::move_slot`]'s middle step, for a test that
/// makes the `SETSLOT` steps itself (on a connection it opened before it
/// paused the node, say).
///
/// # Errors
///
/// When `GETKEYSINSLOT` or a `MIGRATE` fails.
pub async fn migrate_keys(from: &mut MultiplexedConnection, slot: u16, to: u16) -> Result<usize> {
    let mut moved = 0;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(from)
            .await
            .map_err(|e| Error::new(format!("GETKEYSINSLOT {slot}: {e}")))?;
        if keys.is_empty() {
            return Ok(moved);
        }
        moved += keys.len();
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async::<redis::Value>(from)
            .await
            .map_err(|e| Error::new(format!("MIGRATE of slot {slot} to {to}: {e}")))?;
    }
}
