//! Replication safety: Sentinel failover, the replication window with and
//! without `min_replica_acks`, and fencing across a failover — each test on a
//! real topology of its own (a primary, a replica and three sentinels),
//! failed over by SIGKILLing the primary.
//!
//! The harness at the top of this file:
//!
//! - [`Topology`] spawns the five processes on loopback ports of its own, in
//!   the layout of `scripts/redis/sentinel.sh` (primary BASE, replica BASE+1,
//!   the replication [`Proxy`] on BASE+2, sentinels BASE+10..BASE+12;
//!   `sentinel monitor mymaster 127.0.0.1 BASE 2`, `down-after-milliseconds
//!   1000`, `failover-timeout 10000`), waits until all three sentinels agree
//!   on the master, see each other and the replica, and none reports
//!   `s_down`; and kills everything on drop (printing the logs' tails when
//!   the test failed).
//! - [`Proxy`] sits on the replication link (the replica is pointed at it
//!   with `REPLICAOF`) and can be paused (nothing more is forwarded from the
//!   primary to the replica) and cut (its connections are dropped with what
//!   they held). `CLIENT KILL TYPE master` would not do: the replica
//!   reconnects and resyncs within a millisecond.
//!
//! A window run: point the replica at the proxy and check a write reaches
//! it (`WAIT 1` answers 1), pause the proxy, acquire, SIGKILL the primary,
//! cut the proxy, wait until the sentinels name the replica as the master,
//! then let a second client try the same lock. The replica never saw the
//! acquisition, so without `WAIT` the second client gets the lock too.
//! Sentinel puts a replica that replicates from the wrong address back in
//! line after `failover-timeout` (`+fix-slave-config`), and a run kills its
//! primary: so every run points the replica at the proxy only seconds
//! before, finishes well within 10 s, and has a fresh topology.
//!
//! The measured numbers (failover times, double grants, fences) are printed
//! to stderr: `cargo test --test sentinel -- --nocapture`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rand::Rng;
use redbell::{Client, Error};
use redbell_integration_tests::{
    eventually_every, exists, fence_key, get, lock_key, raw, recovering, redis_server_bin, set,
    unique, wait_for_subscribers,
};
use redis::FromRedisValue;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

/// The master name the sentinels monitor.
const MASTER: &str = "mymaster";

/// How often the harness polls the topology's state.
const POLL: Duration = Duration::from_millis(50);

// ------------------------------------------------------------ topology

/// The loopback URL of `port`.
fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// One command to 127.0.0.1:`port` on a fresh connection; `None` when the
/// server cannot be reached, answers with an error, or takes over 2 s.
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

/// One field of `INFO replication` on `port`.
async fn replication_field(port: u16, field: &str) -> Option<String> {
    let info: String = query(port, redis::cmd("INFO").arg("replication")).await?;
    info.lines().find_map(|line| {
        let (name, value) = line.trim_end().split_once(':')?;
        (name == field).then(|| value.to_owned())
    })
}

/// The port of the master a sentinel names (`SENTINEL
/// get-master-addr-by-name`), `None` when it cannot tell.
async fn master_port(sentinel: u16) -> Option<u16> {
    let addr: Option<Vec<String>> = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER),
    )
    .await?;
    let addr = addr?;
    (addr.first().map(String::as_str) == Some("127.0.0.1")).then_some(())?;
    addr.get(1)?.parse().ok()
}

/// Whether a sentinel sees a healthy master on `primary`: that address,
/// flags exactly `master` (no `s_down`/`o_down`, no failover in progress),
/// the two other sentinels and one replica.
async fn sentinel_agrees(sentinel: u16, primary: u16) -> bool {
    if master_port(sentinel).await != Some(primary) {
        return false;
    }
    let Some(fields): Option<Vec<String>> =
        query(sentinel, redis::cmd("SENTINEL").arg("master").arg(MASTER)).await
    else {
        return false;
    };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv.get(1))
            .map(String::as_str)
    };
    field("flags") == Some("master")
        && field("num-other-sentinels") == Some("2")
        && field("num-slaves") == Some("1")
}

