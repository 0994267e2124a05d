//! Redis Cluster: a server's `sunsubscribe` push (the slot of a channel
//! moved to another primary) that arrives while the hub's own subscription
//! of that channel is still being made. The push must not be lost: the
//! channel is subscribed again on the slot's new primary, and a release
//! there reaches its waiter at once, not when the waiter's park (the
//! holder's lease) runs out.
//!
//! Each test starts a fresh cluster of its own ([`Cluster`], in the helper
//! crate's `cluster` module). The figures are printed to stderr:
//! `cargo test --test cluster_dropped -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::cluster::{
    Cluster, cluster_client_with, conn, queue_waiters, slot_of, zcard,
};
use redbell_integration_tests::{
    POLL, eventually_every, spawn_passing_waiter, unique, waiters_key,
};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

/// Locks in the slot that moves.
const MOVED: usize = 50;

/// The waiting client's subscription linger.
const LINGER: Duration = Duration::from_secs(1);

/// The slot S that moves, with its lock names.
struct Slot {
    /// The three primaries' ports: S is P1's.
    ports: [u16; 3],
    /// S: P1's first slot.
    slot: u16,
    /// [`MOVED`] lock names in S.
    names: Vec<String>,
    /// A `PUBSUB SHARDCHANNELS` pattern matching their channels alone.
    pattern: String,
}

impl Slot {
    /// The first slot of the first primary, and `MOVED` fresh names in it
    /// (`tag` keeps the tests' names apart).
    async fn on_first(cluster: &Cluster, tag: &str) -> Slot {
        let primaries = cluster.primaries().await;
        let slot = (0u16..16384)
            .find(|s| primaries[0].serves(*s))
            .expect("P1 serves a slot");
        let prefix = format!("{}-{tag}", &unique("dropped")[..16]);
        let pattern = format!("redbell:{{{prefix}-*");
        let names = tokio::task::spawn_blocking(move || {
            (0u64..)
                .map(|i| format!("{prefix}-{i}"))
                .filter(|name| slot_of(name) == slot)
                .take(MOVED)
                .collect()
        })
        .await
        .expect("names");
        Slot {
            ports: [primaries[0].port, primaries[1].port, primaries[2].port],
            slot,
            names,
            pattern,
        }
    }
}

/// The waiting client: a [`LINGER`] subscription linger, a probe every
/// `probe`, and connect and response timeouts of `timeout`.
async fn waiting_client(urls: &[String], probe: Duration, timeout: Duration) -> Client {
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster_builder(&seeds)
        .subscription_linger(LINGER)
        .probe_interval(probe)
        .connect_timeout(timeout)
        .response_timeout(timeout)
        .connect()
        .await
        .expect("the waiting client")
}

/// One `CLUSTER SETSLOT slot <what> <id>` on node `port`.
async fn setslot(port: u16, slot: u16, what: &str, id: &str) {
    setslot_on(&mut conn(port).await, slot, what, id).await;
}

/// One `CLUSTER SETSLOT slot <what> <id>` on connection `c`.
async fn setslot_on(c: &mut MultiplexedConnection, slot: u16, what: &str, id: &str) {
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(what)
        .arg(id)
        .query_async(c)
        .await
        .unwrap_or_else(|e| panic!("SETSLOT {slot} {what}: {e}"));
}

/// How many sharded channels matching `pattern` node `port` has
/// subscribers for (`PUBSUB SHARDCHANNELS`).
async fn shard_channels(c: &mut MultiplexedConnection, pattern: &str) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg(pattern)
        .query_async(c)
        .await
        .expect("PUBSUB SHARDCHANNELS");
    channels.len()
}

/// Releases every lock in `held`, then gives the `waiters` 5 s from the
/// first release to get theirs; how long the releases took, and how many
/// waiters did not get their lock in time.
async fn release_and_count_late(
    held: Vec<redbell::MutexGuard>,
    waiters: Vec<JoinHandle<Instant>>,
) -> (Duration, usize) {
    let released = Instant::now();
    for guard in held {
        guard.unlock().await.expect("release S's lock");
    }
    let releasing = released.elapsed();
    let mut late = 0;
    for mut w in waiters {
        let left = Duration::from_secs(5).saturating_sub(released.elapsed());
        match timeout(left, &mut w).await {
            Ok(at) => {
                at.expect("waiter");
            }
            Err(_) => {
                late += 1;
                w.abort();
            }
        }
    }
    (releasing, late)
}

