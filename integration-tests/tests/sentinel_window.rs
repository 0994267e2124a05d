//! Replication safety: what a Sentinel failover loses. The replication
//! window with and without `min_replica_acks`, and fencing across a failover
//! — each test on a real topology of its own ([`Topology`], in the helper
//! crate's `sentinel` module), failed over by SIGKILLing the primary.
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
//! The measured numbers (double grants, fences) are printed to stderr:
//! `cargo test --test sentinel_window -- --nocapture`.

use std::time::Duration;

use redbell::{Client, Error};
use redbell_integration_tests::sentinel::{MASTER, Topology, replica_caught_up, sentinel_client};
use redbell_integration_tests::{fence_key, get, incr, lock_key, raw, recovering, unique};
use tokio::time::{Instant, timeout};

// ------------------------------------------------------------ failover

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
    let (topo, proxy) = Topology::start_with_proxy().await;
    let urls = topo.sentinel_urls();
    let a = if with_wait {
        Client::sentinel_builder(&urls, MASTER)
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
    topo.kill_primary().await;
    proxy.cut().await.expect("cut the proxy");
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
    let (topo, proxy) = Topology::start_with_proxy().await;
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

    topo.kill_primary().await;
    proxy.cut().await.expect("cut the proxy");
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
