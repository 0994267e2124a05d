//! Who serves what: the kit's `CLUSTER NODES` answers, panicking, and
//! lock names placed on a chosen primary.

use redbell_testkit::{Node, slot_of};

use crate::{lock_key, unique};

use super::{Cluster, must, must_ok};

/// A unique lock name whose slot `primary` serves.
pub fn name_in(primary: &Node, what: &str) -> String {
    loop {
        let name = unique(what);
        if primary.serves(slot_of(&name)) {
            return name;
        }
    }
}

impl Cluster {
    /// `CLUSTER NODES` as the first live node sees it.
    ///
    /// # Panics
    ///
    /// When no live node answers.
    pub async fn nodes(&self) -> Vec<Node> {
        must_ok(self.0.nodes().await)
    }

    /// The live primaries, by port.
    pub async fn primaries(&self) -> Vec<Node> {
        must_ok(self.0.primaries().await)
    }

    /// The port of the primary serving `slot`.
    pub async fn owner(&self, slot: u16) -> u16 {
        must_ok(self.0.owner(slot).await).port
    }

    /// The port of the (live) replica of the primary on `primary`.
    pub async fn replica_of(&self, primary: u16) -> u16 {
        must_ok(self.0.replica_of(primary).await)
    }

    /// The node id of the node on `port`.
    pub async fn id_of(&self, port: u16) -> String {
        must_ok(self.0.id_of(port).await)
    }

    /// A unique lock name whose slot the primary on `primary` serves
    /// (checked against the node's `CLUSTER KEYSLOT`).
    pub async fn name_on(&self, primary: u16, what: &str) -> String {
        let node = self
            .primaries()
            .await
            .into_iter()
            .find(|n| n.port == primary)
            .unwrap_or_else(|| panic!("{primary} is not a live primary"));
        let name = name_in(&node, what);
        let slot: i64 = must(
            primary,
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(lock_key(&name)),
        )
        .await;
        assert_eq!(
            slot,
            i64::from(slot_of(&name)),
            "CRC16 disagrees with CLUSTER KEYSLOT"
        );
        name
    }
}
