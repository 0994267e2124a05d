//! A real local Redis Cluster per test: three primaries and three replicas,
//! started by `scripts/redis/cluster.sh`, and what the tests do to it.
//!
//! - [`Cluster`] is the kit's [`Cluster`](redbell_testkit::Cluster)
//!   (`cluster.sh start BASE` on a random base port whose six ports
//!   BASE..BASE+5 and cluster bus ports +10000 are free, so every test gets
//!   a fresh cluster of its own; on drop `cluster.sh stop BASE`, printing
//!   the nodes' log tails and keeping their directory when the test
//!   failed), panicking where the kit returns an error. It finds which primary owns a slot, which replica
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
//!   shard ([`queue_waiters`]); the scene of the tests that change who
//!   serves a lock under it ([`Contended`]: a holder, four parked waiters).
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
mod contended;
mod health;
mod nodes;

use std::ops::Deref;

use tokio::time::Instant;

pub use clients::{cluster_client, cluster_client_with, holder_and_waiters, queue_waiters};
pub use commands::{
    conn, get, monitor_node, must, pttl, read, renewed_on, shard_subscribers, zcard,
};
pub use contended::{Contended, served_in_time};
pub use nodes::name_in;
pub use redbell_testkit::{Node, slot_of};

/// Six cluster nodes started by `scripts/redis/cluster.sh` on a base port of
/// the test's own; stopped (by the script) on drop. The kit's
/// [`Cluster`](redbell_testkit::Cluster) methods that cannot fail
/// (`base`, `ports`, `urls`, ...) apply.
#[derive(Debug)]
pub struct Cluster(redbell_testkit::Cluster);

/// The kit's result, or a panic with its error.
pub(crate) fn must_ok<T>(r: redbell_testkit::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

impl Cluster {
    /// Starts a fresh cluster with `cluster.sh start` (which waits until it
    /// is healthy) and checks it is stable from here too.
    ///
    /// # Panics
    ///
    /// When the script fails, or the cluster is not stable within 30 s.
    pub async fn start() -> Cluster {
        let started = Instant::now();
        let cluster = Cluster(must_ok(redbell_testkit::Cluster::start().await));
        let ready = started.elapsed();
        cluster.wait_stable("after cluster.sh start").await;
        eprintln!(
            "cluster {}: created and healthy after {ready:?}, stable after {:?}",
            cluster.base(),
            started.elapsed()
        );
        cluster
    }

    /// SIGKILLs the node on `port` (its pid from the script's pid file) and
    /// waits until it no longer answers.
    ///
    /// # Panics
    ///
    /// When there is no pid, `kill` fails, or the node still answers 5 s
    /// later.
    pub async fn kill(&mut self, port: u16) {
        must_ok(self.0.kill(port).await);
    }
}

impl Deref for Cluster {
    type Target = redbell_testkit::Cluster;

    fn deref(&self) -> &redbell_testkit::Cluster {
        &self.0
    }
}
