//! Redis Cluster: locks and targeted wake-ups across a real local cluster of
//! three primaries and three replicas, through failovers (graceful and
//! SIGKILL) and a slot migration.
//!
//! The harness at the top of this file:
//!
//! - [`Cluster`] runs `scripts/redis/cluster.sh start BASE` on a random base
//!   port whose six ports (BASE..BASE+5) and cluster bus ports (+10000) are
//!   free, so every test gets a fresh cluster of its own; on drop it runs
//!   `cluster.sh stop BASE` (printing the nodes' log tails and keeping their
//!   directory when the test failed). It finds which primary owns a slot,
//!   which replica follows it, picks lock names whose slot lands on a given
//!   primary, SIGKILLs a node, runs `CLUSTER FAILOVER` and migrates a slot
//!   (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE` of every key, `SETSLOT
//!   NODE` on every primary), each time waiting until the cluster is stable
//!   again: every live node reports `cluster_state:ok` and all 16384 slots
//!   ok, all live nodes share one view (nodes, roles, slots; a killed node
//!   flagged `fail`, nothing `fail?`), and every live replica's link is up.
//! - [`Monitor`] records what one node executes (`MONITOR`), to show that a
//!   lock's traffic stays in its shard.
//!
//! Every key and channel of lock `N` contains the hash tag `{N}`, so its
//! slot is the CRC16 of `N` (checked against `CLUSTER KEYSLOT`), and a
//! MONITOR line touching the lock in any way contains `{N}`.
//!
//! The measured numbers (wake-up latencies, failover and recovery times) are
//! printed to stderr: `cargo test --test cluster -- --nocapture`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rand::Rng;
use redbell::Client;
use redbell_integration_tests::{Monitor, hash_tag, lock_key, recovering, retryable, waiters_key};
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Value};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

// ------------------------------------------------------------- helpers

/// The loopback URL of `port`.
fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// A name no other test (or earlier run) uses: `what-<uuid>`.
fn unique(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

/// CRC16 (XMODEM), the hash of Redis Cluster's key slots: written here
/// again on purpose, as an oracle independent of the library's, and checked
/// against the server's `CLUSTER KEYSLOT` by the exclusion test.
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
fn slot_of(name: &str) -> u16 {
    crc16(name.as_bytes()) % 16384
}

/// A plain connection to one node.
async fn conn(port: u16) -> MultiplexedConnection {
    redis::Client::open(url(port))
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to node {port}: {e}"))
}

/// One command to node `port` on a fresh connection; `None` when the node
/// cannot be reached, answers with an error, or takes over 2 s.
async fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    timeout(Duration::from_secs(2), async {
        let client = redis::Client::open(url(port)).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        cmd.query_async(&mut conn).await.ok()
    })
    .await
    .ok()
    .flatten()
}

/// One command to node `port` that must succeed.
async fn must<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut c = conn(port).await;
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("node {port}: {cmd:?}: {e}"))
}

/// A read on a node that may be a replica (`READONLY` first, on the same
/// connection).
async fn read<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut c = conn(port).await;
    let _: () = redis::cmd("READONLY")
        .query_async(&mut c)
        .await
        .expect("READONLY");
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("node {port}: {cmd:?}: {e}"))
}

/// `GET key` on a node (replica or primary).
async fn get(port: u16, key: &str) -> Option<String> {
    read(port, redis::cmd("GET").arg(key)).await
}

/// `PTTL key` on a node.
async fn pttl(port: u16, key: &str) -> i64 {
    read(port, redis::cmd("PTTL").arg(key)).await
}

/// `ZCARD key` on a node: how many entries a waiter queue holds.
async fn zcard(port: u16, key: &str) -> i64 {
    read(port, redis::cmd("ZCARD").arg(key)).await
}

/// One field of a `field:value` listing (`INFO`, `CLUSTER INFO`).
fn field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (n, v) = line.trim_end().split_once(':')?;
        (n == name).then(|| v.to_owned())
    })
}

/// One field of `CLUSTER INFO` on a node.
async fn cluster_info(port: u16, name: &str) -> Option<String> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("INFO")).await?;
    field(&text, name)
}

/// One field of `INFO replication` on a node.
async fn replication(port: u16, name: &str) -> Option<String> {
    let text: String = query(port, redis::cmd("INFO").arg("replication")).await?;
    field(&text, name)
}

/// Polls `check` every 50 ms for up to `within`; whether it ever held.
async fn poll<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// How many subscriptions the nodes `ports` hold to sharded channels of
/// lock `name` (`PUBSUB SHARDCHANNELS *{name}*`, then `SHARDNUMSUB`).
async fn shard_subscribers(ports: &[u16], name: &str) -> i64 {
    let mut total = 0;
    for &port in ports {
        let Some(channels): Option<Vec<String>> = query(
            port,
            redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .arg(format!("*{}*", hash_tag(name))),
        )
        .await
        else {
            continue;
        };
        if channels.is_empty() {
            continue;
        }
        let counts: Option<Vec<Value>> =
            query(port, redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channels)).await;
        total += counts
            .unwrap_or_default()
            .iter()
            .skip(1)
            .step_by(2)
            .map(|v| match v {
                Value::Int(n) => *n,
                _ => 0,
            })
            .sum::<i64>();
    }
    total
}

/// A cluster client on the given node URLs.
async fn cluster_client(urls: &[String]) -> Client {
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster(&urls)
        .await
        .unwrap_or_else(|e| panic!("Client::cluster({urls:?}): {e}"))
}

/// A cluster client with a renewed lease of `lease`, renewed every `every`.
async fn cluster_client_with(urls: &[String], lease: Duration, every: Duration) -> Client {
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster_builder(&urls)
        .default_lease(lease)
        .renew_every(every)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("Client::cluster_builder({urls:?}): {e}"))
}

/// What a waiter task reports.
#[derive(Debug)]
struct Got {
    /// When `lock()` returned the guard.
    at: Instant,
    fence: u64,
    /// Retryable errors from `lock()` or `unlock()` before it got through.
    errors: Vec<(Instant, String)>,
}

