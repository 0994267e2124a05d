//! Whether a cluster is stable: the state every change waits for.

use std::time::Duration;

use tokio::time::Instant;

use crate::{POLL, eventually_every, info_field, query, replication_field};

use super::Cluster;
use redbell_testkit::{Node, parse_nodes};

/// One field of `CLUSTER INFO` on a node.
async fn cluster_info(port: u16, name: &str) -> Option<String> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("INFO")).await?;
    info_field(&text, name)
}

/// A node's view of the cluster without what differs between nodes or
/// moments (myself flag, ping/pong times, link state): one line per node,
/// sorted. `None` when the node cannot be asked.
async fn view(port: u16) -> Option<Vec<String>> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("NODES")).await?;
    let mut lines: Vec<String> = parse_nodes(&text)
        .into_iter()
        .map(|n| {
            format!(
                "{} {} {} {:?} {:?}",
                n.id,
                n.port,
                n.flags.join(","),
                n.master,
                n.slots
            )
        })
        .collect();
    lines.sort();
    Some(lines)
}

impl Cluster {
    /// Whether the cluster is stable: every live node reports
    /// `cluster_state:ok` and all slots ok; all live nodes share one view,
    /// in which killed nodes are flagged `fail`, no node is `fail?`, three
    /// live primaries serve slots and every other live node replicates one
    /// of them; every live replica's link is up.
    pub async fn stable(&self) -> bool {
        let mut first: Option<Vec<String>> = None;
        for port in self.live_ports() {
            if cluster_info(port, "cluster_state").await.as_deref() != Some("ok")
                || cluster_info(port, "cluster_slots_ok").await.as_deref() != Some("16384")
            {
                return false;
            }
            let Some(v) = view(port).await else {
                return false;
            };
            if first.as_ref().is_some_and(|f| *f != v) {
                return false;
            }
            first = Some(v);
        }
        let nodes = self.nodes().await;
        if nodes.len() != 6 {
            return false;
        }
        for n in &nodes {
            let dead = !self.live_ports().contains(&n.port);
            let fail = n.flags.iter().any(|f| f == "fail");
            if n.flags
                .iter()
                .any(|f| f == "fail?" || f == "handshake" || f == "noaddr")
                || fail != dead
            {
                return false;
            }
        }
        // Three live primaries, all serving slots; every other live node a
        // replica of one of them.
        let serving: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.is_primary() && !n.failed() && !n.slots.is_empty())
            .collect();
        if serving.len() != 3 {
            return false;
        }
        let orphan = nodes.iter().any(|n| {
            self.live_ports().contains(&n.port)
                && !serving.iter().any(|p| p.id == n.id)
                && !serving.iter().any(|p| n.master.as_ref() == Some(&p.id))
        });
        if orphan {
            return false;
        }
        for port in self.live_ports() {
            if replication_field(port, "role").await.as_deref() == Some("slave")
                && replication_field(port, "master_link_status")
                    .await
                    .as_deref()
                    != Some("up")
            {
                return false;
            }
        }
        true
    }

    /// Waits (up to 30 s) until the cluster is [stable](Cluster::stable);
    /// how long that took.
    ///
    /// # Panics
    ///
    /// When it is not stable within 30 s (`when` says after what).
    pub async fn wait_stable(&self, when: &str) -> Duration {
        let started = Instant::now();
        let ok = eventually_every(Duration::from_secs(30), POLL, || self.stable()).await;
        if !ok {
            let nodes: Option<String> =
                query(self.live_ports()[0], redis::cmd("CLUSTER").arg("NODES")).await;
            panic!(
                "cluster {} not stable within 30 s {when}:\n{}",
                self.base(),
                nodes.unwrap_or_default()
            );
        }
        started.elapsed()
    }
}
