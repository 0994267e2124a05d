//! Changing who serves what under the clients: failovers and slot
//! migrations.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::{POLL, eventually_every, replication_field};

use super::{Cluster, must};

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
        let started = Instant::now();
        let ok: String = must(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await;
        assert_eq!(ok, "OK");
        let promoted = eventually_every(Duration::from_secs(20), POLL, || async move {
            replication_field(replica, "role").await.as_deref() == Some("master")
        })
        .await;
        assert!(promoted, "replica {replica} was not promoted within 20 s");
        started.elapsed()
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
        let (from_id, to_id) = (self.id_of(from).await, self.id_of(to).await);
        let setslot = |what: &'static str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(what).arg(id);
            cmd
        };
        let _: () = must(to, &setslot("IMPORTING", &from_id)).await;
        let _: () = must(from, &setslot("MIGRATING", &to_id)).await;
        let mut moved = 0;
        loop {
            let keys: Vec<String> = must(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            )
            .await;
            if keys.is_empty() {
                break;
            }
            moved += keys.len();
            let _: Value = must(
                from,
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(to)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys),
            )
            .await;
        }
        let _: () = must(to, &setslot("NODE", &to_id)).await;
        let _: () = must(from, &setslot("NODE", &to_id)).await;
        for p in self.primaries().await {
            if p.port != from && p.port != to {
                let _: () = must(p.port, &setslot("NODE", &to_id)).await;
            }
        }
        moved
    }
}