/// A task that waits for `mutex` (retrying retryable errors), checks that
/// nobody else is inside, holds it 50 ms and unlocks.
fn spawn_waiter(label: String, mutex: redbell::Mutex, inside: Arc<AtomicUsize>) -> JoinHandle<Got> {
    tokio::spawn(async move {
        let mut errors = Vec::new();
        let guard = loop {
            match mutex.lock().await {
                Ok(g) => break g,
                Err(e) if retryable(&e) => {
                    errors.push((Instant::now(), e.to_string()));
                    sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{label}: {e}"),
            }
        };
        let at = Instant::now();
        assert_eq!(
            inside.fetch_add(1, Ordering::SeqCst),
            0,
            "{label} got the lock while another holder was inside"
        );
        sleep(Duration::from_millis(50)).await;
        inside.fetch_sub(1, Ordering::SeqCst);
        let fence = guard.fence();
        match guard.unlock().await {
            Ok(()) => {}
            Err(e) if retryable(&e) => errors.push((Instant::now(), format!("unlock: {e}"))),
            Err(e) => panic!("{label}'s unlock: {e}"),
        }
        Got { at, fence, errors }
    })
}

/// Waits (up to `within`) for every waiter task; their reports, in order.
async fn join_all(waiters: Vec<JoinHandle<Got>>, within: Duration) -> Vec<Got> {
    try_join_all(waiters, within)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Waits (up to `within`) for every waiter task; their reports, in order,
/// or what went wrong (the tasks left are aborted then).
async fn try_join_all(
    mut waiters: Vec<JoinHandle<Got>>,
    within: Duration,
) -> Result<Vec<Got>, String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut failure = None;
    for (i, w) in waiters.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, w).await {
            Ok(Ok(g)) => got.push(g),
            Ok(Err(e)) => failure = Some(format!("waiter {i}: {e}")),
            Err(_) => {
                failure = Some(format!(
                    "waiter {i} did not get the lock within {within:?} ({} others did)",
                    got.len()
                ));
            }
        }
        if failure.is_some() {
            break;
        }
    }
    match failure {
        None => Ok(got),
        Some(e) => {
            for w in &waiters {
                w.abort();
            }
            Err(e)
        }
    }
}

/// (first, last) of the waiters' acquisition times after `since`.
fn spread(got: &[Got], since: Instant) -> (Duration, Duration) {
    let times = got.iter().map(|g| g.at.saturating_duration_since(since));
    (times.clone().min().unwrap(), times.max().unwrap())
}

/// All retryable errors the waiters saw, as times after `since`.
fn waiter_errors(got: &[Got], since: Instant) -> Vec<(Duration, String)> {
    let mut errors: Vec<(Duration, String)> = got
        .iter()
        .flat_map(|g| &g.errors)
        .map(|(at, e)| (at.saturating_duration_since(since), e.clone()))
        .collect();
    errors.sort();
    errors
}

// ------------------------------------------------------------- monitor

/// Records every command one node executes (`MONITOR`), in the background.
/// A MONITOR on node `port`; once this returns, every command the node
/// executes is recorded.
async fn monitor_node(port: u16) -> Monitor {
    let monitor = Monitor::start(&url(port)).await;
    monitor.sync().await;
    monitor
}

// ------------------------------------------------------------- cluster

/// The repository's root.
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// `scripts/redis/cluster.sh`.
fn cluster_sh() -> PathBuf {
    repo_root().join("scripts/redis/cluster.sh")
}

/// A base port whose six node ports and six cluster bus ports (+10000) are
/// free: random in 20000–32000, never handed out twice in this process,
/// probed by binding each port.
fn pick_base() -> u16 {
    static TAKEN: StdMutex<Vec<u16>> = StdMutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap();
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let base = 20_000 + 8 * rng.random_range(0..1500u16);
        if taken.contains(&base) {
            continue;
        }
        let free = (0..6).all(|o| {
            std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", base + o + 10_000)).is_ok()
        });
        if free {
            taken.push(base);
            return base;
        }
    }
    panic!("no free base port for a cluster in 20000-32000");
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The primary's id, for a replica.
    master: Option<String>,
    /// Slot ranges served (inclusive), for a primary.
    slots: Vec<(u16, u16)>,
}

