//! Changing who serves what under the clients: failovers and slot
//! migrations.

use std::time::Duration;

use tokio::time::Instant;

use super::{Cluster, must_ok};

impl Cluster {
    /// `CLUSTER FAILOVER` on the replica on `replica`; waits until it is a
    /// primary and the cluster is stable again. How long that took.
    pub async fn failover(&self, replica: u16) -> Duration {
        let started = Instant::now();
        self.promote(replica).await;
        self.wait_stable("after CLUSTER FAILOVER").await;
        started.elapsed()
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`; returns as soon as it
    /// reports the master role (the rest of the cluster may not know yet).
    pub async fn promote(&self, replica: u16) -> Duration {
        must_ok(self.0.promote(replica).await)
    }

    /// Moves `slot` from the primary on `from` to the primary on `to`:
    /// `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the
    /// source, `MIGRATE` of every key in the slot, then `SETSLOT NODE` on
    /// the target, the source and the other primaries; waits until the
    /// cluster is stable. How long that took.
    pub async fn migrate_slot(&self, slot: u16, from: u16, to: u16) -> Duration {
        let started = Instant::now();
        let moved = self.move_slot(slot, from, to).await;
        let keys_moved = started.elapsed();
        self.wait_stable("after the slot migration").await;
        eprintln!(
            "migrated slot {slot} from {from} to {to}: {moved} keys, SETSLOT NODE done after \
             {keys_moved:?}, stable after {:?}",
            started.elapsed()
        );
        started.elapsed()
    }

    /// [`Cluster::migrate_slot`] without waiting for the cluster to be
    /// stable: returns once every primary was told the new owner. How many
    /// keys moved.
    pub async fn move_slot(&self, slot: u16, from: u16, to: u16) -> usize {
        must_ok(self.0.move_slot(slot, from, to).await)
    }
}