/// A base port whose layout ports (BASE, +1, +2, +10..+12) are free: random
/// in 20000–32000 (below the kernel's ephemeral range), never handed out
/// twice in this process, probed by binding each port.
fn pick_base() -> u16 {
    static TAKEN: StdMutex<Vec<u16>> = StdMutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap();
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let base = 20_000 + 16 * rng.random_range(0..750u16);
        if taken.contains(&base) {
            continue;
        }
        let free = [0, 1, 2, 10, 11, 12]
            .iter()
            .all(|o| std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok());
        if free {
            taken.push(base);
            return base;
        }
    }
    panic!("no free base port for a sentinel topology in 20000-32000");
}

/// A primary, a replica and three sentinels of the test's own, spawned as
/// child processes and SIGKILLed on drop.
#[derive(Debug)]
struct Topology {
    base: u16,
    /// Working directory, configs and logs; removed on drop unless the test
    /// failed.
    dir: PathBuf,
    /// (name, process); the primary's entry goes when it is killed.
    children: Vec<(String, Child)>,
}

impl Topology {
    /// Starts the topology and waits (up to 30 s) until it is healthy: the
    /// replica's link is up, and every sentinel names the primary with flags
    /// `master`, two other sentinels and one replica.
    async fn start() -> Topology {
        let base = pick_base();
        let dir = std::env::temp_dir().join(format!("redbell-sentinel-{base}-{}", unique("t")));
        std::fs::create_dir_all(&dir).expect("create the topology dir");
        let mut topo = Topology {
            base,
            dir,
            children: Vec::new(),
        };
        let started = Instant::now();
        topo.spawn_server("primary", topo.primary_port(), &[]);
        let primary = topo.primary_port().to_string();
        topo.spawn_server(
            "replica",
            topo.replica_port(),
            &["--replicaof", "127.0.0.1", &primary],
        );
        // The sentinels learn the replica from the primary's INFO when they
        // connect (then only every 10 s): start them once it is attached.
        let replica = topo.replica_port();
        let linked = eventually_every(Duration::from_secs(10), POLL, || async move {
            replication_field(replica, "master_link_status")
                .await
                .as_deref()
                == Some("up")
        })
        .await;
        assert!(linked, "the replica never linked to the primary");
        for i in 0..3 {
            topo.spawn_sentinel(i);
        }
        let (sentinels, primary) = (topo.sentinel_ports(), topo.primary_port());
        let healthy = eventually_every(Duration::from_secs(30), POLL, || async move {
            for s in sentinels {
                if !sentinel_agrees(s, primary).await {
                    return false;
                }
            }
            true
        })
        .await;
        assert!(
            healthy,
            "the sentinels did not agree on a healthy master within 30 s"
        );
        eprintln!(
            "topology {base}: primary {}, replica {}, sentinels {:?}: healthy after {:?}",
            topo.primary_port(),
            topo.replica_port(),
            topo.sentinel_ports(),
            started.elapsed()
        );
        topo
    }

    fn primary_port(&self) -> u16 {
        self.base
    }

    fn replica_port(&self) -> u16 {
        self.base + 1
    }

    /// Where the replication [`Proxy`] listens.
    fn proxy_port(&self) -> u16 {
        self.base + 2
    }

    fn sentinel_ports(&self) -> [u16; 3] {
        [self.base + 10, self.base + 11, self.base + 12]
    }