/// `CLIENT PAUSE ms ALL` on node `port`: it executes no client's command
/// for `pause` (the cluster bus carries on, so nobody fails it over).
async fn pause(port: u16, pause: Duration) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(millis(pause))
        .arg("ALL")
        .query_async(&mut conn(port).await)
        .await
        .unwrap_or_else(|e| panic!("node {port}: CLIENT PAUSE: {e}"));
}

/// `d` in whole milliseconds (at least 1).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The hub of a waiting client completes its subscriptions of 50 lock
/// channels (all in one slot, S, on primary P1) only after P1 dropped them
/// with `sunsubscribe` pushes, S having moved to P3. The hub's control task
/// is held up twice by the SUNSUBSCRIBE of a channel on P2 whose waiter
/// left (at the end of the 1 s linger), sent while P2 is paused (`CLIENT
/// PAUSE ALL`): it waits for P2's answer.
///
/// 1. While it waits, the client parks a waiter on each of S's 50 held
///    locks: their attempts queue on P1, their subscriptions wait for the
///    control task. P1 is then paused.
/// 2. P2 resumes; the control task sends the 50 SSUBSCRIBEs, which wait for
///    P1. P2 is paused again, and the control task waits for it again.
/// 3. P1 resumes and makes the 50 subscriptions, then moves S to P3
///    (`SETSLOT MIGRATING`, sent while P1 was paused, `MIGRATE`, `SETSLOT
///    NODE` on P1 first): P1 drops the 50 subscriptions, before the
///    control task, still waiting for P2, has recorded them as made.
///
/// Afterwards P3 must hold a subscription to each of the 50 channels, and
/// once the holder releases the 50 locks every waiter must have its lock
/// within 5 s; a lost push shows as a waiter parked until the holder's
/// 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sunsubscribe_while_subscribing_loses_no_wakeup() {
    let cluster = Cluster::start().await;
    let Slot {
        ports: [p1, p2, p3],
        slot,
        names,
        pattern,
    } = Slot::on_first(&cluster, "s").await;
    let (p1_id, p3_id) = (cluster.id_of(p1).await, cluster.id_of(p3).await);
    let on_p2 = [
        cluster.name_on(p2, "dropped-p2").await,
        cluster.name_on(p2, "dropped-p2").await,
    ];

    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    // Timeouts longer than the pauses its commands wait out; no periodic
    // probe meanwhile.
    let waiting = waiting_client(&urls, Duration::from_secs(60), Duration::from_secs(3)).await;
    let mut held_p2 = Vec::new();
    let mut leaving = Vec::new();
    for name in &on_p2 {
        held_p2.push(holder.mutex(name).lock().await.expect("hold P2's lock"));
        let inside = Arc::new(AtomicUsize::new(0));
        leaving.extend(queue_waiters(&[&waiting], name, p2, &inside, "P2's waiter").await);
    }
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.mutex(name).lock().await.expect("hold S's lock"));
    }
    // Opened now: they wait out P1's pause (a fresh one would time out).
    let mut admin_p1 = conn(p1).await;
    admin_p1.set_response_timeout(Duration::from_secs(10));
    let mut migrate_p1 = conn(p1).await;
    migrate_p1.set_response_timeout(Duration::from_secs(10));
    setslot(p3, slot, "IMPORTING", &p1_id).await;

    // 1. The control task waits for P2 while the waiters queue on P1. `t`:
    // when the first SUNSUBSCRIBE is due (sent at the next 100 ms tick).
    leaving[0].abort();
    let t = Instant::now() + LINGER;
    sleep_until(t - Duration::from_millis(300)).await;
    pause(p2, Duration::from_millis(1300)).await;
    sleep_until(t + Duration::from_millis(300)).await;
    let waiters: Vec<_> = names
        .iter()
        .map(|n| spawn_passing_waiter(&waiting, n))
        .collect();
    leaving[1].abort(); // its SUNSUBSCRIBE is due at t + 0.6 s + LINGER
    let queued = eventually_every(
        Duration::from_millis(500),
        Duration::from_millis(10),
        || async {
            let mut queued = 0;
            for name in &names {
                queued += zcard(p1, &waiters_key(name)).await;
            }
            queued == i64::try_from(MOVED).expect("50")
        },
    )
    .await;
    let early = shard_channels(&mut admin_p1, &pattern).await;
    let p1_resumes = t + Duration::from_millis(2000);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(millis(p1_resumes - Instant::now()))
        .arg("ALL")
        .query_async(&mut admin_p1)
        .await
        .expect("CLIENT PAUSE on P1");
    assert!(
        queued,
        "the waiters' attempts did not all queue on P1 within 0.5 s"
    );
    assert_eq!(early, 0, "the hub subscribed while it waited for P2");
    assert!(
        Instant::now() < t + Duration::from_millis(1000),
        "P2 resumed before P1 was paused"
    );

    // 2. The control task sends the SSUBSCRIBEs, then waits for P2 again.
    sleep_until(t + Duration::from_millis(1200)).await;
    pause(p2, Duration::from_millis(2000)).await;
    let p2_resumes = t + Duration::from_millis(3200);

    // 3. P1 makes the subscriptions, then the slot moves.
    sleep_until(p1_resumes - Duration::from_millis(200)).await;
    setslot_on(&mut migrate_p1, slot, "MIGRATING", &p3_id).await;
    let made = shard_channels(&mut admin_p1, &pattern).await;
    redbell_testkit::migrate_keys(&mut admin_p1, slot, p3)
        .await
        .expect("MIGRATE of S's keys");
    setslot_on(&mut admin_p1, slot, "NODE", &p3_id).await;
    let moved_at = Instant::now();
    setslot(p3, slot, "NODE", &p3_id).await;
    eprintln!(
        "{made} of S's {MOVED} channels subscribed on P1 when it resumed; S moved {:?} after \
         that, {:?} before P2 resumes",
        moved_at.saturating_duration_since(p1_resumes),
        p2_resumes.saturating_duration_since(moved_at),
    );
    assert_eq!(
        made, MOVED,
        "the SSUBSCRIBEs had not been made on P1 when it resumed"
    );
    assert!(moved_at < p2_resumes, "P2 resumed before the slot moved");
    sleep_until(p2_resumes + Duration::from_millis(100)).await;
    setslot(p2, slot, "NODE", &p3_id).await;
    cluster.wait_stable("after the slot moved").await;

    // Every waiter parked (none still in an attempt) before the release.
    let all = i64::try_from(MOVED).expect("50");
    let parked = eventually_every(Duration::from_secs(10), POLL, || async {
        waiting.stats().waiters >= all
    })
    .await;
    assert!(parked, "the waiters did not all park");
    let subscribed = eventually_every(Duration::from_secs(5), POLL, || async {
        shard_channels(&mut conn(p3).await, &pattern).await == MOVED
    })
    .await;
    let on_p3 = shard_channels(&mut conn(p3).await, &pattern).await;
    let (releasing, late) = release_and_count_late(held, waiters).await;
    eprintln!(
        "after the move: {on_p3} of S's {MOVED} channels subscribed on P3; the releases took \
         {releasing:?}; waiters without their lock 5 s after the release: {late}"
    );
    assert_eq!(late, 0, "{late} of S's waiters missed their wake-up");
    assert!(
        subscribed,
        "only {on_p3} of S's {MOVED} channels subscribed on P3"
    );
    for guard in held_p2 {
        guard.unlock().await.expect("release P2's lock");
    }
}

