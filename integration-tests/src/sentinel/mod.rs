//! A Sentinel topology per test — a primary, a replica and three sentinels
//! — failed over by SIGKILLing the primary or by `SENTINEL FAILOVER`.
//!
//! - [`Topology`] is the kit's [`Sentinel`](redbell_testkit::Sentinel):
//!   `scripts/redis/sentinel.sh start BASE` on a base of the test's own
//!   (primary BASE, replica BASE+1, sentinels BASE+10..BASE+12; `sentinel
//!   monitor mymaster 127.0.0.1 BASE 2`, `down-after-milliseconds 1000`,
//!   `failover-timeout 10000`), which returns once all three sentinels
//!   agree on the master, see each other and the replica, and none reports
//!   `s_down`; stopped on drop (printing the logs' tails when the test
//!   failed). Panics where the kit returns an error.
//! - [`Topology::start_with_proxy`] puts a [`Proxy`] on BASE+2 on the
//!   replication link (the replica is pointed at it with `REPLICAOF`), which
//!   can be paused (nothing more is forwarded from the primary to the
//!   replica) and cut (its connections are dropped with what they held).
//!   `CLIENT KILL TYPE master` would not do: the replica reconnects and
//!   resyncs within a millisecond. Sentinel puts a replica that replicates
//!   from the wrong address back in line after `failover-timeout`
//!   (`+fix-slave-config`): point the replica at the proxy only seconds
//!   before the failover, and finish well within 10 s.
//!
//! The helpers here take a server's port where the crate's flat ones take a
//! connection, hence a module of their own: `use
//! redbell_integration_tests::sentinel::{Topology, ...}`.

mod replication;
mod sentinels;

use std::ops::Deref;

use tokio::time::Instant;

use crate::{Proxy, node_url};

pub use redbell_testkit::sentinel::{MASTER, master_port, sentinel_agrees};
pub use replication::{replica_caught_up, write_and_wait};
pub use sentinels::{
    FrozenSentinel, failover_followed_within, on_old_primary_until_moved, sentinel_client,
    works_again,
};

/// A base port whose layout ports (BASE, +1, +2, +10..+12) are free.
///
/// # Panics
///
/// When there is none.
pub fn free_layout_base() -> u16 {
    redbell_testkit::sentinel::free_layout_base().unwrap_or_else(|e| panic!("{e}"))
}

/// A primary, a replica and three sentinels of the test's own. The kit's
/// [`Sentinel`](redbell_testkit::Sentinel) methods that cannot fail
/// (`base`, `sentinel_ports`, `dir`, ...) apply.
#[derive(Debug)]
pub struct Topology(redbell_testkit::Sentinel);

impl Topology {
    /// Starts the topology on a free base and waits until it is healthy.
    ///
    /// # Panics
    ///
    /// When `sentinel.sh` fails.
    pub async fn start() -> Topology {
        Topology::start_at(free_layout_base(), &[]).await.0
    }

    /// Runs `sentinel.sh start BASE OPTIONS...` (e.g. `--requirepass PW`,
    /// `--sentinel-pass PW`); the topology and the sentinel URLs the script
    /// printed (with the sentinels' password, if any).
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub async fn start_at(base: u16, options: &[&str]) -> (Topology, Vec<String>) {
        let started = Instant::now();
        let kit = start_kit(base, options).await;
        let topo = Topology(kit);
        eprintln!(
            "topology {base}: primary {}, replica {}, sentinels {:?}: healthy after {:?}",
            topo.primary_port(),
            topo.replica_port(),
            topo.sentinel_ports(),
            started.elapsed()
        );
        let urls = topo.0.sentinel_urls().to_vec();
        (topo, urls)
    }

    /// [`Topology::start`], then a [`Proxy`] on the proxy port in front of
    /// the primary, with the replica replicating through it
    /// ([`Topology::replicate_through`]).
    pub async fn start_with_proxy() -> (Topology, Proxy) {
        let topo = Topology::start().await;
        let proxy = Proxy::start(topo.proxy_port(), topo.primary_port())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        topo.replicate_through(&proxy).await;
        (topo, proxy)
    }

    /// Where the replication [`Proxy`] listens: BASE+2.
    pub fn proxy_port(&self) -> u16 {
        self.0.spare_port()
    }

    /// The three sentinel URLs, for `Client::sentinel`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.0.sentinel_urls().to_vec()
    }

    /// The primary's URL (the replica's after a failover).
    pub fn primary_url(&self) -> String {
        node_url(self.primary_port())
    }

    /// The replica's URL.
    pub fn replica_url(&self) -> String {
        node_url(self.replica_port())
    }

    /// SIGKILLs the primary and waits until it no longer answers.
    ///
    /// # Panics
    ///
    /// When it cannot be killed (it was killed before, say).
    pub async fn kill_primary(&self) {
        self.0
            .kill(self.primary_port())
            .await
            .unwrap_or_else(|e| panic!("SIGKILL the primary: {e}"));
    }

    /// Runs `sentinel.sh stop BASE` (once stopped, drop does nothing).
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub async fn stop(&mut self) {
        self.0.stop().await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The kit's topology, started, or a panic.
async fn start_kit(base: u16, options: &[&str]) -> redbell_testkit::Sentinel {
    redbell_testkit::Sentinel::start_at(base, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

impl Deref for Topology {
    type Target = redbell_testkit::Sentinel;

    fn deref(&self) -> &redbell_testkit::Sentinel {
        &self.0
    }
}
