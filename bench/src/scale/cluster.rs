//! Part 4, the per-shard cost on a Redis Cluster: a local cluster of three
//! primaries and three replicas (`scripts/redis/cluster.sh`, started by
//! the test kit on free ports, stopped at the end).
//!
//! 1. Each primary's idle CPU (cluster bus, replication pings) over a
//!    window with no client, per second: taken out of the windows below.
//! 2. The part-2 workloads (`names.rs`), uncontended lock+unlock and
//!    two-way contended hand-offs, over [`NAMES`] names, first on the
//!    single server of the run, then through a cluster client: each
//!    primary's CPU delta ÷ the acquisitions whose names hash to its slots
//!    (the names' slots are computed, `slot_of`). Redis CPU per operation
//!    per shard, beside one server's.
//! 3. The spread: the names per primary (computed) and the fence keys each
//!    primary holds after the run (counted, `SCAN`): within ±10 % of even.
//! 4. The hub: one client holds [`WAITED`] locks under a fixed lease;
//!    another parks one task on each; on each primary, that client's
//!    connections (`CLIENT LIST`, the ids that were not there before it
//!    connected), those subscribed to shard channels (`ssub`), and its
//!    channels; `PUBSUB SHARDNUMSUB` of each channel must be 1.

use std::time::{Duration, Instant};

use redbell_testkit::{Cluster, node_url, slot_of};
use serde::{Deserialize, Serialize};

use super::names::{self, NamesRow};
use super::server::Server;
use crate::fail::{EX_FAILURE, Failure};

/// Names the workloads spread over.
pub const NAMES: u32 = 10_000;
/// Locks the hub's waiter client parks on.
const WAITED: u32 = 300;
/// The fixed lease of the held locks (no renewals while parked).
const HOLD_LEASE: Duration = Duration::from_secs(300);

/// The part's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterRow {
    pub names: u32,
    /// Acquisitions per workload.
    pub ops: u64,
    /// One server, the same workloads (`names.rs`'s rows).
    pub single_uncontended: NamesRow,
    pub single_contended: NamesRow,
    /// Acquisitions per second through the cluster (all shards on this
    /// machine's cores), uncontended and contended.
    pub cluster_uncontended_per_s: f64,
    pub cluster_contended_per_s: f64,
    pub shards: Vec<Shard>,
    /// Locks the waiter client waited on, in all.
    pub waited: u32,
    /// Channels whose `PUBSUB SHARDNUMSUB` was not 1 while parked.
    pub channels_not_one: u64,
}

/// One primary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shard {
    pub port: u16,
    /// Slots served.
    pub slots: u32,
    /// Of the run's names, those in its slots, and the fence keys it holds
    /// after the uncontended workload.
    pub names: u32,
    pub fence_keys: u64,
    /// CPU while idle, % of one core.
    pub idle_cpu_pct: f64,
    /// Acquisitions that landed on it, and its Redis CPU µs per
    /// acquisition (idle CPU taken out).
    pub uncontended_ops: u64,
    pub uncontended_cpu_us: f64,
    pub contended_ops: u64,
    pub contended_cpu_us: f64,
    /// The waiter client: locks waited on in its slots, its connections,
    /// those with shard subscriptions, and its shard channels.
    pub waited: u32,
    pub waiter_connections: u64,
    pub waiter_subscribed_connections: u64,
    pub waiter_channels: u64,
}

/// Runs the part: starts a cluster, measures, stops it.
pub async fn row(url: &str, srv: &mut Server, run: &str, ops: u64) -> Result<ClusterRow, Failure> {
    let fail = |what: &str, e: redbell_testkit::Error| {
        Failure::new(EX_FAILURE, format!("cluster: {what}: {e}"))
    };
    eprintln!("scale: single server, {NAMES} names");
    let single_uncontended = names::row(url, srv, &format!("{run}s"), false, NAMES, ops).await?;
    let single_contended = names::row(url, srv, &format!("{run}s"), true, NAMES, ops / 2).await?;
    eprintln!("scale: starting a local cluster");
    let mut cluster = Cluster::start()
        .await
        .map_err(|e| fail("cannot start", e))?;
    let result = measure(&cluster, run, ops, single_uncontended, single_contended).await;
    let _ = cluster.stop().await;
    result
}

