//! Redis Cluster: the hub's re-check of a recovered sharded subscription
//! (`CLUSTER_RECHECK`, 2 s after the recovery) may skip its wake-up when it
//! finds the subscription on the connection it was made on. These tests
//! try to lose a wake-up around it: releases published while the shards'
//! subscriptions are being recovered and re-checked must each reach their
//! waiter promptly, far sooner than the 30 s lease a lost one would cost.
//!
//! Each test starts a fresh cluster of its own ([`Cluster`], in the helper
//! crate's `cluster` module). The figures are printed to stderr:
//! `cargo test --test cluster_recheck -- --nocapture`.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use redbell::Client;
use redbell_integration_tests::cluster::{
    Cluster, cluster_client, cluster_client_with, conn, monitor_node, must, name_in,
    shard_subscribers, slot_of,
};
use redbell_integration_tests::{
    POLL, Proxy, client_list, eventually_every, kill_client, lock_key, retryable, script_sha,
    spawn_passing_waiter, unique,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

/// How long a waiter may take to get its lock after the holder released
/// it: generous for a loaded machine, and far below the holder's 30 s
/// lease, which is what a lost wake-up costs.
const SERVED_WITHIN: Duration = Duration::from_secs(3);

/// Many waiters parked on one shard (one lock each, all in one client, so
/// its hub holds that many sharded subscriptions on the shard), then a
/// `CLUSTER FAILOVER` of the shard. The holder releases the locks one by
/// one, 40 ms apart, from the moment the replica reports the master role:
/// the releases fall before, during and after the hub's recovery of the
/// subscriptions and their re-checks 2 s later. Within 8 s of the
/// promotion the waiting client's subscriptions are on the new primary,
/// and every waiter has its lock within [`SERVED_WITHIN`] of its release.
///
/// Spawns a [`spawn_passing_waiter`] on `waiting` for each of `names`, and
/// waits (up to `within`) until the client has them all parked.
///
/// # Panics
///
/// When they do not all park in time.
async fn park_waiters(
    waiting: &Client,
    names: &[String],
    within: Duration,
) -> Vec<JoinHandle<Instant>> {
    let waiters: Vec<_> = names
        .iter()
        .map(|n| spawn_passing_waiter(waiting, n))
        .collect();
    let all = i64::try_from(names.len()).expect("a few locks");
    let parked = eventually_every(within, POLL, || async { waiting.stats().waiters >= all }).await;
    assert!(parked, "the {} waiters never all parked", names.len());
    waiters
}

/// The hub's recovery after a failover can leave its redis-rs connection
/// answering nothing (stuck rebuilding its slot map): every subscription
/// attempt then times out after the connect timeout (10 s here) and the
/// waiters are woken only by those failures. The hub must replace such a
/// connection instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_of_a_failed_over_shard_is_served_after_its_release() {
    const LOCKS: usize = 120;
    let cluster = Cluster::start().await;
    let home = cluster.primaries().await[0].port;
    let replica = cluster.replica_of(home).await;
    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    // A long connect timeout bounds each subscription attempt: a hub that
    // cannot subscribe shows as waits of several seconds.
    let waiting = Client::cluster_builder(urls.iter().map(String::as_str).collect::<Vec<_>>())
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("the waiting client");
    let mut names = Vec::new();
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let name = cluster.name_on(home, &format!("herd-{i}")).await;
        guards.push(holder.mutex(&name).lock().await.expect("hold a lock"));
        names.push(name);
    }
    let waiters = park_waiters(&waiting, &names, Duration::from_secs(20)).await;
    sleep(Duration::from_secs(1)).await; // every subscription made

    let promoted = cluster.promote(replica).await;
    eprintln!("replica {replica} promoted after {promoted:?}");
    let start = Instant::now();
    // The last lock is held until its waiter's subscription is on the new
    // primary: a hub that never gets it there fails here, whatever wakes
    // its waiters.
    let last = guards.pop().expect("a lock");
    let mut released = Vec::new();
    for (i, guard) in guards.into_iter().enumerate() {
        let due = start + Duration::from_millis(40) * u32::try_from(i).expect("a few locks");
        tokio::time::sleep_until(due).await;
        // A release that fails leaves the lock to its lease: not a lost
        // wake-up, so that waiter is not timed.
        match guard.unlock().await {
            Ok(()) => released.push(Some(Instant::now())),
            Err(e) if retryable(&e) => {
                eprintln!("release of {} failed: {e}", names[i]);
                released.push(None);
            }
            Err(e) => panic!("release of {}: {e}", names[i]),
        }
    }
    let moved = eventually_every(
        (start + Duration::from_secs(8)).saturating_duration_since(Instant::now()),
        POLL,
        || async { shard_subscribers(&[replica], &names[LOCKS - 1]).await >= 1 },
    )
    .await;
    assert!(
        moved,
        "8 s after the promotion, the waiting client still has no subscription on the new primary"
    );
    match last.unlock().await {
        Ok(()) => released.push(Some(Instant::now())),
        Err(e) => panic!("release of the last lock: {e}"),
    }
    let timed = released.iter().flatten().count();
    assert!(
        timed >= LOCKS * 9 / 10,
        "only {timed} of the {LOCKS} releases went through"
    );
    let mut worst = (Duration::ZERO, 0);
    let mut late = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        let Some(released) = released[i] else {
            w.abort();
            continue;
        };
        let left = (released + Duration::from_secs(40)).saturating_duration_since(Instant::now());
        let got = timeout(left, w)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} never got its lock"))
            .expect("waiter task");
        let wait = got.saturating_duration_since(released);
        if wait > worst.0 {
            worst = (wait, i);
        }
        if wait > SERVED_WITHIN {
            late.push((i, released - start, wait));
        }
    }
    eprintln!(
        "{LOCKS} waiters: worst wait after the release {:?} (lock {})",
        worst.0, worst.1
    );
    assert!(
        late.is_empty(),
        "waiters served later than {SERVED_WITHIN:?} after their release \
         (lock, released after the promotion, wait): {late:?}"
    );
}

