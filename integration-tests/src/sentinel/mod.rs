//! A Sentinel topology per test — a primary, a replica and three sentinels
//! — failed over by SIGKILLing the primary.
//!
//! - [`Topology`] spawns the five processes on loopback ports of its own, in
//!   the layout of `scripts/redis/sentinel.sh` (primary BASE, replica BASE+1,
//!   the replication [`Proxy`] on BASE+2, sentinels
//!   BASE+10..BASE+12; `sentinel monitor mymaster 127.0.0.1 BASE 2`,
//!   `down-after-milliseconds 1000`, `failover-timeout 10000`), waits until
//!   all three sentinels agree on the master, see each other and the
//!   replica, and none reports `s_down`; and kills everything on drop
//!   (printing the logs' tails when the test failed).
//! - [`Topology::start_with_proxy`] puts a [`Proxy`] on the
//!   replication link (the replica is pointed at it with `REPLICAOF`), which
//!   can be paused (nothing more is forwarded from the primary to the
//!   replica) and cut (its connections are dropped with what they held).
//!   `CLIENT KILL TYPE master` would not do: the replica reconnects and
//!   resyncs within a millisecond. Sentinel puts a replica that replicates
//!   from the wrong address back in line after `failover-timeout`
//!   (`+fix-slave-config`): point the replica at the proxy only seconds
//!   before the failover, and finish well within 10 s.
//! - [`ScriptTopology`] is the same layout as `sentinel.sh` starts it.
//!
//! The helpers here take a server's port where the crate's flat ones take a
//! connection, hence a module of their own: `use
//! redbell_integration_tests::sentinel::{Topology, ...}`.

mod processes;
mod replication;
mod script;
mod sentinels;

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use tokio::time::Instant;

use crate::{POLL, Proxy, eventually_every, free_base, node_url, print_log_tail};
use crate::{replication_field, unique};

pub use replication::{replica_caught_up, write_and_wait};
pub use script::ScriptTopology;
pub use sentinels::{as_strs, master_port, sentinel_agrees, sentinel_client, works_again};

/// The master name the sentinels monitor.
pub const MASTER: &str = "mymaster";

/// The offsets from BASE of the layout's ports: primary, replica, proxy,
/// three sentinels.
const LAYOUT: [u16; 6] = [0, 1, 2, 10, 11, 12];

/// A base port whose layout ports (BASE, +1, +2, +10..+12) are free
/// ([`free_base`]).
pub fn free_layout_base() -> u16 {
    free_base(16, &LAYOUT, "a sentinel topology")
}

/// A primary, a replica and three sentinels of the test's own, spawned as
/// child processes and SIGKILLed on drop.
#[derive(Debug)]
pub struct Topology {
    base: u16,
    /// Working directory, configs and logs; removed on drop unless the test
    /// failed.
    dir: PathBuf,
    /// (name, process); the primary's entry goes when it is killed.
    children: Vec<(String, Child)>,
}

impl Topology {
    /// Starts the topology and waits (up to 30 s) until it is healthy: the
    /// replica's link is up, and every sentinel names the primary with flags
    /// `master`, two other sentinels and one replica.
    ///
    /// # Panics
    ///
    /// When a process cannot be started or it is not healthy in time.
    pub async fn start() -> Topology {
        let base = free_layout_base();
        let dir = std::env::temp_dir().join(format!("redbell-sentinel-{base}-{}", unique("t")));
        std::fs::create_dir_all(&dir).expect("create the topology dir");
        let mut topo = Topology {
            base,
            dir,
            children: Vec::new(),
        };
        let started = Instant::now();
        topo.spawn_server("primary", topo.primary_port(), &[]);
        let primary = topo.primary_port().to_string();
        topo.spawn_server(
            "replica",
            topo.replica_port(),
            &["--replicaof", "127.0.0.1", &primary],
        );
        // The sentinels learn the replica from the primary's INFO when they
        // connect (then only every 10 s): start them once it is attached.
        let replica = topo.replica_port();
        let linked = eventually_every(Duration::from_secs(10), POLL, || async move {
            replication_field(replica, "master_link_status")
                .await
                .as_deref()
                == Some("up")
        })
        .await;
        assert!(linked, "the replica never linked to the primary");
        for i in 0..3 {
            topo.spawn_sentinel(i);
        }
        let (sentinels, primary) = (topo.sentinel_ports(), topo.primary_port());
        let healthy = eventually_every(Duration::from_secs(30), POLL, || async move {
            for s in sentinels {
                if !sentinel_agrees(s, primary).await {
                    return false;
                }
            }
            true
        })
        .await;
        assert!(
            healthy,
            "the sentinels did not agree on a healthy master within 30 s"
        );
        eprintln!(
            "topology {base}: primary {}, replica {}, sentinels {:?}: healthy after {:?}",
            topo.primary_port(),
            topo.replica_port(),
            topo.sentinel_ports(),
            started.elapsed()
        );
        topo
    }

    /// [`Topology::start`], then a [`Proxy`] on the proxy port in front of
    /// the primary, with the replica replicating through it
    /// ([`Topology::replicate_through`]).
    pub async fn start_with_proxy() -> (Topology, Proxy) {
        let topo = Topology::start().await;
        let proxy = Proxy::start(topo.proxy_port(), topo.primary_port()).await;
        topo.replicate_through(&proxy).await;
        (topo, proxy)
    }

    /// The primary's port: BASE.
    pub fn primary_port(&self) -> u16 {
        self.base
    }

    /// The replica's port: BASE+1.
    pub fn replica_port(&self) -> u16 {
        self.base + 1
    }

    /// Where the replication [`Proxy`] listens: BASE+2.
    pub fn proxy_port(&self) -> u16 {
        self.base + 2
    }

    /// The sentinels' ports: BASE+10..BASE+12.
    pub fn sentinel_ports(&self) -> [u16; 3] {
        [self.base + 10, self.base + 11, self.base + 12]
    }

    /// The three sentinel URLs, for `Client::sentinel`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports().into_iter().map(node_url).collect()
    }

    /// The primary's URL (the replica's after a failover).
    pub fn primary_url(&self) -> String {
        node_url(self.primary_port())
    }

    /// The replica's URL.
    pub fn replica_url(&self) -> String {
        node_url(self.replica_port())
    }

    /// The log file of process `name`.
    fn log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for name in [
                "primary",
                "replica",
                "sentinel-0",
                "sentinel-1",
                "sentinel-2",
            ] {
                print_log_tail(&format!("topology {} {name}", self.base), &self.log(name));
            }
            eprintln!("(kept {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