impl Node {
    fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    fn failed(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// A unique lock name whose slot `primary` serves.
fn name_in(primary: &Node, what: &str) -> String {
    loop {
        let name = unique(what);
        if primary.serves(slot_of(&name)) {
            return name;
        }
    }
}

/// Parses `CLUSTER NODES`.
fn parse_nodes(text: &str) -> Vec<Node> {
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

/// A node's view of the cluster without what differs between nodes or
/// moments (myself flag, ping/pong times, link state): one line per node,
/// sorted. `None` when the node cannot be asked.
async fn view(port: u16) -> Option<Vec<String>> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("NODES")).await?;
    let mut lines: Vec<String> = parse_nodes(&text)
        .into_iter()
        .map(|n| {
            format!(
                "{} {} {} {:?} {:?}",
                n.id,
                n.port,
                n.flags.join(","),
                n.master,
                n.slots
            )
        })
        .collect();
    lines.sort();
    Some(lines)
}

/// Six cluster nodes started by `scripts/redis/cluster.sh` on a base port of
/// the test's own; stopped (by the script) on drop.
#[derive(Debug)]
struct Cluster {
    base: u16,
    /// The script's state directory: node dirs, pid files, logs.
    dir: PathBuf,
    /// Nodes SIGKILLed by the test.
    killed: Vec<u16>,
}

impl Cluster {
    /// Starts a fresh cluster with `cluster.sh start` (which waits until it
    /// is healthy) and checks it is stable from here too.
    async fn start() -> Cluster {
        let base = pick_base();
        let started = Instant::now();
        let cluster = Cluster {
            base,
            dir: repo_root()
                .join("target/redis-cluster")
                .join(base.to_string()),
            killed: Vec::new(),
        };
        let out = tokio::process::Command::new("bash")
            .arg(cluster_sh())
            .arg("start")
            .arg(base.to_string())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {}: {e}", cluster_sh().display()));
        assert!(
            out.status.success(),
            "cluster.sh start {base}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(printed, cluster.urls(), "the URLs cluster.sh printed");
        let ready = started.elapsed();
        cluster.wait_stable("after cluster.sh start").await;
        eprintln!(
            "cluster {base}: created and healthy after {ready:?}, stable after {:?}",
            started.elapsed()
        );
        cluster
    }

    fn ports(&self) -> Vec<u16> {
        (0..6).map(|o| self.base + o).collect()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.ports()
            .into_iter()
            .filter(|p| !self.killed.contains(p))
            .collect()
    }

    /// The six node URLs, as `cluster.sh` prints them.
    fn urls(&self) -> Vec<String> {
        self.ports().into_iter().map(url).collect()
    }

    /// `CLUSTER NODES` as the first live node sees it.
    async fn nodes(&self) -> Vec<Node> {
        for port in self.live_ports() {
            if let Some(text) = query::<String>(port, redis::cmd("CLUSTER").arg("NODES")).await {
                return parse_nodes(&text);
            }
        }
        panic!("no live node of cluster {} answers", self.base);
    }

    /// The live primaries, by port.
    async fn primaries(&self) -> Vec<Node> {
        self.nodes()
            .await
            .into_iter()
            .filter(|n| n.is_primary() && !n.failed() && !n.slots.is_empty())
            .collect()
    }

    /// The port of the primary serving `slot`.
    async fn owner(&self, slot: u16) -> u16 {
        self.primaries()
            .await
            .iter()
            .find(|n| n.serves(slot))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
            .port
    }

    /// The port of the (live) replica of the primary on `primary`.
    async fn replica_of(&self, primary: u16) -> u16 {
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
    async fn id_of(&self, port: u16) -> String {
        self.nodes()
            .await
            .into_iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
            .id
    }

    /// A unique lock name whose slot the primary on `primary` serves
    /// (checked against the node's `CLUSTER KEYSLOT`).
    async fn name_on(&self, primary: u16, what: &str) -> String {
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

    /// Whether the cluster is stable: every live node reports
    /// `cluster_state:ok` and all slots ok; all live nodes share one view,
    /// in which killed nodes are flagged `fail`, no node is `fail?`, three
    /// live primaries serve slots and every other live node replicates one
    /// of them; every live replica's link is up.
    async fn stable(&self) -> bool {
        let mut first: Option<Vec<String>> = None;
        for port in self.live_ports() {
            if cluster_info(port, "cluster_state").await.as_deref() != Some("ok")
                || cluster_info(port, "cluster_slots_ok").await.as_deref() != Some("16384")
            {
                return false;
            }
            let Some(v) = view(port).await else {
                return false;
            };
            if first.as_ref().is_some_and(|f| *f != v) {
                return false;
            }
            first = Some(v);
        }
        let nodes = self.nodes().await;
        if nodes.len() != 6 {
            return false;
        }
        for n in &nodes {
            let dead = self.killed.contains(&n.port);
            let fail = n.flags.iter().any(|f| f == "fail");
            if n.flags
                .iter()
                .any(|f| f == "fail?" || f == "handshake" || f == "noaddr")
                || fail != dead
            {
                return false;
            }
        }
        // Three live primaries, all serving slots; every other live node a
        // replica of one of them.
        let serving: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.is_primary() && !n.failed() && !n.slots.is_empty())
            .collect();
        if serving.len() != 3 {
            return false;
        }
        let orphan = nodes.iter().any(|n| {
            !self.killed.contains(&n.port)
                && !serving.iter().any(|p| p.id == n.id)
                && !serving.iter().any(|p| n.master.as_ref() == Some(&p.id))
        });
        if orphan {
            return false;
        }
        for port in self.live_ports() {
            if replication(port, "role").await.as_deref() == Some("slave")
                && replication(port, "master_link_status").await.as_deref() != Some("up")
            {
                return false;
            }
        }
        true
    }

    /// Waits (up to 30 s) until the cluster is [stable](Cluster::stable);
    /// how long that took.
    async fn wait_stable(&self, when: &str) -> Duration {
        let started = Instant::now();
        let ok = poll(Duration::from_secs(30), || self.stable()).await;
        if !ok {
            let nodes: Option<String> =
                query(self.live_ports()[0], redis::cmd("CLUSTER").arg("NODES")).await;
            panic!(
                "cluster {} not stable within 30 s {when}:\n{}",
                self.base,
                nodes.unwrap_or_default()
            );
        }
        started.elapsed()
    }

    /// SIGKILLs the node on `port` (its pid from the script's pid file) and
    /// waits until it no longer answers.
    async fn kill(&mut self, port: u16) {
        let pidfile = self.dir.join(format!("{port}.pid"));
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("read {}: {e}", pidfile.display()));
        let pid = pid.trim();
        assert!(
            !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()),
            "bad pid {pid:?} in {}",
            pidfile.display()
        );
        let status = Command::new("kill")
            .arg("-KILL")
            .arg(pid)
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid} (node {port}): {status}");
        self.killed.push(port);
        let gone = poll(Duration::from_secs(5), || async move {
            query::<String>(port, &redis::cmd("PING")).await.is_none()
        })
        .await;
        assert!(gone, "node {port} still answers after SIGKILL");
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`; waits until it is a
    /// primary and the cluster is stable again. How long that took.
    async fn failover(&self, replica: u16) -> Duration {
        let started = Instant::now();
        self.promote(replica).await;
        self.wait_stable("after CLUSTER FAILOVER").await;
        started.elapsed()
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`; returns as soon as it
    /// reports the master role (the rest of the cluster may not know yet).
    async fn promote(&self, replica: u16) -> Duration {
        let started = Instant::now();
        let ok: String = must(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await;
        assert_eq!(ok, "OK");
        let promoted = poll(Duration::from_secs(20), || async move {
            replication(replica, "role").await.as_deref() == Some("master")
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
    async fn migrate_slot(&self, slot: u16, from: u16, to: u16) -> Duration {
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
    async fn move_slot(&self, slot: u16, from: u16, to: u16) -> usize {
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

    /// Prints the tail of every node's log.
    fn print_logs(&self) {
        for port in self.ports() {
            let log =
                std::fs::read_to_string(self.dir.join(format!("{port}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            eprintln!("--- cluster {} node {port} log (last lines):", self.base);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(cluster_sh())
            .arg("stop")
            .arg(self.base.to_string())
            .stdin(Stdio::null())
            .output();
        let stopped = matches!(&out, Ok(o) if o.status.success());
        if std::thread::panicking() || !stopped {
            if let Ok(o) = &out {
                eprintln!(
                    "cluster.sh stop {}: {}",
                    self.base,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            self.print_logs();
            eprintln!("(kept {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// --------------------------------------------------------------- tests

/// `cluster.sh start` brings up three primaries covering all slots, each
/// with one linked replica; a second `start` reuses it; a client locks one
/// lock on each shard and the key lands on the primary serving its slot;
/// `cluster.sh stop` takes all six nodes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sh_starts_reuses_and_stops_a_cluster() {
    let cluster = Cluster::start().await;
    let nodes = cluster.nodes().await;
    let primaries = cluster.primaries().await;
    assert_eq!(primaries.len(), 3, "{nodes:?}");
    let covered: u32 = primaries
        .iter()
        .flat_map(|p| &p.slots)
        .map(|&(a, b)| u32::from(b - a) + 1)
        .sum();
    assert_eq!(covered, 16384);
    for p in &primaries {
        let replica = cluster.replica_of(p.port).await;
        assert_eq!(
            replication(replica, "master_link_status").await.as_deref(),
            Some("up")
        );
        let timeout: Vec<String> = must(
            p.port,
            redis::cmd("CONFIG").arg("GET").arg("cluster-node-timeout"),
        )
        .await;
        assert_eq!(timeout[1], "2000");
    }

    let again = std::process::Command::new("bash")
        .arg(cluster_sh())
        .arg("start")
        .arg(cluster.base.to_string())
        .output()
        .expect("run cluster.sh");
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("reusing"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        cluster
            .nodes()
            .await
            .iter()
            .map(|n| &n.id)
            .collect::<Vec<_>>(),
        nodes.iter().map(|n| &n.id).collect::<Vec<_>>(),
        "the second start did not reuse the nodes"
    );

    let client = cluster_client(&cluster.urls()).await;
    for p in &primaries {
        let name = cluster.name_on(p.port, "script").await;
        let g = client.mutex(&name).lock().await.expect("lock");
        assert_eq!(
            get(p.port, &lock_key(&name)).await.as_deref(),
            Some(g.token())
        );
        g.unlock().await.expect("unlock");
        assert_eq!(get(p.port, &lock_key(&name)).await, None);
    }
    drop(client);

    let out = std::process::Command::new("bash")
        .arg(cluster_sh())
        .arg("stop")
        .arg(cluster.base.to_string())
        .output()
        .expect("run cluster.sh stop");
    assert!(out.status.success());
    for port in cluster.ports() {
        let pong: Option<String> = query(port, &redis::cmd("PING")).await;
        assert_eq!(pong, None, "node {port} still answers after stop");
        assert!(!cluster.dir.join(format!("{port}.pid")).exists());
    }
}

/// 3 clients × 8 tasks contend for six locks, two on each shard: no two
/// holders of one lock are ever inside at once, the non-atomic counters
/// (GET, pause, SET on the lock's own shard) come out exact, and each lock's
/// fences increase in the order the holders went in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_three_clients_and_three_shards() {
    const CLIENTS: usize = 3;
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let cluster = Cluster::start().await;
    let mut locks = Vec::new();
    for p in cluster.primaries().await {
        for _ in 0..2 {
            let name = cluster.name_on(p.port, "excl").await;
            locks.push((name, p.port, conn(p.port).await));
        }
    }
    let locks = Arc::new(locks);
    let inside: Arc<Vec<AtomicUsize>> =
        Arc::new(locks.iter().map(|_| AtomicUsize::new(0)).collect());
    let fences: Arc<Vec<StdMutex<Vec<u64>>>> =
        Arc::new(locks.iter().map(|_| StdMutex::new(Vec::new())).collect());
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(cluster_client(&cluster.urls()).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..TASKS {
            let (client, locks, inside, fences) = (
                client.clone(),
                locks.clone(),
                inside.clone(),
                fences.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for r in 0..ROUNDS {
                    let l = (c * TASKS + t + r) % locks.len();
                    let (name, _, conn) = &locks[l];
                    let mut conn = conn.clone();
                    let guard = client
                        .mutex(name)
                        .lock()
                        .await
                        .unwrap_or_else(|e| panic!("client {c} task {t}: lock {name}: {e}"));
                    assert_eq!(
                        inside[l].fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders inside lock {name}"
                    );
                    fences[l].lock().unwrap().push(guard.fence());
                    let key = format!("counter:{}", hash_tag(name));
                    let n: Option<u64> = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                        .expect("GET counter");
                    tokio::task::yield_now().await;
                    sleep(Duration::from_millis(1)).await;
                    let _: () = redis::cmd("SET")
                        .arg(&key)
                        .arg(n.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .expect("SET counter");
                    inside[l].fetch_sub(1, Ordering::SeqCst);
                    guard
                        .unlock()
                        .await
                        .unwrap_or_else(|e| panic!("client {c} task {t}: unlock {name}: {e}"));
                }
            }));
        }
    }
    for t in tasks {
        timeout(Duration::from_secs(60), t)
            .await
            .expect("the contending tasks did not finish within 60 s")
            .expect("a contending task panicked");
    }
    let elapsed = started.elapsed();
    let mut expected = vec![0u64; locks.len()];
    for c in 0..CLIENTS {
        for t in 0..TASKS {
            for r in 0..ROUNDS {
                expected[(c * TASKS + t + r) % locks.len()] += 1;
            }
        }
    }
    let mut counted = Vec::new();
    for (l, (name, port, _)) in locks.iter().enumerate() {
        let n: Option<u64> = get(*port, &format!("counter:{}", hash_tag(name)))
            .await
            .map(|s| s.parse().expect("a counter"));
        counted.push(n.unwrap_or(0));
        let f = fences[l].lock().unwrap();
        assert!(
            f.windows(2).all(|w| w[1] > w[0]),
            "lock {name}'s fences are not increasing: {f:?}"
        );
    }
    let total = CLIENTS * TASKS * ROUNDS;
    eprintln!(
        "mutual exclusion: {total} acquisitions of {} locks on 3 shards in {elapsed:?} \
         ({:?} each); counters {counted:?}",
        locks.len(),
        elapsed / total as u32
    );
    assert_eq!(counted, expected, "a non-atomic counter lost an increment");
}

/// A waiter parked behind a holder with a 30 s lease gets the lock within
/// 200 ms of each release (ten hand-offs, alternating clients), and the
/// other two shards' primaries execute nothing that names the lock: the
/// wake-ups (SPUBLISH from the release script, SSUBSCRIBE) stay in the
/// lock's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_up_within_200ms_and_the_traffic_stays_in_the_shard() {
    const ROUNDS: usize = 10;
    let cluster = Cluster::start().await;
    let primaries = cluster.primaries().await;
    let home = primaries[0].port;
    let name = cluster.name_on(home, "wake").await;
    let clients = [
        cluster_client(&cluster.urls()).await,
        cluster_client(&cluster.urls()).await,
    ];
    let mut others = Vec::new();
    for p in &primaries[1..] {
        others.push(monitor_node(p.port).await);
    }
    let own = monitor_node(home).await;

    let mut latencies = Vec::new();
    for round in 0..ROUNDS {
        let (holder, waiter) = (&clients[round % 2], &clients[(round + 1) % 2]);
        let guard = holder
            .mutex(&name)
            .with_lease(Duration::from_secs(30))
            .try_lock()
            .await
            .expect("try_lock")
            .expect("the lock is free between rounds");
        let mutex = waiter.mutex(&name);
        let task = tokio::spawn(async move {
            let g = mutex.lock().await.expect("the waiter's lock");
            (Instant::now(), g)
        });
        let queued = poll(Duration::from_secs(10), || {
            let key = waiters_key(&name);
            async move { zcard(home, &key).await >= 1 }
        })
        .await;
        assert!(queued, "round {round}: the waiter never queued");
        sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "round {round}: the waiter did not wait"
        );
        let released = Instant::now();
        guard.unlock().await.expect("unlock");
        let (at, g) = timeout(Duration::from_secs(35), task)
            .await
            .expect("the waiter never got the lock")
            .expect("waiter task");
        latencies.push(at - released);
        g.unlock().await.expect("the waiter's unlock");
    }

    for m in &others {
        m.sync().await;
    }
    own.sync().await;
    let mut sorted = latencies.clone();
    sorted.sort();
    let spublish = own
        .matching_since(0, &[&hash_tag(&name)])
        .into_iter()
        .filter(|l| l.to_ascii_lowercase().contains("\"spublish\""))
        .count();
    eprintln!(
        "cluster wake-up: {ROUNDS} hand-offs with a 30 s lease, latency release -> waiter \
         holds: min {:?}, median {:?}, max {:?}; the lock's shard executed {} commands naming \
         it ({spublish} SPUBLISH); the other two primaries {} and {}",
        sorted[0],
        sorted[ROUNDS / 2],
        sorted[ROUNDS - 1],
        own.matching_since(0, &[&hash_tag(&name)]).len(),
        others[0].matching_since(0, &[&hash_tag(&name)]).len(),
        others[1].matching_since(0, &[&hash_tag(&name)]).len(),
    );
    assert!(
        spublish >= ROUNDS,
        "the lock's primary executed {spublish} SPUBLISH for {ROUNDS} hand-offs"
    );
    for m in &others {
        let leaked = m.matching_since(0, &[&hash_tag(&name)]);
        assert!(
            leaked.is_empty(),
            "primary {} (another shard) executed commands naming the lock: {leaked:#?}",
            m.url()
        );
    }
    for (round, l) in latencies.iter().enumerate() {
        assert!(
            *l < Duration::from_millis(200),
            "round {round}: the waiter got the lock {l:?} after the release ({latencies:?})"
        );
    }
}

/// `CLUSTER FAILOVER` on the replica of the shard that owns a contended
/// lock, while four waiters in two clients wait: the held lock survives
/// (and is renewed on the new primary), the waiters stay parked, and after
/// the holder's release every waiter gets the lock one after the other,
/// well before the 30 s lease would have expired; never two inside. Then
/// five more failovers across the three shards, each with a lock held and
/// four waiters queued, the release sent the moment the replica reports the
/// master role: every waiter gets the lock within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_of_a_contended_locks_shard() {
    let cluster = Cluster::start().await;
    let home = cluster.primaries().await[0].port;
    let replica = cluster.replica_of(home).await;
    let name = cluster.name_on(home, "failover").await;
    let holder = cluster_client_with(
        &cluster.urls(),
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await;
    let (wa, wb) = (
        cluster_client(&cluster.urls()).await,
        cluster_client(&cluster.urls()).await,
    );
    let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
    let inside = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = [&wa, &wa, &wb, &wb]
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&name), inside.clone()))
        .collect();
    let queued = poll(Duration::from_secs(10), || {
        let key = waiters_key(&name);
        async move { zcard(home, &key).await >= 4 }
    })
    .await;
    assert!(queued, "the four waiters never queued");
    sleep(Duration::from_millis(300)).await;

    let failed_over = Instant::now();
    let failover = cluster.failover(replica).await;
    assert_eq!(
        cluster.owner(slot_of(&name)).await,
        replica,
        "the lock's slot did not move to the promoted replica"
    );
    assert_eq!(
        get(replica, &lock_key(&name)).await.as_deref(),
        Some(guard.token()),
        "the held lock did not survive the failover"
    );
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter finished while the holder still held the lock"
    );
    // The watchdog renews on the new primary: shorten the key's TTL behind
    // its back and watch a renewal put it back.
    let _: i64 = must(
        replica,
        redis::cmd("PEXPIRE").arg(lock_key(&name)).arg(5000),
    )
    .await;
    let renewed = poll(Duration::from_secs(5), || {
        let key = lock_key(&name);
        async move { pttl(replica, &key).await > 20_000 }
    })
    .await;
    assert!(renewed, "the lease was not renewed on the new primary");
    assert!(!guard.is_lost(), "the holder's lease was reported lost");
    let subscribed = shard_subscribers(&[replica, home], &name).await;

    let released = Instant::now();
    let unlock = guard.unlock().await;
    let got = join_all(waiters, Duration::from_secs(20)).await;
    let (first, last) = spread(&got, released);
    let errors = waiter_errors(&got, failed_over);
    eprintln!(
        "CLUSTER FAILOVER: promoted and stable after {failover:?}; release {:?} ({:?} after \
         the failover began); waiters' subscriptions in the shard at release: {subscribed}; \
         waiters got the lock {first:?} .. {last:?} after the release; {} retryable errors: \
         {errors:?}",
        unlock,
        released - failed_over,
        errors.len()
    );
    match unlock {
        Ok(()) => {}
        Err(e) if retryable(&e) => {}
        Err(e) => panic!("the holder's unlock after the failover: {e}"),
    }
    assert!(
        first < Duration::from_secs(2),
        "the first waiter got the lock {first:?} after the release"
    );
    assert!(
        last < Duration::from_secs(5),
        "the last waiter got the lock {last:?} after the release"
    );

    // Five more failovers, one shard after the other (each promoting a node
    // that never won an election before: a node that won one less than
    // 4 × node-timeout ago may "win" again with its stale epoch and be
    // rolled back), releasing the moment the replica reports the master
    // role, before the clients can have noticed: the release may publish to
    // nobody, yet every waiter still gets the lock.
    let mut names = vec![name.clone()];
    for p in &cluster.primaries().await {
        if p.port != replica {
            names.push(cluster.name_on(p.port, "failover").await);
        }
    }
    for (round, name) in [1, 2, 0, 1, 2].into_iter().map(|i| (i, names[i].clone())) {
        let owner = cluster.owner(slot_of(&name)).await;
        let promoted_node = cluster.replica_of(owner).await;
        let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
        let waiters: Vec<_> = [&wa, &wa, &wb, &wb]
            .into_iter()
            .enumerate()
            .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&name), inside.clone()))
            .collect();
        let queued = poll(Duration::from_secs(10), || {
            let key = waiters_key(&name);
            async move { zcard(owner, &key).await >= 4 }
        })
        .await;
        assert!(queued, "round {round}: the four waiters never queued");
        sleep(Duration::from_millis(200)).await;
        let monitors = [monitor_node(owner).await, monitor_node(promoted_node).await];
        let promoted = cluster.promote(promoted_node).await;
        let released = Instant::now();
        let unlock = guard.unlock().await;
        let unlocked = released.elapsed();
        let got = match try_join_all(waiters, Duration::from_secs(10)).await {
            Ok(got) => got,
            Err(e) => {
                for (m, port) in monitors.iter().zip([owner, promoted_node]) {
                    m.sync().await;
                    eprintln!(
                        "--- node {} executed, naming the lock (from 200 ms before the \
                         failover):",
                        m.url()
                    );
                    for line in m.matching_since(0, &[&hash_tag(&name)]) {
                        eprintln!("{line}");
                    }
                    eprintln!(
                        "--- node {} holds {} subscriptions to the lock's channels now",
                        m.url(),
                        shard_subscribers(&[port], &name).await
                    );
                }
                panic!("failover of {owner} to {promoted_node}, release at once ({unlock:?}): {e}");
            }
        };
        let (first, last) = spread(&got, released);
        let errors = waiter_errors(&got, released);
        let stable = cluster.wait_stable("after a failover").await;
        eprintln!(
            "CLUSTER FAILOVER {owner} -> {promoted_node}, released at once: promoted after \
             {promoted:?}; release {unlock:?} in {unlocked:?}; waiters got the lock {first:?} \
             .. {last:?} after the release; {} retryable errors: {errors:?}; stable {stable:?} \
             later",
            errors.len()
        );
        match unlock {
            Ok(()) => {}
            Err(e) if retryable(&e) => {}
            Err(e) => panic!("the holder's unlock right after the failover: {e}"),
        }
        assert!(
            last < Duration::from_secs(5),
            "the last waiter got the lock {last:?} after the release"
        );
    }
}

/// The shard's primary SIGKILLed while two locks are held and waiters wait.
/// One lock's key never reached the replica (its replication link was cut
/// first, by a wrong `masterauth`): its guard (lease 6 s) reports `lost()`,
/// and its four waiters get the lock within lease + 5 s of the kill, with
/// greater fences. The other lock's key was replicated: its guard is not
/// lost, is renewed on the promoted replica, and its waiter gets the lock
/// right after the release. No call hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_killed_while_locks_are_held_and_waited_for() {
    const LEASE: Duration = Duration::from_secs(6);
    let mut cluster = Cluster::start().await;
    let home = cluster.primaries().await[0].port;
    let replica = cluster.replica_of(home).await;
    let lost_name = cluster.name_on(home, "killed-lost").await;
    let kept_name = cluster.name_on(home, "killed-kept").await;
    let home_node = cluster
        .primaries()
        .await
        .into_iter()
        .find(|n| n.port == home)
        .expect("the home primary");
    let short = cluster_client_with(&cluster.urls(), LEASE, Duration::from_secs(2)).await;
    let long = cluster_client_with(
        &cluster.urls(),
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await;
    let (wa, wb) = (
        cluster_client(&cluster.urls()).await,
        cluster_client(&cluster.urls()).await,
    );

    // Replicated before the link is cut.
    let kept = long.mutex(&kept_name).lock().await.expect("lock kept");
    let replicated = poll(Duration::from_secs(5), || {
        let key = lock_key(&kept_name);
        async move { get(replica, &key).await.is_some() }
    })
    .await;
    assert!(replicated, "the kept lock never reached the replica");

    // Cut replication: the replica fails to AUTH on every reconnect.
    let _: () = must(
        replica,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("masterauth")
            .arg("not-the-password"),
    )
    .await;
    let _: i64 = must(
        replica,
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("master"),
    )
    .await;
    let down = poll(Duration::from_secs(5), || async move {
        replication(replica, "master_link_status").await.as_deref() == Some("down")
    })
    .await;
    assert!(down, "the replica's link did not go down");

    let lost = short.mutex(&lost_name).lock().await.expect("lock lost");
    let inside = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = [&wa, &wa, &wb, &wb]
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&lost_name), inside.clone()))
        .collect();
    let kept_waiter = spawn_waiter(
        "kept waiter".to_owned(),
        wa.mutex(&kept_name),
        Arc::new(AtomicUsize::new(0)),
    );
    let queued = poll(Duration::from_secs(10), || {
        let (a, b) = (waiters_key(&lost_name), waiters_key(&kept_name));
        async move { zcard(home, &a).await >= 4 && zcard(home, &b).await >= 1 }
    })
    .await;
    assert!(queued, "the waiters never queued");
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        replication(replica, "master_link_status").await.as_deref(),
        Some("down")
    );
    assert_eq!(
        get(replica, &lock_key(&lost_name)).await,
        None,
        "the replica got the lock that should be lost"
    );