/// The guide's cluster ACL without `+client|info`: the hub cannot name its
/// sockets, so a re-check can never tell that the subscription stayed in
/// place and must wake the waiters. The waiting client connects as that
/// user; its pub/sub socket to the lock's shard is killed (`CLIENT KILL`).
/// In the 6 s after, the waiter attempts once for the loss, once for the
/// recovery and once more for the re-check 2 s later; then the holder's
/// release reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_client_info_the_recheck_still_wakes() {
    const RULES: &str = "resetchannels ~redbell:* &redbell:* -@all +evalsha +eval +type +ping \
        +subscribe +unsubscribe +publish +get +mget +set +del +exists +pttl +pexpire +time \
        +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcount +zcard +zscore +zmscore \
        +zrank +zpopmin +spublish +ssubscribe +sunsubscribe +cluster|slots +client|id";
    let cluster = Cluster::start().await;
    let password = unique("pw");
    for port in cluster.ports() {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg("locker")
            .arg("on")
            .arg(format!(">{password}"));
        for rule in RULES.split_whitespace() {
            cmd.arg(rule);
        }
        let _: () = must(port, &cmd).await;
    }
    let one = cluster.primaries().await[0].port;
    let a = cluster.name_on(one, "noinfo").await;
    let urls = cluster.urls();
    let as_locker: Vec<String> = urls
        .iter()
        .map(|u| u.replacen("redis://", &format!("redis://locker:{password}@"), 1))
        .collect();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    let waiting = cluster_client(&as_locker).await;
    let held = holder.mutex(&a).lock().await.expect("hold A");
    let waiter = spawn_passing_waiter(&waiting, &a);
    let subscribed = eventually_every(Duration::from_secs(10), POLL, || async {
        shard_subscribers(&[one], &a).await >= 1 && waiting.stats().waiters >= 1
    })
    .await;
    assert!(
        subscribed,
        "the waiting client never subscribed to A's shard"
    );

    let mut admin = conn(one).await;
    let sockets: Vec<u64> = client_list(&mut admin)
        .await
        .into_iter()
        .filter(|(_, line)| line.contains(" user=locker ") && !line.contains(" ssub=0 "))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(
        sockets.len(),
        1,
        "one socket of locker with sharded subscriptions"
    );
    let monitor = monitor_node(one).await;
    kill_client(&mut admin, sockets[0]).await;
    let window = Duration::from_secs(6);
    sleep(window).await;
    monitor.sync().await;
    let attempts = monitor.count(&["evalsha", script_sha("acquire"), &lock_key(&a)]);
    eprintln!("acquire attempts for A in {window:?} after its socket was killed: {attempts}");
    assert!(
        attempts >= 3,
        "A's waiter attempted {attempts} times in {window:?}: the re-check, which cannot name \
         the socket without +client|info, did not wake it"
    );

    held.unlock().await.expect("release A");
    timeout(Duration::from_secs(10), waiter)
        .await
        .expect("A's waiter did not get the lock within 10 s")
        .expect("A's waiter");
}

