//! Part 4, the per-shard cost on a Redis Cluster: a local cluster of three
//! primaries and three replicas (`scripts/redis/cluster.sh`, started by
//! the test kit on free ports, stopped at the end).
//!
//! 1. Each primary's idle CPU (cluster bus, replication pings) over a
//!    window with no client, per second: taken out of the windows below.
//! 2. The part-2 workloads (`names.rs`), uncontended lock+unlock and
//!    two-way contended hand-offs, over [`NAMES`] names, on the run's
//!    server, on a fresh server with one replica (as each shard has), and
//!    through a cluster client, in turn, `--rounds` times (medians: the
//!    machine is shared). On the cluster, each primary's CPU delta ÷ the
//!    acquisitions whose names hash to its slots (computed, `slot_of`):
//!    Redis CPU per operation per shard, beside one server's; and the
//!    commands per acquisition and µs per script call, which split it.
//! 3. The spread: the names per primary (computed) and the fence keys each
//!    primary holds after the run (counted, `SCAN`): within ±10 % of even.
//! 4. The hub: one client holds [`WAITED`] locks under a fixed lease;
//!    another parks one task on each; on each primary, that client's
//!    connections (`CLIENT LIST`, the ids that were not there before it
//!    connected), those subscribed to shard channels (`ssub`), and its
//!    channels; `PUBSUB SHARDNUMSUB` of each channel must be 1.

use std::time::{Duration, Instant};

use redbell_testkit::{Cluster, ServerOptions, node_url, slot_of};
use serde::{Deserialize, Serialize};

use super::callgrind;
use super::names::{self, NamesRow};
use super::server::{Server, script_time};
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
    /// Acquisitions per uncontended workload (contended: half), and the
    /// rounds (medians).
    pub ops: u64,
    #[serde(default)]
    pub rounds: u32,
    /// One server, the same workloads (`names.rs`'s rows), and the µs
    /// its scripts ran per call (`INFO commandstats`).
    pub single_uncontended: NamesRow,
    pub single_contended: NamesRow,
    pub single_script_us: [f64; 2],
    /// The same on a fresh server of its own with one replica attached
    /// (as each shard has): what feeding a replica adds.
    pub replicated: Option<ReplicatedRow>,
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

/// The workloads on a server with a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicatedRow {
    pub uncontended: NamesRow,
    pub contended: NamesRow,
    pub script_us: [f64; 2],
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
    /// Commands per acquisition (those inside scripts included) and the
    /// µs a script call ran, uncontended and contended.
    pub cmds_per_op: [f64; 2],
    pub script_us: [f64; 2],
    /// The waiter client: locks waited on in its slots, its connections,
    /// those with shard subscriptions, and its shard channels.
    pub waited: u32,
    pub waiter_connections: u64,
    pub waiter_subscribed_connections: u64,
    pub waiter_channels: u64,
    /// Under Callgrind (the counted part only): instructions and simulated
    /// last-level cache misses per acquisition, uncontended and contended.
    #[serde(default)]
    pub counted: Option<[[f64; 2]; 2]>,
}

/// Runs the part: starts a server with a replica and a cluster, measures
/// `rounds` rounds (each workload on the run's server, the replicated one
/// and the cluster in turn; medians), stops them.
pub async fn row(
    url: &str,
    srv: &mut Server,
    run: &str,
    ops: u64,
    rounds: u32,
) -> Result<ClusterRow, Failure> {
    let fail = |what: &str, e: redbell_testkit::Error| {
        Failure::new(EX_FAILURE, format!("cluster: {what}: {e}"))
    };
    eprintln!("scale: starting a server with a replica, and a local cluster");
    let pair = Replicated::start().await?;
    let mut cluster = Cluster::start()
        .await
        .map_err(|e| fail("cannot start", e))?;
    let result = measure(url, srv, &pair, &cluster, run, ops, rounds.max(1)).await;
    let _ = cluster.stop().await;
    result
}

/// A workload's figures on one server: its row and µs per script call.
async fn on_server(
    url: &str,
    srv: &mut Server,
    tag: &str,
    contended: bool,
    ops: u64,
) -> Result<(NamesRow, f64), Failure> {
    let row = names::row(url, srv, tag, contended, NAMES, ops).await?;
    let (calls, us) = script_time(&srv.info("commandstats").await?);
    Ok((row, us / calls.max(1) as f64))
}

/// The round whose Redis CPU per operation is the median.
fn median_row(mut v: Vec<(NamesRow, f64)>) -> (NamesRow, f64) {
    v.sort_by(|x, y| x.0.cpu_us_per_op.total_cmp(&y.0.cpu_us_per_op));
    let mid = v.len() / 2;
    v.swap_remove(mid)
}

