//! One server of a topology, known by its loopback port (the kit's
//! [`node_url`], [`query`], [`info_field`], [`replication_field`]), and
//! free base ports for the topologies themselves.

use std::time::Duration;

pub use redbell_testkit::{info_field, node_url, query, replication_field};

/// How often the topology harnesses poll the servers' state: 50 ms.
pub const POLL: Duration = Duration::from_millis(50);

/// The kit's [`free_base`](redbell_testkit::free_base): a base port for a
/// topology of the test's own, `20000 + step × k`, with `base + o` free
/// for every `o` in `offsets`.
///
/// # Panics
///
/// When there is none; `what` names the topology.
pub fn free_base(step: u16, offsets: &[u16], what: &str) -> u16 {
    redbell_testkit::free_base(step, offsets, what).unwrap_or_else(|e| panic!("{e}"))
}
