//! `cluster`: the kit's [`Cluster`](redbell_testkit::Cluster)
//! (`scripts/redis/cluster.sh` on free ports: three primaries, one replica
//! each). Faults: `CLUSTER FAILOVER` on the replica of the shard that owns
//! a lock's slot, and a migration of a lock's slot to another primary;
//! each reported as a line, whether it worked or not.

use redbell_testkit::slot_of;

use super::kit_failure;
use crate::fail::Failure;

/// The cluster of one run.
pub struct Cluster {
    kit: redbell_testkit::Cluster,
    /// The nodes' URLs, for the workers.
    pub urls: Vec<String>,
}

impl Cluster {
    pub async fn start() -> Result<Cluster, Failure> {
        let kit = redbell_testkit::Cluster::start()
            .await
            .map_err(kit_failure)?;
        let urls = kit.urls();
        Ok(Cluster { kit, urls })
    }

    pub async fn stop(&mut self) {
        let _ = self.kit.stop().await;
    }

    /// The ports of the live primaries (none if no node answers).
    pub async fn primaries(&self) -> Vec<u16> {
        self.kit
            .primaries()
            .await
            .map(|nodes| nodes.iter().map(|n| n.port).collect())
            .unwrap_or_default()
    }

    /// `CLUSTER FAILOVER` on the replica of `lock`'s shard; returns once it
    /// reports the master role.
    pub async fn failover(&self, lock: &str) -> String {
        let slot = slot_of(lock);
        let step = async {
            let owner = self.kit.owner(slot).await?.port;
            let replica = self.kit.replica_of(owner).await?;
            self.kit.promote(replica).await?;
            Ok::<_, redbell_testkit::Error>((owner, replica))
        };
        match step.await {
            Ok((owner, replica)) => {
                format!("CLUSTER FAILOVER: {replica} (slot {slot} of {lock}) replaced {owner}")
            }
            Err(e) => format!("CLUSTER FAILOVER for {lock} (slot {slot}) failed: {e}"),
        }
    }

    /// Migrates `lock`'s slot to another primary (picked by `pick`).
    pub async fn migrate(&self, lock: &str, pick: usize) -> String {
        let slot = slot_of(lock);
        let step = async {
            let from = self.kit.owner(slot).await?.port;
            let others: Vec<u16> = self
                .primaries()
                .await
                .into_iter()
                .filter(|&p| p != from)
                .collect();
            let Some(&to) = others.get(pick % others.len().max(1)) else {
                return Err(redbell_testkit::Error::new("no other primary"));
            };
            let moved = self.kit.move_slot(slot, from, to).await?;
            Ok((from, to, moved))
        };
        match step.await {
            Ok((from, to, moved)) => {
                format!("migrated slot {slot} ({lock}) from {from} to {to}: {moved} keys")
            }
            Err(e) => format!("migration of slot {slot} ({lock}) failed: {e}"),
        }
    }
}