/// How late the shard's proxy delivers each chunk of replies to the
/// waiting client during [`a_wave_of_recoveries_is_not_woken_again_by_its_rechecks`]'s
/// wave: a keyed read's round trip takes at least that, whatever the
/// machine's load.
const WAVE_LAG: Duration = Duration::from_millis(2);

/// The waiting client's connect and response timeouts in that test: half
/// of it bounds a recovery's keyed read, well above the wave's few seconds
/// (about 3 s on a quiet machine, with [`WAVE_LAG`]), and no reply queued
/// behind the wave's on the lagging link times out.
const WAVE_CONNECT: Duration = Duration::from_secs(16);

/// Many waiters on one shard, one lock each, all in one client; the
/// shard's pub/sub socket is killed (`CLIENT KILL`). The hub recovers every
/// channel at once, and each recovery names its socket just before and
/// just after its SSUBSCRIBE, the "before" within half the connect timeout.
/// The keyed reads of a wave must not queue one by one: those late in the
/// queue would miss that bound (with a 2 s connect timeout, about a third
/// of 3,000 did), and their re-checks 2 s later would wake their waiters a
/// third time, a herd of wasted attempts.
///
/// How long a wave takes depends on the machine's load, so the test checks
/// the reads' order directly. The waiting client reaches the shard through
/// a proxy (the node announces the proxy's port) that delays every chunk
/// of replies by [`WAVE_LAG`] during the wave: reads one at a time reach
/// the node at least one lag apart, whatever the load, while reads that go
/// alongside one another arrive together. So of the keyed reads (`EXISTS`
/// in the node's MONITOR: a recovery's and a re-check's per lock), at
/// least a quarter as many as there are locks must follow the one before
/// by less than three quarters of a lag (about three in four of the 6,000
/// do; one at a time, none can). And in the window after the kill each lock
/// sees at most two acquire attempts (the loss, the recovery), but for
/// fewer than one in ten, the bound being generous. Then every release
/// reaches its waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_of_recoveries_is_not_woken_again_by_its_rechecks() {
    const LOCKS: usize = 3000;
    let cluster = Cluster::start().await;
    let node = cluster.primaries().await.swap_remove(0);
    let home = node.port;
    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(60), Duration::from_secs(2)).await;
    let names: Vec<String> = (0..LOCKS).map(|_| name_in(&node, "wave")).collect();
    let mutexes: Vec<_> = names.iter().map(|n| holder.mutex(n)).collect();
    let guards = join_all(mutexes.iter().map(|m| m.lock())).await;
    let guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.expect("hold a lock"))
        .collect();

    // The shard announced at the proxy's port, to every node, before the
    // waiting client (which is not told the shard's own port) looks.
    let proxy = Proxy::start(0, home).await.expect("a proxy");
    let _: () = must(
        home,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-announce-port")
            .arg(proxy.port()),
    )
    .await;
    let ports = cluster.ports();
    let (announced, own) = (format!(":{}@", proxy.port()), format!(":{home}@"));
    let told = eventually_every(Duration::from_secs(20), POLL, || {
        let (ports, announced, own) = (&ports, &announced, &own);
        async move {
            for &port in ports {
                let nodes: String = must(port, redis::cmd("CLUSTER").arg("NODES")).await;
                if !nodes.contains(announced.as_str()) || nodes.contains(own.as_str()) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    assert!(told, "the nodes were not told the proxy's port within 20 s");
    let elsewhere: Vec<&str> = urls
        .iter()
        .map(String::as_str)
        .filter(|u| !u.ends_with(&format!(":{home}")))
        .collect();
    let waiting = Client::cluster_builder(&elsewhere)
        .connect_timeout(WAVE_CONNECT)
        .response_timeout(WAVE_CONNECT)
        .connect()
        .await
        .expect("a waiting client");
    let waiters = park_waiters(&waiting, &names, Duration::from_secs(60)).await;
    let subscribed = eventually_every(Duration::from_secs(20), POLL, || async {
        shard_subscribers(&[home], &names[LOCKS - 1]).await >= 1
    })
    .await;
    assert!(subscribed, "the waiting client never subscribed");
    sleep(Duration::from_secs(1)).await; // every subscription made

    let mut admin = conn(home).await;
    let sockets: Vec<u64> = client_list(&mut admin)
        .await
        .into_iter()
        .filter(|(_, line)| !line.contains(" ssub=0 "))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(sockets.len(), 1, "one socket with sharded subscriptions");
    let monitor = monitor_node(home).await;
    proxy.lag_replies(WAVE_LAG);
    let killed = Instant::now();
    kill_client(&mut admin, sockets[0]).await;
    // The bound, a re-check's delay after it, and its wake-up.
    let window = WAVE_CONNECT / 2 + Duration::from_secs(4);
    sleep(window).await;
    monitor.sync().await; // what the node saw with the lag on

    // Acquire attempts per lock key, from one pass over the log.
    let mut attempts: HashMap<String, usize> = names.iter().map(|n| (lock_key(n), 0)).collect();
    let acquire = script_sha("acquire");
    for line in monitor.lines() {
        if !line.contains(acquire) {
            continue;
        }
        let key = line.split('"').find(|arg| attempts.contains_key(*arg));
        if let Some(count) = key.map(str::to_owned).and_then(|k| attempts.get_mut(&k)) {
            *count += 1;
        }
    }
    // The recovery's SSUBSCRIBEs (one per channel; the re-checks,
    // `CLUSTER_RECHECK` later, resubscribe once more).
    let subscribes: Vec<f64> = monitor
        .lines()
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("\"ssubscribe\""))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    let wave = &subscribes[..subscribes.len().min(LOCKS)];
    if let (Some(first), Some(last)) = (wave.first(), wave.last()) {
        eprintln!(
            "the first {} SSUBSCRIBEs after the kill took {:.0} ms from the first to the last",
            wave.len(),
            (last - first) * 1000.0
        );
    }
    // The keyed reads (the recoveries' and the re-checks', not the
    // scripts' calls): how many followed the one before by less than 3/4
    // of a lag.
    let reads: Vec<f64> = monitor
        .lines()
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("\"exists\"") && !l.contains(" lua]"))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    let close = WAVE_LAG.as_secs_f64() * 0.75;
    let together = reads.windows(2).filter(|w| w[1] - w[0] < close).count();
    eprintln!(
        "{} keyed reads, {together} of them less than {close:.4} s after the one before",
        reads.len()
    );
    assert!(
        together >= LOCKS / 4,
        "the keyed reads went one at a time: {together} of {} less than {close:.4} s after the \
         one before",
        reads.len()
    );
    let never = attempts.values().filter(|&&n| n == 0).count();
    let thrice: Vec<_> = attempts.iter().filter(|(_, n)| **n > 2).collect();
    eprintln!(
        "{LOCKS} locks, {:?} after the kill: {never} never attempted, {} attempted 3 times or more",
        killed.elapsed(),
        thrice.len()
    );
    assert_eq!(never, 0, "{never} waiters were not woken by the loss");
    assert!(
        thrice.len() < LOCKS / 10,
        "{} of {LOCKS} waiters were woken again by their re-check, e.g. {:?}",
        thrice.len(),
        thrice.iter().take(3).collect::<Vec<_>>()
    );

    proxy.lag_replies(Duration::ZERO);
    for guard in guards {
        guard.unlock().await.expect("release a lock");
    }
    for (i, w) in waiters.into_iter().enumerate() {
        timeout(Duration::from_secs(30), w)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} never got its lock"))
            .expect("waiter task");
    }
}

