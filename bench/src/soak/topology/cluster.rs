//! `cluster`: the kit's [`Cluster`](redbell_testkit::Cluster)
//! (`scripts/redis/cluster.sh` on free ports: three primaries, one replica
//! each). Faults: `CLUSTER FAILOVER` on the replica of the shard that owns
//! a lock's slot, the same right after `CLIENT KILL TYPE pubsub` on that
//! shard (the failover meets the hubs' recovery of their subscriptions),
//! and a migration of a lock's slot to another primary; each reported as
//! a line, whether it worked or not.
//!
//! A failover is over once a client's write to the lock's slot goes
//! through again ([`Cluster::writable`]), not when the replica first says
//! it is a master: the old primary pauses its clients' writes from the
//! moment its replica asks for a manual failover until it learns of the
//! new primary, or for the manual-failover timeout (5 s) if that never
//! comes. And a replica that ran an election in the last
//! [`ELECTION_RETRY`] is not asked again (the fault is skipped): Redis
//! Cluster reuses that election's state for a new `CLUSTER FAILOVER` in
//! that time, so within 2 × the node timeout the replica says it won at
//! once with the old, stale epoch, reports the master role for a few
//! milliseconds and turns back into a replica, and later the attempt
//! expires; either way no failover happens and the old primary holds its
//! clients' writes paused for the 5 s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redbell_testkit::{connect, node_url, poll_until, slot_of};

use super::kit_failure;
use crate::fail::Failure;

/// How long after a replica's election Redis Cluster starts a new one for
/// it: 4 × the node timeout (`--cluster-node-timeout 2000` in
/// `scripts/redis/cluster.sh`; `auth_retry_time` in Redis), and a second's
/// margin for the time the request takes to reach it.
pub const ELECTION_RETRY: Duration = Duration::from_millis(4 * 2000 + 1000);

/// How long a probe write may take: a node that has not answered by then
/// is holding writes (paused).
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// How often a probe write is tried, and for how long at most.
const PROBE_EVERY: Duration = Duration::from_millis(20);
const WRITABLE_WITHIN: Duration = Duration::from_secs(30);

/// The cluster of one run.
pub struct Cluster {
    kit: redbell_testkit::Cluster,
    /// The nodes' URLs, for the workers.
    pub urls: Vec<String>,
    /// When each replica (by port) was last asked to fail over.
    elections: HashMap<u16, Instant>,
}

impl Cluster {
    pub async fn start() -> Result<Cluster, Failure> {
        let kit = redbell_testkit::Cluster::start()
            .await
            .map_err(kit_failure)?;
        let urls = kit.urls();
        Ok(Cluster {
            kit,
            urls,
            elections: HashMap::new(),
        })
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

    /// The primary of `lock`'s shard and its replica, if the replica may be
    /// asked to fail over (`Err`: a line saying why not).
    async fn shard(&self, lock: &str) -> Result<(u16, u16), String> {
        let slot = slot_of(lock);
        let step = async {
            let owner = self.kit.owner(slot).await?.port;
            let replica = self.kit.replica_of(owner).await?;
            Ok::<_, redbell_testkit::Error>((owner, replica))
        };
        let (owner, replica) = step
            .await
            .map_err(|e| format!("CLUSTER FAILOVER for {lock} (slot {slot}) failed: {e}"))?;
        if let Some(at) = self.elections.get(&replica)
            && at.elapsed() < ELECTION_RETRY
        {
            return Err(format!(
                "skipped: the replica {replica} of {owner} (slot {slot} of {lock}) was asked to \
                 fail over {} ms ago, under {} ms, before Redis Cluster would hold a new election",
                at.elapsed().as_millis(),
                ELECTION_RETRY.as_millis()
            ));
        }
        Ok((owner, replica))
    }

    /// `CLUSTER FAILOVER` on the replica of `lock`'s shard; returns its
    /// line once a write to the slot goes through again, and whether it
    /// was injected.
    pub async fn failover(&mut self, lock: &str) -> (String, bool) {
        match self.shard(lock).await {
            Ok((owner, replica)) => (self.promote(lock, owner, replica).await, true),
            Err(line) => (line, false),
        }
    }

    /// `CLUSTER FAILOVER` on `replica`, then the wait for writes to the
    /// slot of `lock` (on `owner` before) to go through again.
    async fn promote(&mut self, lock: &str, owner: u16, replica: u16) -> String {
        let slot = slot_of(lock);
        let started = Instant::now();
        self.elections.insert(replica, started);
        let promoted = match self.kit.promote(replica).await {
            Ok(took) => format!(
                "CLUSTER FAILOVER: {replica} (slot {slot} of {lock}) replaced {owner}, \
                 master in {} ms",
                took.as_millis()
            ),
            Err(e) => format!("CLUSTER FAILOVER for {lock} (slot {slot}) failed: {e}"),
        };
        let writable = if writable(lock, owner).await {
            format!(
                "writes went through after {} ms",
                started.elapsed().as_millis()
            )
        } else {
            format!("writes still held after {} s", WRITABLE_WITHIN.as_secs())
        };
        format!("{promoted}; {writable}")
    }

    /// `CLIENT KILL TYPE pubsub` on the primary of `lock`'s shard, then
    /// 150 ms later (the hubs are recovering their subscriptions there)
    /// `CLUSTER FAILOVER` on its replica; returns its line once a write to
    /// the slot goes through again, and whether it was injected.
    pub async fn kill_then_failover(&mut self, lock: &str) -> (String, bool) {
        let (owner, replica) = match self.shard(lock).await {
            Ok(shard) => shard,
            Err(line) => return (line, false),
        };
        let killed = async {
            let mut conn = connect(&node_url(owner)).await?;
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query_async::<i64>(&mut conn)
                .await
                .map_err(|e| redbell_testkit::Error::new(e.to_string()))
        };
        let kill = match killed.await {
            Ok(n) => format!("CLIENT KILL TYPE pubsub on {owner}: {n} connections"),
            Err(e) => format!("CLIENT KILL TYPE pubsub on {owner} ({lock}) failed: {e}"),
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        (
            format!("{kill}; then {}", self.promote(lock, owner, replica).await),
            true,
        )
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

/// Whether a client's write to `lock`'s slot goes through within
/// [`WRITABLE_WITHIN`]: sent to `port` (where the clients' views of the
/// cluster pointed), accepted there or redirected (`MOVED`) to a node that
/// accepts it. The write is a `SET` of a probe key in the slot, outside
/// the lock's keys, that expires after a second.
async fn writable(lock: &str, port: u16) -> bool {
    let key = format!("soak-probe:{{{lock}}}");
    poll_until(WRITABLE_WITHIN, PROBE_EVERY, || {
        let key = key.clone();
        async move {
            tokio::time::timeout(PROBE_TIMEOUT, write_through(&key, port))
                .await
                .unwrap_or(false)
        }
    })
    .await
}

/// `SET key` on `port`, following up to two redirections.
async fn write_through(key: &str, mut port: u16) -> bool {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(1).arg("PX").arg(1000);
    for _ in 0..3 {
        let Ok(mut conn) = connect(&node_url(port)).await else {
            return false;
        };
        match cmd.query_async::<()>(&mut conn).await {
            Ok(()) => return true,
            Err(e) => {
                let next = e
                    .redirect_node()
                    .and_then(|(addr, _)| addr.rsplit_once(':')?.1.parse().ok());
                match next {
                    Some(p) => port = p,
                    None => return false,
                }
            }
        }
    }
    false
}
