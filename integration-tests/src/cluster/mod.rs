//! A real local Redis Cluster per test: three primaries and three replicas,
//! started by `scripts/redis/cluster.sh`, and what the tests do to it.
//!
//! - [`Cluster`] runs `cluster.sh start BASE` on a random base port whose six
//!   ports (BASE..BASE+5) and cluster bus ports (+10000) are free, so every
//!   test gets a fresh cluster of its own; on drop it runs `cluster.sh stop
//!   BASE` (printing the nodes' log tails and keeping their directory when
//!   the test failed). It finds which primary owns a slot, which replica
//!   follows it, picks lock names whose slot lands on a given primary,
//!   SIGKILLs a node, runs `CLUSTER FAILOVER` and migrates a slot (`SETSLOT
//!   IMPORTING/MIGRATING`, `MIGRATE` of every key, `SETSLOT NODE` on every
//!   primary), each time waiting until the cluster is stable again: every
//!   live node reports `cluster_state:ok` and all 16384 slots ok, all live
//!   nodes share one view (nodes, roles, slots; a killed node flagged
//!   `fail`, nothing `fail?`), and every live replica's link is up.
//! - Commands to one node by port ([`must`], [`get`], [`zcard`], ...; a
//!   read may go to a replica), sharded Pub/Sub subscribers
//!   ([`shard_subscribers`]) and a [`Monitor`](crate::Monitor) of one node
//!   ([`monitor_node`]), to show that a lock's traffic stays in its shard.
//! - Cluster clients ([`cluster_client`]) and waiters queued on a lock's
//!   shard ([`queue_waiters`]).
//!
//! Every key and channel of lock `N` contains the hash tag `{N}`, so its
//! slot is the CRC16 of `N` ([`slot_of`], checked against `CLUSTER
//! KEYSLOT`), and a MONITOR line touching the lock in any way contains
//! `{N}`.
//!
//! The helpers here take a node's port where the crate's flat ones take a
//! connection, hence a module of their own: `use
//! redbell_integration_tests::cluster::{Cluster, get, ...}`.

mod changes;
mod clients;
mod commands;
mod health;
mod nodes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use crate::{POLL, eventually_every, free_base, node_url, print_log_tail, query, repo_root};
use crate::{redis_script, run_redis_script};

pub use clients::{cluster_client, cluster_client_with, holder_and_waiters, queue_waiters};
pub use commands::{
    conn, get, monitor_node, must, pttl, read, renewed_on, shard_subscribers, zcard,
};
pub use nodes::{Node, name_in, slot_of};

/// Six cluster nodes started by `scripts/redis/cluster.sh` on a base port of
/// the test's own; stopped (by the script) on drop.
#[derive(Debug)]
pub struct Cluster {
    base: u16,
    /// The script's state directory: node dirs, pid files, logs.
    dir: PathBuf,
    /// Nodes SIGKILLed by the test.
    killed: Vec<u16>,
}

impl Cluster {
    /// Starts a fresh cluster with `cluster.sh start` (which waits until it
    /// is healthy) and checks it is stable from here too.
    ///
    /// # Panics
    ///
    /// When the script fails, or the cluster is not stable within 30 s.
    pub async fn start() -> Cluster {
        let offsets: Vec<u16> = (0..6).chain(10_000..10_006).collect();
        let base = free_base(8, &offsets, "a cluster");
        let started = Instant::now();
        let cluster = Cluster {
            base,
            dir: repo_root()
                .join("target/redis-cluster")
                .join(base.to_string()),
            killed: Vec::new(),
        };
        let printed: Vec<String> = run_redis_script("cluster.sh", "start", base)
            .await
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(printed, cluster.urls(), "the URLs cluster.sh printed");
        let ready = started.elapsed();
        cluster.wait_stable("after cluster.sh start").await;
        eprintln!(
            "cluster {base}: created and healthy after {ready:?}, stable after {:?}",
            started.elapsed()
        );
        cluster
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

    /// SIGKILLs the node on `port` (its pid from the script's pid file) and
    /// waits until it no longer answers.
    ///
    /// # Panics
    ///
    /// When there is no pid, `kill` fails, or the node still answers 5 s
    /// later.
    pub async fn kill(&mut self, port: u16) {
        let pidfile = self.dir.join(format!("{port}.pid"));
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("read {}: {e}", pidfile.display()));
        let pid = pid.trim();
        assert!(
            !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
            "bad pid {pid:?} in {}",
            pidfile.display()
        );
        let status = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(pid)
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid} (node {port}): {status}");
        self.killed.push(port);
        let gone = eventually_every(Duration::from_secs(5), POLL, || async move {
            query::<String>(port, &redis::cmd("PING")).await.is_none()
        })
        .await;
        assert!(gone, "node {port} still answers after SIGKILL");
    }

    /// Prints the tail of every node's log.
    fn print_logs(&self) {
        for port in self.ports() {
            print_log_tail(
                &format!("cluster {} node {port}", self.base),
                &self.dir.join(format!("{port}.log")),
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
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
            self.print_logs();
            eprintln!("(kept {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