    /// The three sentinel URLs, for `Client::sentinel`.
    fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports().into_iter().map(url).collect()
    }

    fn primary_url(&self) -> String {
        url(self.primary_port())
    }

    fn replica_url(&self) -> String {
        url(self.replica_port())
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// Spawns a redis-server (non-persistent, diskless sync without delay)
    /// and waits for its PING.
    fn spawn_server(&mut self, name: &str, port: u16, extra: &[&str]) {
        let data = self.dir.join(name);
        std::fs::create_dir_all(&data).expect("create a server dir");
        let mut cmd = Command::new(redis_server_bin());
        cmd.arg("--port")
            .arg(port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--daemonize")
            .arg("no")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            .arg("--dir")
            .arg(&data)
            .arg("--logfile")
            .arg(self.log(name))
            .args(extra);
        self.spawn(name, cmd);
    }

    /// Spawns sentinel `i` (`redis-server CONF --sentinel`) from a fresh config.
    fn spawn_sentinel(&mut self, i: usize) {
        let name = format!("sentinel-{i}");
        let port = self.sentinel_ports()[i];
        let conf = self.dir.join(format!("{name}.conf"));
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"{log}\"\ndir \"{dir}\"\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 10000\n\
             sentinel parallel-syncs {MASTER} 1\n",
            log = self.log(&name).display(),
            dir = self.dir.display(),
            primary = self.primary_port(),
        );
        std::fs::write(&conf, text).expect("write a sentinel config");
        let mut cmd = Command::new(redis_server_bin());
        cmd.arg(&conf).arg("--sentinel");
        self.spawn(&name, cmd);
    }

    fn spawn(&mut self, name: &str, mut cmd: Command) {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (install redis-server or set REDBELL_REDIS_SERVER; \
                     `scripts/redis/install.sh` installs it)",
                    redis_server_bin()
                )
            });
        self.children.push((name.to_owned(), child));
    }

    /// SIGKILLs the primary and waits for it to exit.
    fn kill_primary(&mut self) {
        let at = self
            .children
            .iter()
            .position(|(n, _)| n == "primary")
            .expect("the primary was already killed");
        let (_, mut child) = self.children.remove(at);
        child.kill().expect("SIGKILL the primary");
        child.wait().expect("reap the primary");
    }

    /// Waits (up to 20 s) until the sentinels name the replica as the master
    /// and the replica reports the master role; how long that took.
    async fn wait_for_failover(&self) -> Duration {
        let started = Instant::now();
        let (sentinels, replica) = (self.sentinel_ports(), self.replica_port());
        let done = eventually_every(Duration::from_secs(20), POLL, || async move {
            for s in sentinels {
                if master_port(s).await != Some(replica) {
                    return false;
                }
            }
            replication_field(replica, "role").await.as_deref() == Some("master")
        })
        .await;
        assert!(done, "no failover to the replica within 20 s of the kill");
        started.elapsed()
    }

    /// Points the replica at `proxy` (`REPLICAOF`), waits until its link
    /// through it is up, and checks that a write reaches the replica and is
    /// acknowledged (`WAIT 1` answers 1).
    async fn replicate_through(&self, proxy: &Proxy) {
        let replica = self.replica_port();
        let ok: Option<String> = query(
            replica,
            redis::cmd("REPLICAOF").arg("127.0.0.1").arg(proxy.port),
        )
        .await;
        assert_eq!(ok.as_deref(), Some("OK"), "REPLICAOF the proxy");
        let proxy_port = proxy.port.to_string();
        let linked = eventually_every(Duration::from_secs(10), POLL, || {
            let proxy_port = proxy_port.clone();
            async move {
                replication_field(replica, "master_port").await == Some(proxy_port)
                    && replication_field(replica, "master_link_status")
                        .await
                        .as_deref()
                        == Some("up")
            }
        })
        .await;
        assert!(linked, "the replica's link through the proxy never came up");
        let (key, value) = (unique("probe"), unique("v"));
        let mut primary = raw(&self.primary_url()).await;
        let acked = write_and_wait(&mut primary, &key, &value).await;
        assert_eq!(
            acked, 1,
            "the replica did not acknowledge a write through the proxy"
        );
        let mut replica = raw(&self.replica_url()).await;
        assert_eq!(get(&mut replica, &key).await, Some(value));
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for name in [
                "primary",
                "replica",
                "sentinel-0",
                "sentinel-1",
                "sentinel-2",
            ] {
                let log = std::fs::read_to_string(self.log(name)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                eprintln!("--- topology {} {name} log (last lines):", self.base);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
            eprintln!("(kept {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// --------------------------------------------------------------- proxy

/// What the proxy does with the primary's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Forwards both ways.
    Forward,
    /// Holds back everything from the primary (the replica's
    /// acknowledgements still go through).
    Paused,
    /// Connections dropped, with whatever they held; no new ones.
    Cut,
}

/// A TCP proxy on the replication link: the replica connects to it, it
/// connects to the primary.
#[derive(Debug)]
struct Proxy {
    port: u16,
    flow: watch::Sender<Flow>,
    /// Held by a relay while it writes to the replica, and by `pause`/`cut`
    /// while they change the flow: once they return, no write is under way.
    gate: Arc<AsyncMutex<()>>,
    /// Relays alive (each holds its two connections).
    live: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

/// Counts a relay as alive while it exists.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` and relays each connection to
    /// 127.0.0.1:`upstream`.
    async fn start(port: u16, upstream: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("the proxy cannot listen on {port}: {e}"));
        let (flow, _) = watch::channel(Flow::Forward);
        let gate = Arc::new(AsyncMutex::new(()));
        let live = Arc::new(AtomicUsize::new(0));
        let accept = tokio::spawn({
            let (flow, gate, live) = (flow.clone(), gate.clone(), live.clone());
            async move {
                while let Ok((replica, _)) = listener.accept().await {
                    if *flow.borrow() == Flow::Cut {
                        continue;
                    }
                    live.fetch_add(1, Ordering::SeqCst);
                    let alive = Live(live.clone());
                    let (rx, gate) = (flow.subscribe(), gate.clone());
                    tokio::spawn(async move {
                        let _alive = alive;
                        relay(replica, upstream, rx, gate).await;
                    });
                }
            }
        });
        Proxy {
            port,
            flow,
            gate,
            live,
            accept,
        }
    }

    /// Stops forwarding from the primary to the replica. Once this returns
    /// nothing more reaches the replica; what the primary sends stays in
    /// the proxy (and the kernel's buffers).
    async fn pause(&self) {
        let _gate = self.gate.lock().await;
        self.flow.send_replace(Flow::Paused);
    }

    /// Drops every relayed connection with what it held, and stops
    /// listening; waits (up to 5 s) until the connections are closed.
    async fn cut(&self) {
        {
            let _gate = self.gate.lock().await;
            self.flow.send_replace(Flow::Cut);
        }
        self.accept.abort();
        let live = self.live.clone();
        let closed = eventually_every(Duration::from_secs(5), POLL, || {
            let live = live.clone();
            async move { live.load(Ordering::SeqCst) == 0 }
        })
        .await;
        assert!(closed, "the proxy's connections did not close");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flow.send_replace(Flow::Cut);
        self.accept.abort();
    }
}

/// Waits while the flow is `Paused`; the flow it then found.
async fn unpaused(flow: &mut watch::Receiver<Flow>) -> Flow {
    match flow.wait_for(|f| *f != Flow::Paused).await {
        Ok(f) => *f,
        Err(_) => Flow::Cut,
    }
}

/// Relays one replication connection until either side closes or the proxy
/// is cut.
async fn relay(
    replica: TcpStream,
    upstream: u16,
    mut flow: watch::Receiver<Flow>,
    gate: Arc<AsyncMutex<()>>,
) {
    let Ok(primary) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = primary.set_nodelay(true);
    let _ = replica.set_nodelay(true);
    let (mut from_primary, mut to_primary) = primary.into_split();
    let (mut from_replica, mut to_replica) = replica.into_split();
    let mut up_flow = flow.clone();
    // Replica -> primary (handshake, REPLCONF ACK): never held back.
    let up = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = tokio::select! {
                r = from_replica.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                _ = up_flow.wait_for(|f| *f == Flow::Cut) => return,
            };
            if to_primary.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Primary -> replica: a chunk read is written only while forwarding,
    // under the gate; nothing more is read while paused.
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = tokio::select! {
                r = from_primary.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                _ = flow.wait_for(|f| *f == Flow::Cut) => return,
            };
            loop {
                if unpaused(&mut flow).await == Flow::Cut {
                    return;
                }
                let _gate = gate.lock().await;
                let now = *flow.borrow();
                match now {
                    Flow::Forward => {
                        if to_replica.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        break;
                    }
                    Flow::Paused => continue,
                    Flow::Cut => return,
                }
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

// ------------------------------------------------------------- helpers

/// The sentinel URLs as `Client::sentinel` takes them.
fn as_strs(urls: &[String]) -> Vec<&str> {
    urls.iter().map(String::as_str).collect()
}

/// A redbell client that finds the primary through the topology's sentinels.
async fn sentinel_client(topo: &Topology) -> Client {
    let urls = topo.sentinel_urls();
    Client::sentinel(&as_strs(&urls), MASTER)
        .await
        .unwrap_or_else(|e| panic!("Client::sentinel({urls:?}): {e}"))
}

/// A fresh connection's `WAIT 1 2000` after a write of its own: whether the
/// replica has everything the primary executed so far.
async fn replica_caught_up(primary_url: &str) -> bool {
    let mut conn = raw(primary_url).await;
    write_and_wait(&mut conn, &unique("sync"), "1").await == 1
}

/// `SET key value` on the primary, then `WAIT 1 2000` on the same
/// connection: how many replicas acknowledged everything up to the write.
async fn write_and_wait(primary: &mut MultiplexedConnection, key: &str, value: &str) -> i64 {
    set(primary, key, value).await;
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async(primary)
        .await
        .expect("WAIT")
}

/// `INCR key` on a connection.
async fn incr(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("INCR")
        .arg(key)
        .query_async(conn)
        .await
        .expect("INCR")
}

// ------------------------------------------------------------ failover

/// Through a failover (the primary SIGKILLed) the client keeps working: a
/// lock is taken and released on the new primary within seconds; the lock
/// held across the failover is still held (it was replicated); three
/// waiters in two clients, parked across the failover, stay parked until
/// the holder releases on the new primary, then get the lock one after the
/// other, within seconds (the holder's lease is 60 s: no expiry helps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_failover_and_parked_waiters_get_the_lock() {
    let mut topo = Topology::start().await;
    let holder = sentinel_client(&topo).await;
    let (wa, wb) = (sentinel_client(&topo).await, sentinel_client(&topo).await);
    let name = unique("failover");
    let guard = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(60))
        .lock()
        .await
        .expect("the holder's lock");

    let inside = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for (i, client) in [&wa, &wa, &wb].into_iter().enumerate() {
        let mutex = client.mutex(&name);
        let inside = inside.clone();
        waiters.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            let guard = loop {
                match mutex.lock().await {
                    Ok(g) => break g,
                    Err(e @ Error::Redis(_)) if e.is_retryable() => {
                        errors.push((Instant::now(), e.to_string()));
                        sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => panic!("waiter {i}: {e}"),
                }
            };
            let got = Instant::now();
            assert_eq!(
                inside.fetch_add(1, Ordering::SeqCst),
                0,
                "waiter {i} got the lock while another holder was inside"
            );
            sleep(Duration::from_millis(50)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard
                .unlock()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}'s unlock: {e}"));
            (got, errors)
        }));
    }
    wait_for_subscribers(&topo.primary_url(), &name, 2).await;
    // Give the third waiter time to park too, then make sure the replica
    // has the holder's key and the waiter queue.
    sleep(Duration::from_millis(200)).await;
    assert!(
        replica_caught_up(&topo.primary_url()).await,
        "the replica did not catch up before the kill"
    );

    let killed = Instant::now();
    topo.kill_primary();
    let failover = topo.wait_for_failover().await;

    let other = unique("after-failover");
    let mut attempt = 0;
    let ((), failed) = recovering(
        "lock and unlock on the new primary",
        Duration::from_secs(15),
        || {
            attempt += 1;
            let mutex = holder.mutex(&format!("{other}-{attempt}"));
            async move {
                let g = mutex.lock_timeout(Duration::from_secs(3)).await?;
                g.unlock().await
            }
        },
    )
    .await;
    let working = killed.elapsed();
    let mut new_primary = raw(&topo.replica_url()).await;
    assert_eq!(
        get(&mut new_primary, &lock_key(&name)).await.as_deref(),
        Some(guard.token()),
        "the replicated lock did not survive the failover"
    );
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter finished (got the lock, or failed) while the holder still held it"
    );

    // The waiters' subscriptions moved to the new primary; then release.
    wait_for_subscribers(&topo.replica_url(), &name, 2).await;
    assert!(!guard.is_lost());
    let released = Instant::now();
    guard
        .unlock()
        .await
        .expect("the holder's unlock on the new primary");
    let mut got = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        let (at, errors) = timeout(Duration::from_secs(20), w)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} never got the lock after the release"))
            .expect("waiter task");
        got.push((at - released, errors));
    }
    let first = got.iter().map(|(d, _)| *d).min().unwrap();
    let last = got.iter().map(|(d, _)| *d).max().unwrap();
    let mut errors: Vec<(Duration, &str)> = got
        .iter()
        .flat_map(|(_, e)| e)
        .map(|(at, e)| (at.saturating_duration_since(killed), e.as_str()))
        .collect();
    errors.sort();
    eprintln!(
        "failover: sentinels switched {failover:?} after the kill; lock+unlock on the new \
         primary {working:?} after the kill ({failed} retryable errors first); waiters got the \
         lock {first:?} .. {last:?} after the release; {} retryable errors from the waiters' \
         lock() (first {:?}, last {:?} after the kill)",
        errors.len(),
        errors.first(),
        errors.last(),
    );
    assert!(
        working < Duration::from_secs(15),
        "the client needed {working:?} to work again"
    );
    assert!(
        first < Duration::from_secs(3),
        "the first waiter got the lock {first:?} after the release"
    );
    assert!(
        last < Duration::from_secs(10),
        "the last waiter got the lock {last:?} after the release"
    );
}