/// The median (the upper of the two middle values) of `v`, 0 when empty.
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A primary's work per second while no client sends anything (cluster
/// bus, replication pings): CPU µs, and instructions and misses when
/// counted. Taken out of each workload's figures.
struct Idle {
    cpu_us: f64,
    counts: [f64; 2],
}

/// One cluster workload's figures, per primary.
struct Workload {
    per_s: f64,
    landed: Vec<u64>,
    cpu_per_op: Vec<f64>,
    cmds_per_op: Vec<f64>,
    script_us: Vec<f64>,
    counted: Vec<Option<[f64; 2]>>,
}

#[allow(clippy::too_many_arguments)]
async fn on_cluster(
    urls: &[String],
    nodes: &mut [Server],
    shard_of: &dyn Fn(&str) -> usize,
    idle: &[Idle],
    base: &str,
    contended: bool,
    ops: u64,
) -> Result<Workload, Failure> {
    let connect = || async {
        redbell::Client::cluster(urls)
            .await
            .map_err(|e| Failure::lock(&urls[0], "cannot connect to the cluster", &e))
    };
    let mut landed = vec![0u64; nodes.len()];
    for (i, count) in names::acquisitions(contended, NAMES, ops)
        .iter()
        .enumerate()
    {
        landed[shard_of(&format!("{base}-{i}"))] += count;
    }
    let a = connect().await?;
    let b = connect().await?;
    for node in nodes.iter_mut() {
        node.reset_stats().await?;
    }
    let cpu0 = cpus(nodes).await?;
    for node in nodes.iter_mut() {
        let _ = callgrind::take(node).await;
    }
    let started = Instant::now();
    let done = if contended {
        names::contend(&urls[0], &a, &b, base, NAMES, ops).await?
    } else {
        names::uncontended(&urls[0], &a, base, NAMES, ops).await?
    };
    let secs = started.elapsed().as_secs_f64();
    let mut counts = Vec::new();
    for node in nodes.iter_mut() {
        counts.push(callgrind::take(node).await);
    }
    let cpu1 = cpus(nodes).await?;
    let mut w = Workload {
        per_s: done as f64 / secs,
        cpu_per_op: Vec::new(),
        cmds_per_op: Vec::new(),
        script_us: Vec::new(),
        counted: Vec::new(),
        landed,
    };
    for (s, node) in nodes.iter_mut().enumerate() {
        let n = w.landed[s].max(1) as f64;
        let total: u64 = node.calls().await?.iter().map(|(_, c)| c).sum();
        w.cmds_per_op.push(total as f64 / n);
        let (calls, us) = script_time(&node.info("commandstats").await?);
        w.script_us.push(us / calls.max(1) as f64);
        w.cpu_per_op
            .push((cpu1[s] - cpu0[s] - idle[s].cpu_us * secs) / n);
        w.counted.push(counts[s].map(|c| {
            let [i, m] = c.per_op(w.landed[s]);
            [
                i - idle[s].counts[0] * secs / n,
                m - idle[s].counts[1] * secs / n,
            ]
        }));
    }
    let _ = a.shutdown().await;
    let _ = b.shutdown().await;
    Ok(w)
}