    let killed = Instant::now();
    cluster.kill(home).await;
    let ((), failed_calls) = recovering(
        "lock and unlock on the killed primary's shard",
        Duration::from_secs(15),
        || {
            // A fresh name each time: a timed-out attempt may still have
            // taken its lock.
            let mutex = wb.mutex(&name_in(&home_node, "killed-probe"));
            async move {
                let g = mutex
                    .try_lock()
                    .await?
                    .expect("nobody holds the probe lock");
                g.unlock().await
            }
        },
    )
    .await;
    let working = killed.elapsed();
    let failover = cluster.wait_stable("after the primary was killed").await;
    let failover_at = killed.elapsed();
    assert_eq!(cluster.owner(slot_of(&lost_name)).await, replica);
    // (A waiter may hold it there by now, but not the lost guard.)
    assert_ne!(
        get(replica, &lock_key(&lost_name)).await.as_deref(),
        Some(lost.token()),
        "the lost key is on the promoted replica after all"
    );
    assert_eq!(
        get(replica, &lock_key(&kept_name)).await.as_deref(),
        Some(kept.token()),
        "the replicated lock did not survive"
    );

    let bound = killed + LEASE + Duration::from_secs(5);
    let lost_fired = tokio::time::timeout_at(bound, lost.lost())
        .await
        .map(|()| killed.elapsed());
    let got = join_all(waiters, bound.saturating_duration_since(Instant::now())).await;
    let (first, last) = spread(&got, killed);
    let errors = waiter_errors(&got, killed);