// -------------------------------------------------------------- window

/// One window run's outcome.
#[derive(Debug)]
struct WindowRun {
    /// The first client's fence; `None` when its acquire was refused with
    /// `NotReplicated { acked: 0, wanted: 1 }` (anything else fails the run).
    first: Option<u64>,
    /// The second client's fence, when it got the lock after the failover.
    second: Option<u64>,
    /// The second client got the lock while the first held a guard it
    /// believed valid (not lost).
    double: bool,
    /// From the kill until the sentinels named the replica.
    failover: Duration,
    /// From the kill until the second client's try_lock answered.
    second_after_kill: Duration,
}

/// One run: replication held back, client A acquires (with or without
/// `min_replica_acks(1, 200ms)`), the primary is killed, and after the
/// failover client B tries the same lock.
async fn window_run(with_wait: bool) -> WindowRun {
    let mut topo = Topology::start().await;
    let proxy = Proxy::start(topo.proxy_port(), topo.primary_port()).await;
    topo.replicate_through(&proxy).await;
    let urls = topo.sentinel_urls();
    let a = if with_wait {
        Client::sentinel_builder(&as_strs(&urls), MASTER)
            .min_replica_acks(1, Duration::from_millis(200))
            .connect()
            .await
            .expect("client A")
    } else {
        sentinel_client(&topo).await
    };
    let b = sentinel_client(&topo).await;
    let name = unique("window");
    let key = lock_key(&name);
    let mut primary = raw(&topo.primary_url()).await;
    let mut replica = raw(&topo.replica_url()).await;

    proxy.pause().await;
    let first = timeout(
        Duration::from_secs(5),
        a.mutex(&name).with_lease(Duration::from_secs(30)).lock(),
    )
    .await
    .expect("A's acquire hung");
    let on_primary = get(&mut primary, &key).await;
    assert_eq!(
        get(&mut replica, &key).await,
        None,
        "the replica saw A's acquisition: replication was not held back"
    );
    match (&first, with_wait) {
        (Ok(g), false) => assert_eq!(on_primary.as_deref(), Some(g.token())),
        (
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1,
            }),
            true,
        ) => assert_eq!(
            on_primary, None,
            "the unreplicated acquisition was not given up on the primary"
        ),
        (other, _) => panic!("A's acquire (min_replica_acks: {with_wait}): {other:?}"),
    }

    let killed = Instant::now();
    topo.kill_primary();
    proxy.cut().await;
    let failover = topo.wait_for_failover().await;
    let (second, _) = recovering(
        "B's try_lock after the failover",
        Duration::from_secs(15),
        || {
            let mutex = b.mutex(&name);
            async move { mutex.try_lock().await }
        },
    )
    .await;
    let second_after_kill = killed.elapsed();
    let double = second.is_some() && matches!(&first, Ok(g) if !g.is_lost());
    let run = WindowRun {
        first: first.as_ref().ok().map(|g| g.fence()),
        second: second.as_ref().map(|g| g.fence()),
        double,
        failover,
        second_after_kill,
    };
    assert!(
        second_after_kill < Duration::from_secs(10),
        "the run took {second_after_kill:?} after the kill: Sentinel may have fixed the replica's \
         config (failover-timeout 10 s) meanwhile"
    );
    run
}