/// How many channels node `port` holds sharded subscriptions to (`PUBSUB
/// SHARDCHANNELS`); 0 when it cannot be asked.
async fn shard_channels(port: u16) -> usize {
    let channels: redis::RedisResult<Vec<String>> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(&mut conn(port).await)
        .await;
    channels.map_or(0, |c| c.len())
}

/// The sockets of ours with sharded subscriptions on node `port`, killed
/// (`CLIENT KILL`).
async fn kill_subscribed_sockets(port: u16) {
    let mut admin = conn(port).await;
    for (id, _) in client_list(&mut admin)
        .await
        .into_iter()
        .filter(|(_, line)| !line.contains(" ssub=0 "))
    {
        kill_client(&mut admin, id).await;
    }
}

/// Failovers that meet waves of recoveries: many waiters on two shards,
/// one lock each, all in one client; both shards' pub/sub sockets are
/// killed (`CLIENT KILL`) and both replicas promoted, one after the
/// other, as soon as a recovery's first keyed read reaches a primary (an `EXISTS` in its
/// MONITOR), so the waves' other keyed reads meet the failovers. Their
/// `MOVED` replies, too many at once, left the hub's redis-rs connection
/// answering nothing until two silent probes replaced it: with this
/// client's 5 s probe, no subscription reached the new primaries for 12 s.
/// Twice, back and forth: each time the subscriptions reach the new
/// primaries within 8 s, the hub keeps its connection, and the locks
/// released meanwhile (one every 100 ms) reach their waiters within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_that_meet_waves_of_recoveries_leave_the_hub_answering() {
    const PER_SHARD: usize = 1500;
    const RELEASED: usize = 10;
    let cluster = Cluster::start().await;
    let nodes = cluster.primaries().await;
    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(60), Duration::from_secs(2)).await;
    // A slow probe: a connection that answers nothing is replaced late,
    // and shows as long waits.
    let waiting = Client::cluster_builder(urls.iter().map(String::as_str).collect::<Vec<_>>())
        .probe_interval(Duration::from_secs(5))
        .connect()
        .await
        .expect("the waiting client");
    // Alternately on the two shards.
    let names: Vec<String> = (0..2 * PER_SHARD)
        .map(|i| name_in(&nodes[i % 2], "meets"))
        .collect();
    let mutexes: Vec<_> = names.iter().map(|n| holder.mutex(n)).collect();
    let guards = join_all(mutexes.iter().map(|m| m.lock())).await;
    let mut guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.expect("hold a lock"))
        .collect();
    let mut waiters = park_waiters(&waiting, &names, Duration::from_secs(60)).await;
    let subscribed = eventually_every(Duration::from_secs(20), POLL, || async {
        shard_channels(nodes[0].port).await >= PER_SHARD
            && shard_channels(nodes[1].port).await >= PER_SHARD
    })
    .await;
    assert!(subscribed, "the waiting client never subscribed");
    sleep(Duration::from_secs(1)).await;

    let slots = [slot_of(&names[0]), slot_of(&names[1])];
    for round in 0..2 {
        let (a, b) = (cluster.owner(slots[0]).await, cluster.owner(slots[1]).await);
        let (ra, rb) = (cluster.replica_of(a).await, cluster.replica_of(b).await);
        let monitor = monitor_node(a).await;
        let mark = monitor.mark();
        kill_subscribed_sockets(a).await;
        kill_subscribed_sockets(b).await;
        let read = eventually_every(Duration::from_secs(5), Duration::from_millis(1), || async {
            monitor.count_since(mark, &["\"exists\""]) > 0
        })
        .await;
        // One after the other: two elections at once may both lose.
        let promoted = (cluster.promote(ra).await, cluster.promote(rb).await);
        drop(monitor);
        eprintln!("round {round}: a keyed read seen: {read}; promoted after {promoted:?}");
        let start = Instant::now();
        let mut released = Vec::new();
        for (k, guard) in guards.drain(..RELEASED).enumerate() {
            let due = start + Duration::from_millis(100) * u32::try_from(k).expect("a few");
            tokio::time::sleep_until(due).await;
            match guard.unlock().await {
                Ok(()) => released.push(Some(Instant::now())),
                Err(e) if retryable(&e) => released.push(None),
                Err(e) => panic!("release a lock: {e}"),
            }
        }
        // Each shard keeps half the locks not released.
        let left = guards.len() / 2;
        let moved = eventually_every(
            (start + Duration::from_secs(8)).saturating_duration_since(Instant::now()),
            POLL,
            || async { shard_channels(ra).await >= left && shard_channels(rb).await >= left },
        )
        .await;
        eprintln!(
            "round {round}: {} and {} of {left} channels each on the new primaries after {:?}",
            shard_channels(ra).await,
            shard_channels(rb).await,
            start.elapsed()
        );
        assert!(
            moved,
            "round {round}: 8 s after the promotions, the subscriptions are not all on the new primaries"
        );
        for (waiter, released) in waiters.drain(..RELEASED).zip(released) {
            let Some(released) = released else {
                waiter.abort();
                continue;
            };
            let got = timeout(Duration::from_secs(40), waiter)
                .await
                .expect("a waiter never got its lock")
                .expect("waiter task");
            let wait = got.saturating_duration_since(released);
            assert!(
                wait < Duration::from_secs(5),
                "round {round}: a waiter got its lock {wait:?} after its release"
            );
        }
        assert_eq!(
            waiting.stats().hub_reconnects,
            0,
            "round {round}: the hub had to replace its connection"
        );
        sleep(Duration::from_secs(3)).await; // the re-checks done
        cluster.wait_stable("after the round").await;
    }

    for guard in guards {
        guard.unlock().await.expect("release a lock");
    }
    for (i, w) in waiters.into_iter().enumerate() {
        timeout(Duration::from_secs(30), w)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} never got its lock"))
            .expect("waiter task");
    }
}