    let _: i64 = must(
        replica,
        redis::cmd("PEXPIRE").arg(lock_key(&kept_name)).arg(5000),
    )
    .await;
    let renewed = poll(Duration::from_secs(5), || {
        let key = lock_key(&kept_name);
        async move { pttl(replica, &key).await > 20_000 }
    })
    .await;
    let kept_lost = kept.is_lost();
    let released = Instant::now();
    let unlock = kept.unlock().await;
    let kept_got = join_all(vec![kept_waiter], Duration::from_secs(10)).await;

    eprintln!(
        "primary SIGKILLed: a lock and unlock on its shard worked {working:?} after the kill \
         ({failed_calls} retryable errors first); promoted and stable {failover_at:?} after \
         the kill ({failover:?} of waiting after that); the unreplicated guard's lost() {lost_fired:?} after the \
         kill; its waiters got the lock {first:?} .. {last:?} after the kill (lease {LEASE:?}), \
         {} retryable errors {errors:?}; the replicated guard renewed on the new primary: \
         {renewed}, lost: {kept_lost}; its release {unlock:?}, its waiter got the lock {:?} \
         after it",
        errors.len(),
        kept_got[0].at - released
    );
    assert!(
        lost_fired.is_ok(),
        "the guard whose key did not survive never reported lost()"
    );
    assert!(lost.is_lost());
    assert!(
        last < LEASE + Duration::from_secs(5),
        "a waiter got the lock {last:?} after the kill"
    );
    for g in &got {
        assert!(
            g.fence > lost.fence(),
            "a fence after the failover ({}) is not above the lost holder's ({})",
            g.fence,
            lost.fence()
        );
    }
    assert!(
        renewed,
        "the surviving lease was not renewed on the new primary"
    );
    assert!(!kept_lost, "the surviving lease was reported lost");
    match unlock {
        Ok(()) => {}
        Err(e) => panic!("the surviving guard's unlock: {e}"),
    }
    assert!(
        kept_got[0].at - released < Duration::from_secs(2),
        "the kept lock's waiter needed {:?} after the release",
        kept_got[0].at - released
    );
}

/// The slot of a contended lock migrates to another primary while four
/// waiters in two clients wait: the held key moves along and is renewed on
/// its new owner, and after the release every waiter gets the lock one
/// after the other, well before the 30 s lease would have expired. Then
/// back, with the release sent the moment the primaries were told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migration_of_a_contended_lock() {
    let cluster = Cluster::start().await;
    let primaries = cluster.primaries().await;
    let (from, to) = (primaries[0].port, primaries[1].port);
    let name = cluster.name_on(from, "migrate").await;
    let slot = slot_of(&name);
    let holder = cluster_client_with(
        &cluster.urls(),
        Duration::from_secs(30),
        Duration::from_secs(1),
    )
    .await;
    let (wa, wb) = (
        cluster_client(&cluster.urls()).await,
        cluster_client(&cluster.urls()).await,
    );
    let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
    let inside = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = [&wa, &wa, &wb, &wb]
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&name), inside.clone()))
        .collect();
    let queued = poll(Duration::from_secs(10), || {
        let key = waiters_key(&name);
        async move { zcard(from, &key).await >= 4 }
    })
    .await;
    assert!(queued, "the four waiters never queued");
    sleep(Duration::from_millis(300)).await;

    let began = Instant::now();
    let migration = cluster.migrate_slot(slot, from, to).await;
    assert_eq!(cluster.owner(slot).await, to);
    assert_eq!(
        get(to, &lock_key(&name)).await.as_deref(),
        Some(guard.token()),
        "the held key did not move to the new owner"
    );
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter finished while the holder still held the lock"
    );
    let _: i64 = must(to, redis::cmd("PEXPIRE").arg(lock_key(&name)).arg(5000)).await;
    let renewed = poll(Duration::from_secs(5), || {
        let key = lock_key(&name);
        async move { pttl(to, &key).await > 20_000 }
    })
    .await;
    assert!(renewed, "the lease was not renewed on the slot's new owner");
    assert!(!guard.is_lost(), "the holder's lease was reported lost");
    let subscribed = shard_subscribers(&[to, cluster.replica_of(to).await], &name).await;

    let released = Instant::now();
    let unlock = guard.unlock().await;
    let got = join_all(waiters, Duration::from_secs(20)).await;
    let (first, last) = spread(&got, released);
    let errors = waiter_errors(&got, began);
    eprintln!(
        "slot migration: {migration:?}; release {unlock:?} {:?} after the migration began; \
         waiters' subscriptions on the new shard at release: {subscribed}; waiters got the \
         lock {first:?} .. {last:?} after the release; {} retryable errors: {errors:?}",
        released - began,
        errors.len()
    );
    unlock.expect("the holder's unlock on the new owner");
    assert!(
        first < Duration::from_secs(2),
        "the first waiter got the lock {first:?} after the release"
    );
    assert!(
        last < Duration::from_secs(5),
        "the last waiter got the lock {last:?} after the release"
    );

    // Back again, releasing the moment every primary was told the new owner,
    // before the clients can have noticed.
    let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
    let waiters: Vec<_> = [&wa, &wa, &wb, &wb]
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&name), inside.clone()))
        .collect();
    let queued = poll(Duration::from_secs(10), || {
        let key = waiters_key(&name);
        async move { zcard(to, &key).await >= 4 }
    })
    .await;
    assert!(queued, "the four waiters never queued again");
    sleep(Duration::from_millis(200)).await;
    let began = Instant::now();
    let moved = cluster.move_slot(slot, to, from).await;
    let released = Instant::now();
    let unlock = guard.unlock().await;
    let unlocked = released.elapsed();
    let got = join_all(waiters, Duration::from_secs(10)).await;
    let (first, last) = spread(&got, released);
    let errors = waiter_errors(&got, began);
    let stable = cluster.wait_stable("after migrating back").await;
    eprintln!(
        "slot migration back, released at once: {moved} keys moved in {:?}; release \
         {unlock:?} in {unlocked:?}; waiters got the lock {first:?} .. {last:?} after the \
         release; {} retryable errors: {errors:?}; stable {stable:?} later",
        released - began,
        errors.len()
    );
    match unlock {
        Ok(()) => {}
        Err(e) if retryable(&e) => {}
        Err(e) => panic!("the holder's unlock right after migrating back: {e}"),
    }
    assert!(
        last < Duration::from_secs(5),
        "the last waiter got the lock {last:?} after the release"
    );
}

