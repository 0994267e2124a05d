//! `cluster`: the kit's [`Cluster`](redbell_testkit::Cluster)
//! (`scripts/redis/cluster.sh` on free ports: three primaries, one replica
//! each). Faults: `CLUSTER FAILOVER` on the replica of the shard that owns
//! a lock's slot, the same right after `CLIENT KILL TYPE pubsub` on that
//! shard (the failover meets the hubs' recovery of their subscriptions),
//! and a migration of a lock's slot to another primary; each reported as
//! a line, whether it worked or not.

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

    /// `CLIENT KILL TYPE pubsub` on the primary of `lock`'s shard, then
    /// 150 ms later (the hubs are recovering their subscriptions there)
    /// `CLUSTER FAILOVER` on its replica; returns once it reports the
    /// master role.
    pub async fn kill_then_failover(&self, lock: &str) -> String {
        let slot = slot_of(lock);
        let killed = async {
            let owner = self.kit.owner(slot).await?.port;
            let client = redis::Client::open(format!("redis://127.0.0.1:{owner}"))
                .map_err(|e| redbell_testkit::Error::new(e.to_string()))?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| redbell_testkit::Error::new(e.to_string()))?;
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query_async(&mut conn)
                .await
                .map_err(|e| redbell_testkit::Error::new(e.to_string()))?;
            Ok::<_, redbell_testkit::Error>((owner, n))
        };
        let kill = match killed.await {
            Ok((owner, n)) => format!("CLIENT KILL TYPE pubsub on {owner}: {n} connections"),
            Err(e) => format!("CLIENT KILL TYPE pubsub for {lock} (slot {slot}) failed: {e}"),
        };
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        format!("{kill}; then {}", self.failover(lock).await)
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