/// Moves `slot` from primary `a` to primary `b` (`IMPORTING`,
/// `MIGRATING`, `MIGRATE`, `SETSLOT NODE` on `a` first, then `b`), on
/// fresh connections. Unlike [`Cluster::move_slot`], it does not tell the
/// third primary, which may be paused.
async fn move_now(slot: u16, (a, a_id): (u16, &str), (b, b_id): (u16, &str)) {
    setslot(b, slot, "IMPORTING", a_id).await;
    let mut on_a = conn(a).await;
    setslot_on(&mut on_a, slot, "MIGRATING", b_id).await;
    redbell_testkit::migrate_keys(&mut on_a, slot, b)
        .await
        .expect("MIGRATE of the slot's keys");
    setslot_on(&mut on_a, slot, "NODE", b_id).await;
    setslot(b, slot, "NODE", b_id).await;
}

/// The same for the subscriptions a recovery makes, which it re-checks
/// 2 s later: the slot moves away and back before the re-check, so the
/// re-check finds its subscription where the recovery made it and wakes
/// nobody. The client's 50 waiters on S are parked and subscribed on P1
/// when P1 is paused (4 s): its next probe (every 2 s) times out on P1
/// after 1 s, and the hub resubscribes S's 50 channels, each waiting for
/// P1. The control task is then held up by an SUNSUBSCRIBE to a paused P2
/// as above; P1 resumes and makes the subscriptions, S moves to P3 and
/// back, and only then does P2 resume. The holder releases S's 50 locks
/// 0.5 s later, before the re-checks: every waiter must have its lock
/// within 5 s (a lost push: the holder's 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sunsubscribe_while_recovering_loses_no_wakeup() {
    let cluster = Cluster::start().await;
    let Slot {
        ports: [p1, p2, p3],
        slot,
        names,
        pattern,
    } = Slot::on_first(&cluster, "r").await;
    let (p1_id, p3_id) = (cluster.id_of(p1).await, cluster.id_of(p3).await);
    let on_p2 = cluster.name_on(p2, "dropped-p2").await;

    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    let waiting = waiting_client(&urls, Duration::from_secs(2), Duration::from_secs(4)).await;
    let held_p2 = holder.mutex(&on_p2).lock().await.expect("hold P2's lock");
    let inside = Arc::new(AtomicUsize::new(0));
    let leaving = queue_waiters(&[&waiting], &on_p2, p2, &inside, "P2's waiter").await;
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.mutex(name).lock().await.expect("hold S's lock"));
    }
    let waiters: Vec<_> = names
        .iter()
        .map(|n| spawn_passing_waiter(&waiting, n))
        .collect();
    let all = i64::try_from(MOVED + 1).expect("51");
    let subscribed = eventually_every(Duration::from_secs(10), POLL, || async {
        waiting.stats().waiters >= all
            && shard_channels(&mut conn(p1).await, &pattern).await == MOVED
    })
    .await;
    assert!(subscribed, "S's waiters did not all park, subscribed on P1");

    // P1 stops answering: a probe (every 2 s) times out on it after 1 s
    // and the hub resubscribes S's channels, which wait for P1.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("ALL")
        .query_async(&mut conn(p1).await)
        .await
        .expect("CLIENT PAUSE on P1");
    let paused = Instant::now();
    let p1_resumes = paused + Duration::from_millis(4000);
    sleep_until(paused + Duration::from_millis(2400)).await;
    leaving[0].abort();
    sleep_until(paused + Duration::from_millis(3300)).await;
    pause(p2, Duration::from_millis(2000)).await;
    let p2_resumes = paused + Duration::from_millis(5300);
    sleep_until(p1_resumes + Duration::from_millis(300)).await;
    let made = shard_channels(&mut conn(p1).await, &pattern).await;
    move_now(slot, (p1, &p1_id), (p3, &p3_id)).await;
    move_now(slot, (p3, &p3_id), (p1, &p1_id)).await;
    let moved_at = Instant::now();
    eprintln!(
        "{made} of S's {MOVED} channels subscribed on P1 300 ms after it resumed; S moved \
         away and back {:?} before P2 resumes",
        p2_resumes.saturating_duration_since(moved_at),
    );
    assert!(
        moved_at < p2_resumes,
        "P2 resumed before the slot moved back"
    );
    sleep_until(p2_resumes + Duration::from_millis(500)).await;
    let on_p1 = shard_channels(&mut conn(p1).await, &pattern).await;
    let (_, late) = release_and_count_late(held, waiters).await;
    eprintln!(
        "at the release: {on_p1} of S's {MOVED} channels subscribed on P1; waiters without \
         their lock 5 s after the release: {late}"
    );
    assert_eq!(late, 0, "{late} of S's waiters missed their wake-up");
    held_p2.unlock().await.expect("release P2's lock");
}
