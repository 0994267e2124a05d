//! Redis Cluster: locks held and waited for while who serves what changes
//! under the clients: `CLUSTER FAILOVER`, a primary SIGKILLed, a slot
//! migration, and NOSCRIPT on a promoted replica.
//!
//! Each test starts a fresh cluster of its own ([`Cluster`], in the helper
//! crate's `cluster` module, which describes the harness), on free ports.
//!
//! The measured numbers (failover and recovery times) are printed to stderr:
//! `cargo test --test cluster_changes -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell_integration_tests::cluster::{
    Cluster, Contended, cluster_client, cluster_client_with, get, holder_and_waiters, monitor_node,
    must, name_in, queue_waiters, renewed_on, served_in_time, shard_subscribers, slot_of, zcard,
};
use redbell_integration_tests::{
    POLL, eventually_every, hash_tag, join_waiters, lock_key, recovering, replication_field,
    retryable, spawn_waiter, spread, try_join_waiters, waiter_errors, waiters_key,
};
use tokio::time::{Instant, sleep};

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
    let scene = Contended::start(&cluster, home, "failover", "before the failover").await;

    let failed_over = Instant::now();
    let failover = cluster.failover(replica).await;
    let name = scene.name.clone();
    assert_eq!(
        cluster.owner(slot_of(&name)).await,
        replica,
        "the lock's slot did not move to the promoted replica"
    );
    scene
        .held_on(
            replica,
            "the held lock did not survive the failover",
            "the new primary",
        )
        .await;
    let Contended {
        holder,
        wa,
        wb,
        guard,
        inside,
        waiters,
        ..
    } = scene;
    let subscribed = shard_subscribers(&[replica, home], &name).await;

    let released = Instant::now();
    let unlock = guard.unlock().await;
    let got = join_waiters(waiters, Duration::from_secs(20)).await;
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
    served_in_time(first, last);

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
        let waiters = queue_waiters(
            &[&wa, &wa, &wb, &wb],
            &name,
            owner,
            &inside,
            &format!("round {round}"),
        )
        .await;
        sleep(Duration::from_millis(200)).await;
        let monitors = [monitor_node(owner).await, monitor_node(promoted_node).await];
        let promoted = cluster.promote(promoted_node).await;
        let released = Instant::now();
        let unlock = guard.unlock().await;
        let unlocked = released.elapsed();
        let got = match try_join_waiters(waiters, Duration::from_secs(10)).await {
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
    let (long, wa, wb) = holder_and_waiters(&cluster).await;

    // Replicated before the link is cut.
    let kept = long.mutex(&kept_name).lock().await.expect("lock kept");
    let replicated = eventually_every(Duration::from_secs(5), POLL, || {
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
    let down = eventually_every(Duration::from_secs(5), POLL, || async move {
        replication_field(replica, "master_link_status")
            .await
            .as_deref()
            == Some("down")
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
    let queued = eventually_every(Duration::from_secs(10), POLL, || {
        let (a, b) = (waiters_key(&lost_name), waiters_key(&kept_name));
        // One queue place per client and lock; the others park in it.
        let (wa, wb) = (wa.clone(), wb.clone());
        async move {
            zcard(home, &a).await >= 2
                && zcard(home, &b).await >= 1
                && wa.stats().waiters >= 3
                && wb.stats().waiters >= 2
        }
    })
    .await;
    assert!(queued, "the waiters never queued");
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        replication_field(replica, "master_link_status")
            .await
            .as_deref(),
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
    let got = join_waiters(waiters, bound.saturating_duration_since(Instant::now())).await;
    let (first, last) = spread(&got, killed);
    let errors = waiter_errors(&got, killed);

    let renewed = renewed_on(replica, &lock_key(&kept_name)).await;
    let kept_lost = kept.is_lost();
    let released = Instant::now();
    let unlock = kept.unlock().await;
    let kept_got = join_waiters(vec![kept_waiter], Duration::from_secs(10)).await;

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
    let scene = Contended::start(&cluster, from, "migrate", "before the migration").await;
    let name = scene.name.clone();
    let slot = slot_of(&name);

    let began = Instant::now();
    let migration = cluster.migrate_slot(slot, from, to).await;
    assert_eq!(cluster.owner(slot).await, to);
    scene
        .held_on(
            to,
            "the held key did not move to the new owner",
            "the slot's new owner",
        )
        .await;
    let Contended {
        holder,
        wa,
        wb,
        guard,
        inside,
        waiters,
        ..
    } = scene;
    let subscribed = shard_subscribers(&[to, cluster.replica_of(to).await], &name).await;

    let released = Instant::now();
    let unlock = guard.unlock().await;
    let got = join_waiters(waiters, Duration::from_secs(20)).await;
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
    served_in_time(first, last);

    // Back again, releasing the moment every primary was told the new owner,
    // before the clients can have noticed.
    let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
    let waiters = queue_waiters(&[&wa, &wa, &wb, &wb], &name, to, &inside, "migrating back").await;
    sleep(Duration::from_millis(200)).await;
    let began = Instant::now();
    let moved = cluster.move_slot(slot, to, from).await;
    let released = Instant::now();
    let unlock = guard.unlock().await;
    let unlocked = released.elapsed();
    let got = join_waiters(waiters, Duration::from_secs(10)).await;
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