/// Five window runs, one after the other, each on a fresh topology; prints
/// the table.
async fn window_runs(with_wait: bool) -> Vec<WindowRun> {
    const RUNS: usize = 5;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(window_run(with_wait).await);
    }
    let label = if with_wait {
        "min_replica_acks(1, 200ms)"
    } else {
        "no WAIT"
    };
    eprintln!(
        "window, {label}: run | A's acquire | B after failover | double grant | failover | B answered after kill"
    );
    for (i, r) in runs.iter().enumerate() {
        let first = r
            .first
            .map_or("NotReplicated { acked: 0, wanted: 1 }".to_owned(), |f| {
                format!("fence {f}")
            });
        let second = r.second.map_or("held".to_owned(), |f| format!("fence {f}"));
        eprintln!(
            "window, {label}: {} | {first} | {second} | {} | {:?} | {:?}",
            i + 1,
            r.double,
            r.failover,
            r.second_after_kill
        );
    }
    let doubles = runs.iter().filter(|r| r.double).count();
    eprintln!("window, {label}: {doubles} double grants in {RUNS} runs");
    runs
}

/// Without `min_replica_acks`, replication held back and the primary
/// killed: a second client gets the lock the first still believes it
/// holds (at least once in five runs: the harness reaches the window).
/// Its fence is greater, so fencing still tells the two apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_a_failover_grants_the_lock_twice() {
    let runs = window_runs(false).await;
    for r in &runs {
        let a = r
            .first
            .expect("A's acquire was refused without min_replica_acks");
        if let Some(b) = r.second {
            assert!(b > a, "B's fence {b} is not above A's {a}");
        }
    }
    assert!(
        runs.iter().any(|r| r.double),
        "no run reached the window: the second client never got the lock the first held"
    );
}

