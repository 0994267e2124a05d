//! Redis Cluster: one shard going down costs the waiters on the other
//! shards nothing. The hub keeps its sharded subscriptions per shard, so a
//! dead shard's failing subscriptions and probes neither reconnect the
//! whole pub/sub connection nor wake the waiters parked on healthy shards.
//!
//! Each test starts a fresh cluster of its own ([`Cluster`], in the helper
//! crate's `cluster` module). The figures are printed to stderr:
//! `cargo test --test cluster_shards -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell_integration_tests::cluster::{
    Cluster, cluster_client, cluster_client_with, conn, monitor_node, must, queue_waiters,
    shard_subscribers, zcard,
};
use redbell_integration_tests::{
    POLL, client_list, eventually_every, kill_client, lock_key, script_sha, waiters_key,
};
use tokio::time::{Instant, sleep, timeout};

/// Lock A on shard 1 and lock B on shard 2 are held, and one client parks
/// a waiter on each (so it subscribes to both shards). Shard 2 then loses
/// its primary and its replica (SIGKILL, so no failover can save it; the
/// other shards keep serving, `cluster-require-full-coverage no`). For 5 s
/// after the cluster flagged the shard `fail`, A's waiter must not be woken:
/// not one acquire attempt for A reaches shard 1's primary. When A's holder
/// then releases, A's waiter has the lock within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_does_not_wake_the_waiters_of_the_others() {
    let mut cluster = Cluster::start().await;
    for port in cluster.ports() {
        let _: () = must(
            port,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-require-full-coverage")
                .arg("no"),
        )
        .await;
    }
    let primaries = cluster.primaries().await;
    let (one, two) = (primaries[0].port, primaries[1].port);
    let two_replica = cluster.replica_of(two).await;
    let a = cluster.name_on(one, "shard-a").await;
    let b = cluster.name_on(two, "shard-b").await;

    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    let waiting = cluster_client(&urls).await;
    let held_a = holder.mutex(&a).lock().await.expect("hold A");
    let held_b = holder.mutex(&b).lock().await.expect("hold B");
    let inside = Arc::new(AtomicUsize::new(0));
    let mut waiter_a = queue_waiters(&[&waiting], &a, one, &inside, "A's waiter").await;
    // B's waiter keeps waiting whatever its shard answers, so B's channel
    // stays wanted (and failing) throughout.
    let mutex_b = waiting.mutex(&b);
    let waiter_b = tokio::spawn(async move {
        loop {
            if let Ok(guard) = mutex_b.lock().await {
                break guard;
            }
            sleep(Duration::from_millis(50)).await;
        }
    });
    let queued = eventually_every(Duration::from_secs(10), POLL, || async {
        zcard(two, &waiters_key(&b)).await >= 1
    })
    .await;
    assert!(queued, "B's waiter never queued");
    for (name, port) in [(&a, one), (&b, two)] {
        let subscribed = eventually_every(Duration::from_secs(10), POLL, || async move {
            shard_subscribers(&[port], name).await >= 1
        })
        .await;
        assert!(
            subscribed,
            "the waiting client never subscribed to {name}'s shard"
        );
    }

    // Shard 2 goes: its replica first, so its primary cannot fail over.
    cluster.kill(two_replica).await;
    cluster.kill(two).await;
    let killed = Instant::now();
    let flagged = eventually_every(Duration::from_secs(20), POLL, || async {
        cluster
            .nodes()
            .await
            .iter()
            .any(|n| n.port == two && n.flags.iter().any(|f| f == "fail"))
    })
    .await;
    assert!(flagged, "the cluster never flagged node {two} as failed");
    eprintln!("shard 2 flagged fail {:?} after the kill", killed.elapsed());

    let monitor = monitor_node(one).await;
    let window = Duration::from_secs(5);
    sleep(window).await;
    monitor.sync().await;
    let attempts = monitor.count(&["evalsha", script_sha("acquire"), &lock_key(&a)]);
    eprintln!("acquire attempts for A on shard 1 in {window:?} with shard 2 down: {attempts}");
    assert!(
        shard_subscribers(&[one], &a).await >= 1,
        "A's subscription on shard 1 was dropped"
    );
    assert_eq!(
        attempts, 0,
        "A's waiter was woken {attempts} times in {window:?} because shard 2 is down"
    );

    let released = Instant::now();
    held_a.unlock().await.expect("release A");
    let report = timeout(Duration::from_secs(10), waiter_a.remove(0))
        .await
        .expect("A's waiter did not get the lock within 10 s")
        .expect("A's waiter");
    let latency = report.at.saturating_duration_since(released);
    eprintln!("A's waiter took the lock {latency:?} after the release");
    assert!(
        latency < Duration::from_secs(1),
        "A's waiter took the lock {latency:?} after the release"
    );
    waiter_b.abort();
    std::mem::forget(held_b); // its shard is gone: nothing to release
}

/// A shard's pub/sub socket is killed (`CLIENT KILL`): the subscription on
/// it is really lost, so the hub wakes the waiter when its probe sees the
/// new socket, and once more when the channel is resubscribed. It then
/// re-checks the channel 2 s later (`CLUSTER_RECHECK`), which finds the
/// resubscription on the same live socket of the same primary: nothing was
/// missed since, so the re-check must not wake the waiter a third time.
/// At most those two acquire attempts reach the shard in the 6 s after the
/// kill, and at least one (the loss is noticed). A's release then still
/// reaches the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_that_finds_the_same_socket_wakes_nobody() {
    let cluster = Cluster::start().await;
    let one = cluster.primaries().await[0].port;
    let a = cluster.name_on(one, "recheck-a").await;
    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    let waiting = cluster_client(&urls).await;
    let held = holder.mutex(&a).lock().await.expect("hold A");
    let inside = Arc::new(AtomicUsize::new(0));
    let mut waiter = queue_waiters(&[&waiting], &a, one, &inside, "A's waiter").await;
    let subscribed = eventually_every(Duration::from_secs(10), POLL, || async {
        shard_subscribers(&[one], &a).await >= 1
    })
    .await;
    assert!(
        subscribed,
        "the waiting client never subscribed to A's shard"
    );

    // The waiting client's hub holds the node's one sharded subscription.
    let mut admin = conn(one).await;
    let sockets: Vec<u64> = client_list(&mut admin)
        .await
        .into_iter()
        .filter(|(_, line)| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("ssub="))
                .is_some_and(|n| n != "0")
        })
        .map(|(id, _)| id)
        .collect();
    assert_eq!(sockets.len(), 1, "one socket with sharded subscriptions");
    let monitor = monitor_node(one).await;
    kill_client(&mut admin, sockets[0]).await;
    let window = Duration::from_secs(6);
    sleep(window).await;
    monitor.sync().await;
    let attempts = monitor.count(&["evalsha", script_sha("acquire"), &lock_key(&a)]);
    eprintln!("acquire attempts for A in {window:?} after its socket was killed: {attempts}");
    assert!(attempts >= 1, "the lost subscription never woke A's waiter");
    assert!(
        attempts <= 2,
        "A's waiter was woken {attempts} times in {window:?}: the re-check woke it again"
    );
    assert!(
        shard_subscribers(&[one], &a).await >= 1,
        "A's subscription was not restored"
    );

    held.unlock().await.expect("release A");
    timeout(Duration::from_secs(10), waiter.remove(0))
        .await
        .expect("A's waiter did not get the lock within 10 s")
        .expect("A's waiter");
}