async fn measure(
    cluster: &Cluster,
    run: &str,
    ops: u64,
    single_uncontended: NamesRow,
    single_contended: NamesRow,
) -> Result<ClusterRow, Failure> {
    let urls = cluster.urls();
    let primaries = cluster
        .primaries()
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("cluster: {e}")))?;
    let mut nodes = Vec::new();
    for p in &primaries {
        nodes.push(Server::connect(&node_url(p.port)).await?);
    }
    let shard_of = |name: &str| {
        let slot = slot_of(name);
        primaries.iter().position(|p| p.serves(slot)).unwrap_or(0)
    };
    // 1. Idle CPU.
    let idle = Duration::from_secs(3);
    let cpu0 = cpus(&mut nodes).await?;
    tokio::time::sleep(idle).await;
    let cpu1 = cpus(&mut nodes).await?;
    let idle_us_per_s: Vec<f64> = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(a, b)| (b - a) / idle.as_secs_f64())
        .collect();
    let connect = || async {
        redbell::Client::cluster(&urls)
            .await
            .map_err(|e| Failure::lock(&urls[0], "cannot connect to the cluster", &e))
    };
    // 2. The workloads.
    let mut per_s = [0.0; 2];
    let mut landed = [vec![0u64; nodes.len()], vec![0u64; nodes.len()]];
    let mut cpu_per_op = [vec![0.0; nodes.len()], vec![0.0; nodes.len()]];
    let bases = [format!("scale-{run}-clu"), format!("scale-{run}-clc")];
    for (w, contended) in [false, true].into_iter().enumerate() {
        let n_ops = if contended { ops / 2 } else { ops };
        let base = &bases[w];
        for (i, count) in names::acquisitions(contended, NAMES, n_ops)
            .iter()
            .enumerate()
        {
            landed[w][shard_of(&format!("{base}-{i}"))] += count;
        }
        let a = connect().await?;
        let b = connect().await?;
        let cpu0 = cpus(&mut nodes).await?;
        let started = Instant::now();
        let done = if contended {
            names::contend(&urls[0], &a, &b, base, NAMES, n_ops).await?
        } else {
            names::uncontended(&urls[0], &a, base, NAMES, n_ops).await?
        };
        let secs = started.elapsed().as_secs_f64();
        let cpu1 = cpus(&mut nodes).await?;
        let _ = a.shutdown().await;
        let _ = b.shutdown().await;
        per_s[w] = done as f64 / secs;
        for s in 0..nodes.len() {
            let used = cpu1[s] - cpu0[s] - idle_us_per_s[s] * secs;
            cpu_per_op[w][s] = used / landed[w][s].max(1) as f64;
        }
        eprintln!(
            "scale: cluster {} {:?}",
            if contended {
                "contended"
            } else {
                "uncontended"
            },
            cpu_per_op[w]
        );
    }
    // 3. The spread: names per primary, and the fence keys each holds.
    let mut names_on = vec![0u32; nodes.len()];
    for i in 0..NAMES {
        names_on[shard_of(&format!("{}-{i}", bases[0]))] += 1;
    }
    let mut fence_keys = Vec::new();
    for node in &mut nodes {
        fence_keys.push(
            node.count_keys(&format!("redbell:{{{}-*:fence", bases[0]))
                .await?,
        );
    }
    // 4. The hub of a client parked on WAITED locks.
    let base = format!("scale-{run}-clw");
    let holder = connect().await?;
    let mut guards = Vec::new();
    for i in 0..WAITED {
        let g = holder
            .mutex(&format!("{base}-{i}"))
            .with_lease(HOLD_LEASE)
            .lock()
            .await
            .map_err(|e| Failure::lock(&urls[0], "holder", &e))?;
        guards.push(g);
    }
    let mut before = Vec::new();
    for node in &mut nodes {
        before.push(
            node.clients()
                .await?
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>(),
        );
    }
    let waiter = connect().await?;
    let mut parked = Vec::new();
    for i in 0..WAITED {
        let m = waiter.mutex(&format!("{base}-{i}"));
        parked.push(tokio::spawn(async move { m.lock().await.map(drop) }));
    }
    // Parked: every lock's channel has its subscriber (or give up after 30 s).
    let channels: Vec<(usize, String)> = (0..WAITED)
        .map(|i| {
            let name = format!("{base}-{i}");
            (shard_of(&name), name)
        })
        .collect();
    let started = Instant::now();
    let mut not_one = u64::from(WAITED);
    while started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        not_one = 0;
        for (s, name) in &channels {
            if nodes[*s]
                .shard_subscribers(&format!("redbell:{{{name}}}:wake:*"))
                .await?
                != 1
            {
                not_one += 1;
            }
        }
        if not_one == 0 {
            break;
        }
    }
    let mut waited_on = vec![0u32; nodes.len()];
    for (s, _) in &channels {
        waited_on[*s] += 1;
    }
    let mut shards = Vec::new();
    for (s, node) in nodes.iter_mut().enumerate() {
        let mine: Vec<_> = node
            .clients()
            .await?
            .into_iter()
            .filter(|c| !before[s].contains(&c.id))
            .collect();
        let p = &primaries[s];
        shards.push(Shard {
            port: p.port,
            slots: p.slots.iter().map(|(a, b)| u32::from(b - a) + 1).sum(),
            names: names_on[s],
            fence_keys: fence_keys[s],
            idle_cpu_pct: idle_us_per_s[s] / 1e4,
            uncontended_ops: landed[0][s],
            uncontended_cpu_us: cpu_per_op[0][s],
            contended_ops: landed[1][s],
            contended_cpu_us: cpu_per_op[1][s],
            waited: waited_on[s],
            waiter_connections: mine.len() as u64,
            waiter_subscribed_connections: mine.iter().filter(|c| c.channels > 0).count() as u64,
            waiter_channels: mine.iter().map(|c| c.channels).sum(),
        });
    }
    drop(guards);
    for task in parked {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
    let _ = waiter.shutdown().await;
    let _ = holder.shutdown().await;
    Ok(ClusterRow {
        names: NAMES,
        ops,
        single_uncontended,
        single_contended,
        cluster_uncontended_per_s: per_s[0],
        cluster_contended_per_s: per_s[1],
        shards,
        waited: WAITED,
        channels_not_one: not_one,
    })
}

async fn cpus(nodes: &mut [Server]) -> Result<Vec<f64>, Failure> {
    let mut out = Vec::new();
    for node in nodes {
        out.push(node.cpu_us().await?);
    }
    Ok(out)
}