/// After a failover the promoted replica has none of redbell's scripts
/// (`SCRIPT LOAD` is not replicated; it is also flushed beforehand to be
/// sure): the first acquire, extend and release there each succeed at the
/// first call, with a client that loaded the scripts on the old primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_on_a_promoted_replica_is_handled() {
    let cluster = Cluster::start().await;
    let home = cluster.primaries().await[0].port;
    let replica = cluster.replica_of(home).await;
    let name = cluster.name_on(home, "noscript").await;
    let client = cluster_client(&cluster.urls()).await;
    let g = client.mutex(&name).lock().await.expect("lock before");
    g.extend(Duration::from_secs(10))
        .await
        .expect("extend before");
    g.unlock().await.expect("unlock before");

    let shas: Vec<&str> = redbell::scripts().iter().map(|s| s.sha1).collect();
    let exists = |port: u16| {
        let shas = shas.clone();
        async move {
            let e: Vec<i64> = must(port, redis::cmd("SCRIPT").arg("EXISTS").arg(&shas)).await;
            e
        }
    };
    assert!(
        exists(home).await.contains(&1),
        "the client loaded no script on the primary"
    );
    let _: () = must(replica, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let failover = cluster.failover(replica).await;
    assert!(
        exists(replica).await.iter().all(|&e| e == 0),
        "the promoted replica already has redbell's scripts"
    );

    let started = Instant::now();
    let g = client
        .mutex(&name)
        .try_lock()
        .await
        .expect("the first acquire on the promoted replica")
        .expect("the lock is free");
    let acquired = started.elapsed();
    g.extend(Duration::from_secs(10))
        .await
        .expect("the first extend on the promoted replica");
    g.unlock()
        .await
        .expect("the first release on the promoted replica");
    eprintln!(
        "NOSCRIPT: failover {failover:?}; the first acquire on the promoted replica took \
         {acquired:?}; then {} of {} scripts loaded there",
        exists(replica).await.iter().filter(|&&e| e == 1).count(),
        shas.len()
    );
}
