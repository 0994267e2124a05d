//! Who serves what: slots, `CLUSTER NODES`, and lock names placed on a
//! chosen primary.

use crate::{lock_key, query, unique};

use super::{Cluster, must};

/// CRC16 (XMODEM), the hash of Redis Cluster's key slots: written here
/// again on purpose, as an oracle independent of the library's, and checked
/// against the server's `CLUSTER KEYSLOT` by [`Cluster::name_on`].
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of every key and channel of lock `name` (their hash tag is
/// `{name}`).
pub fn slot_of(name: &str) -> u16 {
    crc16(name.as_bytes()) % 16384
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct Node {
    /// The node id.
    pub id: String,
    /// The node's port (on 127.0.0.1).
    pub port: u16,
    /// Its flags (`master`, `slave`, `fail`, `fail?`, ...), without
    /// `myself`.
    pub flags: Vec<String>,
    /// The primary's id, for a replica.
    pub master: Option<String>,
    /// Slot ranges served (inclusive), for a primary.
    pub slots: Vec<(u16, u16)>,
}

impl Node {
    /// Whether it is flagged `master`.
    pub fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Whether it is flagged `fail` or `fail?`.
    pub fn failed(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    /// Whether `slot` is in one of its ranges.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// A unique lock name whose slot `primary` serves.
pub fn name_in(primary: &Node, what: &str) -> String {
    loop {
        let name = unique(what);
        if primary.serves(slot_of(&name)) {
            return name;
        }
    }
}

/// Parses `CLUSTER NODES`; the nodes by port.
pub(super) fn parse_nodes(text: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let addr = f[1].split('@').next().unwrap_or_default();
        let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        let Some(port) = port else { continue };
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|a| (a, a)),
            })
            .collect();
        nodes.push(Node {
            id: f[0].to_owned(),
            port,
            flags: f[2]
                .split(',')
                .filter(|x| *x != "myself")
                .map(str::to_owned)
                .collect(),
            master: (f[3] != "-").then(|| f[3].to_owned()),
            slots,
        });
    }
    nodes.sort_by_key(|n| n.port);
    nodes
}

impl Cluster {
    /// `CLUSTER NODES` as the first live node sees it.
    ///
    /// # Panics
    ///
    /// When no live node answers.
    pub async fn nodes(&self) -> Vec<Node> {
        for port in self.live_ports() {
            if let Some(text) = query::<String>(port, redis::cmd("CLUSTER").arg("NODES")).await {
                return parse_nodes(&text);
            }
        }
        panic!("no live node of cluster {} answers", self.base);
    }

    /// The live primaries, by port.
    pub async fn primaries(&self) -> Vec<Node> {
        self.nodes()
            .await
            .into_iter()
            .filter(|n| n.is_primary() && !n.failed() && !n.slots.is_empty())
            .collect()
    }

    /// The port of the primary serving `slot`.
    pub async fn owner(&self, slot: u16) -> u16 {
        self.primaries()
            .await
            .iter()
            .find(|n| n.serves(slot))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
            .port
    }

    /// The port of the (live) replica of the primary on `primary`.
    pub async fn replica_of(&self, primary: u16) -> u16 {
        let nodes = self.nodes().await;
        let id = &nodes
            .iter()
            .find(|n| n.port == primary)
            .expect("the primary")
            .id;
        nodes
            .iter()
            .find(|n| n.master.as_ref() == Some(id) && !n.failed())
            .unwrap_or_else(|| panic!("primary {primary} has no live replica"))
            .port
    }

    /// The node id of the node on `port`.
    pub async fn id_of(&self, port: u16) -> String {
        self.nodes()
            .await
            .into_iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
            .id
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