/// With `min_replica_acks(1, 200ms)`, replication held back: the acquire
/// fails with `NotReplicated { acked: 0, wanted: 1 }` and leaves nothing on
/// the primary, so after the failover the second client gets the lock while
/// nobody else believes they hold it — in every one of five runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replica_acks_an_unreplicated_acquire_is_refused() {
    let runs = window_runs(true).await;
    for r in &runs {
        assert_eq!(r.first, None, "A acquired a lock no replica acknowledged");
        assert!(!r.double);
        assert!(
            r.second.is_some(),
            "after the failover the second client could not take the free lock"
        );
    }
}

// ------------------------------------------------------------- fencing

/// Fences keep increasing across a failover that lost the last increments,
/// without `min_replica_acks`: three acquisitions the replica confirmed,
/// three more while replication is held back (lost with the primary), then
/// three on the new primary — each above all before, although the new
/// primary's fence key holds the third value. A plain INCR counter, side by
/// side, hands out a value again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_keep_increasing_across_a_failover_that_lost_increments() {
    let mut topo = Topology::start().await;
    let proxy = Proxy::start(topo.proxy_port(), topo.primary_port()).await;
    topo.replicate_through(&proxy).await;
    let c = sentinel_client(&topo).await;
    let name = unique("fence");
    let counter = unique("plain-incr");
    let mut primary = raw(&topo.primary_url()).await;
    let mut replica = raw(&topo.replica_url()).await;

    // Replicated (and confirmed: min_replica_acks per lock).
    let (mut kept, mut kept_incr) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let g = c
            .mutex(&name)
            .min_replica_acks(1, Duration::from_secs(2))
            .lock()
            .await
            .expect("a replicated acquisition");
        kept.push(g.fence());
        g.unlock().await.unwrap();
        kept_incr.push(incr(&mut primary, &counter).await);
    }
    assert!(replica_caught_up(&topo.primary_url()).await);
    let last_kept = kept[2].to_string();
    assert_eq!(
        get(&mut replica, &fence_key(&name)).await,
        Some(last_kept.clone())
    );

    // Held back: lost with the primary.
    proxy.pause().await;
    let (mut lost, mut lost_incr) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let g = c
            .mutex(&name)
            .lock()
            .await
            .expect("an acquisition while held back");
        lost.push(g.fence());
        g.unlock().await.unwrap();
        lost_incr.push(incr(&mut primary, &counter).await);
    }
    assert_eq!(
        get(&mut replica, &fence_key(&name)).await,
        Some(last_kept.clone()),
        "the replica saw a held-back fence"
    );

    topo.kill_primary();
    proxy.cut().await;
    let failover = topo.wait_for_failover().await;
    let mut new_primary = raw(&topo.replica_url()).await;
    let fence_at_promotion = get(&mut new_primary, &fence_key(&name)).await;
    let mut after = Vec::new();
    for _ in 0..3 {
        let mutex = c.mutex(&name);
        let (g, _) = recovering("lock on the new primary", Duration::from_secs(15), || {
            mutex.lock_timeout(Duration::from_secs(3))
        })
        .await;
        after.push(g.fence());
        g.unlock().await.expect("unlock on the new primary");
    }
    let incr_after = incr(&mut new_primary, &counter).await;

    eprintln!(
        "fencing across a failover ({failover:?}): replicated fences {kept:?}, lost fences \
         {lost:?}, the new primary's fence key at promotion {fence_at_promotion:?}, fences after \
         {after:?}; plain INCR: replicated {kept_incr:?}, lost {lost_incr:?}, after the failover \
         {incr_after}"
    );
    assert_eq!(
        fence_at_promotion,
        Some(last_kept),
        "the last increments were not lost: the test did not hold replication back"
    );
    let before = kept.iter().chain(&lost).copied().max().unwrap();
    assert!(
        after[0] > before,
        "a fence after the promotion ({}) is not above one handed out before ({before})",
        after[0]
    );
    assert!(after.windows(2).all(|w| w[1] > w[0]), "{after:?}");
    assert!(
        kept.iter()
            .chain(&lost)
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[1] > w[0]),
        "{kept:?} {lost:?}"
    );
    assert_eq!(kept_incr, [1, 2, 3]);
    assert_eq!(lost_incr, [4, 5, 6]);
    assert_eq!(
        incr_after, 4,
        "a plain INCR after the failover should repeat the first lost value"
    );
}