async fn measure(
    url: &str,
    srv: &mut Server,
    pair: &Replicated,
    cluster: &Cluster,
    run: &str,
    ops: u64,
    rounds: u32,
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
    let connect = || async {
        redbell::Client::cluster(&urls)
            .await
            .map_err(|e| Failure::lock(&urls[0], "cannot connect to the cluster", &e))
    };
    // 1. Idle CPU (and instructions, when counted).
    let idle = Duration::from_secs(3);
    let cpu0 = cpus(&mut nodes).await?;
    for node in nodes.iter_mut() {
        let _ = callgrind::take(node).await;
    }
    tokio::time::sleep(idle).await;
    let mut idle_counts = Vec::new();
    for node in nodes.iter_mut() {
        idle_counts.push(callgrind::take(node).await.unwrap_or_default());
    }
    let cpu1 = cpus(&mut nodes).await?;
    let idle_per_s: Vec<Idle> = cpu0
        .iter()
        .zip(&cpu1)
        .zip(&idle_counts)
        .map(|((a, b), c)| Idle {
            cpu_us: (b - a) / idle.as_secs_f64(),
            counts: [
                c.instructions as f64 / idle.as_secs_f64(),
                c.ll_misses as f64 / idle.as_secs_f64(),
            ],
        })
        .collect();
    let idle_us_per_s: Vec<f64> = idle_per_s.iter().map(|i| i.cpu_us).collect();
    // 2. The workloads, the three servers in turn, `rounds` times.
    let purl = pair.primary.url();
    let mut psrv = Server::connect(&purl).await?;
    let mut single: [Vec<(NamesRow, f64)>; 2] = Default::default();
    let mut repl: [Vec<(NamesRow, f64)>; 2] = Default::default();
    let mut clu: [Vec<Workload>; 2] = Default::default();
    let base = |round: u32, contended: bool| {
        format!("scale-{run}-cl{round}{}", if contended { 'c' } else { 'u' })
    };
    for round in 0..rounds {
        for (w, contended) in [false, true].into_iter().enumerate() {
            let n = if contended { ops / 2 } else { ops };
            eprintln!(
                "scale: round {round}, contended {contended}: one server, with a replica, cluster"
            );
            let tag = format!("{run}s{round}");
            single[w].push(on_server(url, srv, &tag, contended, n).await?);
            let tag = format!("{run}r{round}");
            repl[w].push(on_server(&purl, &mut psrv, &tag, contended, n).await?);
            let b = base(round, contended);
            clu[w].push(
                on_cluster(&urls, &mut nodes, &shard_of, &idle_per_s, &b, contended, n).await?,
            );
        }
    }
    let [su, sc] = single.map(median_row);
    let [ru, rc] = repl.map(median_row);
    let per_shard = |w: &[Workload], f: fn(&Workload) -> &Vec<f64>, s: usize| {
        median(w.iter().map(|x| f(x)[s]).collect())
    };
    let bases = [base(0, false)];
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
            uncontended_ops: clu[0][0].landed[s],
            uncontended_cpu_us: per_shard(&clu[0], |w| &w.cpu_per_op, s),
            contended_ops: clu[1][0].landed[s],
            contended_cpu_us: per_shard(&clu[1], |w| &w.cpu_per_op, s),
            cmds_per_op: [
                per_shard(&clu[0], |w| &w.cmds_per_op, s),
                per_shard(&clu[1], |w| &w.cmds_per_op, s),
            ],
            script_us: [
                per_shard(&clu[0], |w| &w.script_us, s),
                per_shard(&clu[1], |w| &w.script_us, s),
            ],
            waited: waited_on[s],
            waiter_connections: mine.len() as u64,
            waiter_subscribed_connections: mine.iter().filter(|c| c.channels > 0).count() as u64,
            waiter_channels: mine.iter().map(|c| c.channels).sum(),
            counted: clu[0][0].counted[s]
                .zip(clu[1][0].counted[s])
                .map(|(u, c)| [u, c]),
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
        rounds,
        single_uncontended: su.0,
        single_contended: sc.0,
        single_script_us: [su.1, sc.1],
        replicated: Some(ReplicatedRow {
            uncontended: ru.0,
            contended: rc.0,
            script_us: [ru.1, rc.1],
        }),
        cluster_uncontended_per_s: median(clu[0].iter().map(|w| w.per_s).collect()),
        cluster_contended_per_s: median(clu[1].iter().map(|w| w.per_s).collect()),
        shards,
        waited: WAITED,
        channels_not_one: not_one,
    })
}

/// A fresh server with one replica attached, both stopped on drop.
struct Replicated {
    primary: redbell_testkit::Server,
    _replica: redbell_testkit::Server,
}

impl Replicated {
    async fn start() -> Result<Replicated, Failure> {
        let fail = |what: &str, e: redbell_testkit::Error| {
            Failure::new(EX_FAILURE, format!("replicated server: {what}: {e}"))
        };
        let primary = redbell_testkit::Server::start(ServerOptions::default())
            .await
            .map_err(|e| fail("cannot start", e))?;
        let replica = redbell_testkit::Server::start(ServerOptions {
            args: vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port().to_string(),
            ],
            ..ServerOptions::default()
        })
        .await
        .map_err(|e| fail("cannot start the replica", e))?;
        let mut rsrv = Server::connect(&replica.url()).await?;
        let started = Instant::now();
        while !rsrv
            .info("replication")
            .await?
            .contains("master_link_status:up")
        {
            if started.elapsed() > Duration::from_secs(20) {
                return Err(Failure::new(EX_FAILURE, "the replica did not sync in 20 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Replicated {
            primary,
            _replica: replica,
        })
    }
}

async fn cpus(nodes: &mut [Server]) -> Result<Vec<f64>, Failure> {
    let mut out = Vec::new();
    for node in nodes {
        out.push(node.cpu_us().await?);
    }
    Ok(out)
}
