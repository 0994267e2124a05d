//! Redis Cluster: locks and targeted wake-ups across a real local cluster of
//! three primaries and three replicas: `cluster.sh` itself, mutual exclusion
//! across shards, and wake-ups whose traffic stays in the lock's shard.
//! (Failovers and slot migrations: `cluster_changes.rs`.)
//!
//! Each test starts a fresh cluster of its own ([`Cluster`], in the helper
//! crate's `cluster` module, which describes the harness), on free ports.
//!
//! The measured numbers (wake-up latencies) are printed to stderr: `cargo
//! test --test cluster -- --nocapture`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redbell_integration_tests::cluster::{
    Cluster, cluster_client, cluster_client_with, conn, get, monitor_node, must, zcard,
};
use redbell_integration_tests::{
    POLL, counter_key, counter_value, eventually_every, hash_tag, lock_key, non_atomic_increment,
    query, redis_script, replication_field, waiters_key,
};
use tokio::time::{Instant, sleep, timeout};

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
            replication_field(replica, "master_link_status")
                .await
                .as_deref(),
            Some("up")
        );
        let timeout: Vec<String> = must(
            p.port,
            redis::cmd("CONFIG").arg("GET").arg("cluster-node-timeout"),
        )
        .await;
        assert_eq!(timeout[1], "2000");
    }

    let again = redis_script("cluster.sh", "start", cluster.base())
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

    let out = redis_script("cluster.sh", "stop", cluster.base())
        .output()
        .expect("run cluster.sh stop");
    assert!(out.status.success());
    for port in cluster.ports() {
        let pong: Option<String> = query(port, &redis::cmd("PING")).await;
        assert_eq!(pong, None, "node {port} still answers after stop");
        assert!(!cluster.dir().join(format!("{port}.pid")).exists());
    }
}

/// 3 clients × 8 tasks contend for six locks, two on each shard: no two
/// holders of one lock are ever inside at once, the non-atomic counters
/// (GET, pause, SET on the lock's own shard, in its slot) come out exact, and each lock's
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
            locks.push((name, conn(p.port).await));
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
                    let (name, conn) = &locks[l];
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
                    let counter = counter_key(name);
                    non_atomic_increment(&mut conn, &counter, Duration::from_millis(1)).await;
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
    let mut expected = vec![0i64; locks.len()];
    for c in 0..CLIENTS {
        for t in 0..TASKS {
            for r in 0..ROUNDS {
                expected[(c * TASKS + t + r) % locks.len()] += 1;
            }
        }
    }
    let mut counted = Vec::new();
    for (l, (name, conn)) in locks.iter().enumerate() {
        counted.push(counter_value(&mut conn.clone(), &counter_key(name)).await);
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
        let queued = eventually_every(Duration::from_secs(10), POLL, || {
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

/// Renewals and extends of every kind run on a cluster: the extend scripts
/// take each lock's queue key beside its lock key (one slot, by the hash
/// tag). A client whose leases of 2 s are renewed every 200 ms holds a
/// Mutex, a FairMutex, an RwLock's write and read sides and a Semaphore
/// permit, on names spread over the shards, for twice the lease; then
/// lengthens and shortens each lease by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_renews_and_extends_on_a_cluster() {
    let cluster = Cluster::start().await;
    let ports: Vec<u16> = cluster.primaries().await.iter().map(|p| p.port).collect();
    let on = |i: usize| ports[i % ports.len()];
    let client = cluster_client_with(
        &cluster.urls(),
        Duration::from_secs(2),
        Duration::from_millis(200),
    )
    .await;
    let mutex = client.mutex(&cluster.name_on(on(0), "ext-m").await);
    let fair = client.fair_mutex(&cluster.name_on(on(1), "ext-q").await);
    let writes = client.rwlock(&cluster.name_on(on(2), "ext-w").await);
    let reads = client.rwlock(&cluster.name_on(on(0), "ext-r").await);
    let sem = client.semaphore(&cluster.name_on(on(1), "ext-s").await, 2);
    let guards = [
        redbell::AnyGuard::from(must_hold(mutex.lock().await)),
        redbell::AnyGuard::from(must_hold(fair.lock().await)),
        redbell::AnyGuard::from(must_hold(writes.write().await)),
        redbell::AnyGuard::from(must_hold(reads.read().await)),
        redbell::AnyGuard::from(must_hold(sem.acquire().await)),
    ];
    sleep(Duration::from_secs(4)).await;
    for (i, g) in guards.iter().enumerate() {
        for lease in [Duration::from_secs(5), Duration::from_secs(1)] {
            let r = timeout(Duration::from_secs(10), g.extend(lease)).await;
            assert!(
                matches!(r, Ok(Ok(()))),
                "guard {i}: extend to {lease:?} after 4 s of renewals: {r:?}"
            );
        }
    }
}

fn must_hold<G>(r: Result<G, redbell::Error>) -> G {
    r.unwrap_or_else(|e| panic!("acquire on the cluster: {e}"))
}