// --------------------------------------------------------- sentinel.sh

/// Runs `scripts/redis/sentinel.sh ACTION BASE`; its stdout.
async fn sentinel_sh(action: &str, base: u16) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis/sentinel.sh");
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .arg(action)
        .arg(base.to_string())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "sentinel.sh {action} {base}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Stops the script's topology if the test ends before it did.
struct ScriptTopology {
    base: u16,
    stopped: bool,
}

impl Drop for ScriptTopology {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis/sentinel.sh");
        let _ = Command::new("bash")
            .arg(script)
            .arg("stop")
            .arg(self.base.to_string())
            .stdout(Stdio::null())
            .status();
    }
}

/// `scripts/redis/sentinel.sh start BASE` brings up a healthy topology and
/// prints the three sentinel URLs, which a redbell client can use;
/// `stop BASE` takes all five processes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_sh_starts_and_stops_a_topology() {
    let base = pick_base();
    let mut started = ScriptTopology {
        base,
        stopped: false,
    };
    let urls: Vec<String> = sentinel_sh("start", base)
        .await
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = [10, 11, 12].iter().map(|o| url(base + o)).collect();
    assert_eq!(urls, expected);
    for o in [10, 11, 12] {
        assert!(sentinel_agrees(base + o, base).await);
    }
    assert_eq!(
        replication_field(base + 1, "master_link_status")
            .await
            .as_deref(),
        Some("up")
    );
    let c = Client::sentinel(&as_strs(&urls), MASTER)
        .await
        .expect("a client through the script's sentinels");
    let name = unique("script");
    let g = c.mutex(&name).lock().await.expect("lock");
    let mut primary = raw(&url(base)).await;
    assert!(exists(&mut primary, &lock_key(&name)).await);
    g.unlock().await.expect("unlock");
    drop(c);

    sentinel_sh("stop", base).await;
    started.stopped = true;
    for o in [0, 1, 10, 11, 12] {
        let pong: Option<String> = query(base + o, &redis::cmd("PING")).await;
        assert_eq!(pong, None, "port {} still answers after stop", base + o);
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/redis-sentinel")
        .join(base.to_string());
    let _ = std::fs::remove_dir_all(dir);
}
