//! Sentinel failover: clients follow the primary the sentinels name (parked
//! waiters, idle clients, clients that missed the announcement or connect
//! mid-failover, semaphores and elections), and `sentinel.sh` itself. Each
//! test on a real topology of its own (a primary, a replica and three
//! sentinels, on free ports: [`Topology`], in the helper crate's `sentinel`
//! module, which describes the harness). (What a failover loses:
//! `sentinel_window.rs`.)
//!
//! The measured numbers (failover times) are printed to stderr: `cargo test
//! --test sentinel -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell::{Client, Error};
use redbell_integration_tests::sentinel::{
    MASTER, Topology, free_layout_base, on_old_primary_until_moved, replica_caught_up,
    sentinel_agrees, sentinel_client, works_again,
};
use redbell_integration_tests::{
    Monitor, Proxy, exists, get, join_waiters, lock_key, node_url, query, raw, replication_field,
    script_sha, set_px, spawn_waiter, spread, unique, wait_for_subscribers, waiter_errors,
};
use tokio::time::{Instant, sleep, timeout};

// ------------------------------------------------------------ failover

/// Through a failover (the primary SIGKILLed) the client keeps working: a
/// lock is taken and released on the new primary within seconds; the lock
/// held across the failover is still held (it was replicated); three
/// waiters in two clients, parked across the failover, stay parked until
/// the holder releases on the new primary, then get the lock one after the
/// other, within seconds (the holder's lease is 60 s: no expiry helps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_failover_and_parked_waiters_get_the_lock() {
    let topo = Topology::start().await;
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
    let waiters: Vec<_> = [&wa, &wa, &wb]
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(&name), inside.clone()))
        .collect();
    wait_for_subscribers(&topo.primary_url(), &name, 2).await;
    // Give the third waiter time to park too, then make sure the replica
    // has the holder's key and the waiter queue.
    sleep(Duration::from_millis(200)).await;
    assert!(
        replica_caught_up(&topo.primary_url()).await,
        "the replica did not catch up before the kill"
    );

    let killed = Instant::now();
    topo.kill_primary().await;
    let failover = topo.wait_for_failover().await;

    let failed = works_again(&holder, Duration::from_secs(15)).await;
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
    let got = join_waiters(waiters, Duration::from_secs(20)).await;
    let (first, last) = spread(&got, released);
    let errors = waiter_errors(&got, killed);
    eprintln!(
        "failover: sentinels switched {failover:?} after the kill; lock+unlock on the new \
         primary {working:?} after the kill ({failed} retryable errors first); waiters got the \
         lock {first:?} .. {last:?} after the release; {} retryable errors from the waiters' \
         calls (first {:?}, last {:?} after the kill)",
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
    let unlock_errors: Vec<_> = errors
        .iter()
        .filter(|(_, e)| e.starts_with("unlock: "))
        .collect();
    assert!(
        unlock_errors.is_empty(),
        "a waiter's unlock on the new primary failed: {unlock_errors:?}"
    );
}

/// `SENTINEL FAILOVER` leaves the old primary answering as a primary until
/// the sentinels convert it (8 s or more later), and a client that saw no
/// error has no reason to ask where the primary is: it went on granting
/// locks on the old primary, which the new one knew nothing of (the soak
/// found two holders that way). The client follows the sentinels'
/// `+switch-master` announcement instead: its next lock is on the new
/// primary within a second of the sentinels naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_moves_to_the_new_primary_when_a_sentinel_announces_it() {
    let topo = Topology::start().await;
    let client = sentinel_client(&topo).await;
    let name = unique("announced");
    let warm = client.mutex(&name).lock().await.expect("lock before");
    warm.unlock().await.expect("unlock before");

    let failover = topo.sentinel_failover(0).await;
    let switched = Instant::now();

    let on_old = on_old_primary_until_moved(
        &client,
        &topo,
        &name,
        (switched, Duration::from_secs(3)),
        "after the sentinels named the new one",
    )
    .await;
    let moved = switched.elapsed();
    eprintln!(
        "SENTINEL FAILOVER: sentinels agreed after {failover:?}; the client's locks were on \
         the new primary {moved:?} after that ({on_old} granted on the old one first)"
    );
}

/// Before: a client that was not listening when a sentinel announced a
/// switch (its subscription lost, or, in the soak, not yet made: it had
/// just been told of the old primary) stayed on the old primary, which
/// still answers as one until the sentinels convert it, seconds later (the
/// soak: a FairMutex held on both primaries for 7 s, seed
/// 7087532376230508015). Here the client's one sentinel is unreachable
/// (behind a proxy that is cut) while the failover happens, and reachable
/// again once the sentinels agree; the client's locks must land on the new
/// primary within seconds, long before the old one is converted. Now every
/// subscription after the first is followed by a look at the primary, and
/// the first is made before the client first asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_missed_the_announcement_moves_once_it_hears_the_sentinel_again() {
    let topo = Topology::start().await;
    let sentinel_port = topo.sentinel_ports()[0];
    let proxy = Proxy::start(0, sentinel_port).await.expect("a proxy");
    let port = proxy.port();
    let client = Client::sentinel(&[proxy.url().as_str()], MASTER)
        .await
        .expect("a client of the sentinel behind the proxy");
    let name = unique("missed");
    let warm = client.mutex(&name).lock().await.expect("lock before");
    warm.unlock().await.expect("unlock before");

    proxy.cut().await.expect("cut the proxy"); // its subscription dropped, and no new connection
    topo.sentinel_failover(1).await;
    let _proxy = Proxy::start(port, sentinel_port).await.expect("a proxy"); // reachable again
    let back = Instant::now();

    let on_old = on_old_primary_until_moved(
        &client,
        &topo,
        &name,
        (back, Duration::from_secs(4)),
        "after the client's sentinel was reachable again, the failover long agreed",
    )
    .await;
    eprintln!(
        "the client's locks were on the new primary {:?} after its sentinel was back \
         ({on_old} granted on the old one first)",
        back.elapsed()
    );
}

/// A lock asked of a node that is now a replica (what a demoted primary
/// becomes) fails with the server's `READONLY`, which sends a Sentinel
/// client to look for the new primary. The acquire script used to turn every
/// refusal of its first write into `WrongType`, a permanent error that
/// callers give up on and that hid the failover (the soak saw 11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_asked_of_a_replica_reports_readonly_not_a_wrong_type() {
    let topo = Topology::start().await;
    let on_replica = Client::connect(topo.replica_url())
        .await
        .expect("a client of the replica");
    let name = unique("on-replica");
    let err = on_replica
        .mutex(&name)
        .try_lock()
        .await
        .expect_err("a replica cannot grant a lock");
    match &err {
        Error::Redis(e) => assert_eq!(e.code(), Some("READONLY"), "{err}"),
        other => panic!("expected the server's READONLY, got {other:?}"),
    }
    assert!(err.is_retryable(), "READONLY should be retryable: {err}");
}

/// A client that connects while the node the sentinels name is not a
/// primary (here the primary demoted by hand, as mid-failover) keeps asking
/// for a few seconds instead of failing at once, and connects when a
/// primary is back. (It used to fail at once: "the node a sentinel named
/// is not the primary".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connecting_mid_failover_waits_for_the_primary() {
    let topo = Topology::start().await;
    let mut primary = raw(&topo.primary_url()).await;
    let demote = |host_port: Option<u16>| {
        let mut cmd = redis::cmd("REPLICAOF");
        match host_port {
            Some(port) => cmd.arg("127.0.0.1").arg(port),
            None => cmd.arg("NO").arg("ONE"),
        };
        cmd
    };
    let _: String = demote(Some(topo.replica_port()))
        .query_async(&mut primary)
        .await
        .expect("REPLICAOF of the primary");
    let urls = topo.sentinel_urls();
    let connecting = tokio::spawn(async move {
        let started = Instant::now();
        let client = Client::sentinel(&urls, MASTER).await;
        (client, started.elapsed())
    });
    sleep(Duration::from_millis(1200)).await;
    let _: String = demote(None)
        .query_async(&mut primary)
        .await
        .expect("REPLICAOF NO ONE");
    let (client, took) = timeout(Duration::from_secs(15), connecting)
        .await
        .expect("Client::sentinel returned")
        .unwrap();
    let client = client.unwrap_or_else(|e| panic!("connecting mid-failover failed: {e}"));
    eprintln!("connected {took:?} after asking, the primary back after 1.2 s");
    assert!(
        took >= Duration::from_millis(1000),
        "connected before a primary was back: {took:?}"
    );
    let guard = client
        .mutex(&unique("mid-failover"))
        .try_lock()
        .await
        .expect("a lock on the primary")
        .expect("free");
    guard.unlock().await.unwrap();
}

/// A waiter parked across a primary SIGKILL, whose park ends before the
/// failover: its attempt is refused at connect (it never reached Redis), and
/// `lock()` fails at once with that error. Nothing is left to release:
/// `Client::shutdown` has no background work to wait for, and the new
/// primary runs no release of its token. `redbell run` waits for that work
/// before it exits: in a Sentinel soak its waiters exited with 69 two
/// seconds after the new primary was up (4 s after the kill), the lock free
/// meanwhile.
///
/// Before: the release was queued as for an attempt of unknown outcome and
/// retried (50 ms, 250 ms, 1 s, 2 s apart) until the new primary ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_refused_during_a_failover_leaves_no_release_behind() {
    let topo = Topology::start().await;
    let name = unique("refused-attempt");
    // A crashed holder's key: the waiter parks on its PTTL, which ends
    // after the kill and before the failover (down-after 1 s).
    let foreign = "m0123456789abcdef0123456789abcdef";
    set_px(
        &mut raw(&topo.primary_url()).await,
        &lock_key(&name),
        foreign,
        1500,
    )
    .await;
    let set = Instant::now();
    let c = sentinel_client(&topo).await;
    let mutex = c.mutex(&name);
    let waiter = tokio::spawn(async move { mutex.lock().await });
    wait_for_subscribers(&topo.primary_url(), &name, 1).await;
    assert!(replica_caught_up(&topo.primary_url()).await);
    sleep(Duration::from_millis(1000).saturating_sub(set.elapsed())).await;
    topo.kill_primary().await;
    let e = timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter hung")
        .expect("the waiter panicked")
        .expect_err("the waiter got the lock before the failover");
    assert!(
        matches!(&e, Error::Redis(r) if r.is_connection_refusal()),
        "the attempt was not refused at connect: {e:?}"
    );
    // (The sentinels kill the clients of the node they promote: watch it
    // from then on.)
    topo.wait_for_failover().await;
    let monitor = Monitor::start(&topo.replica_url()).await;
    let drained = timeout(Duration::from_secs(10), c.shutdown())
        .await
        .expect("shutdown hung");
    // `shutdown` returned once the background work was done: a release, had
    // one been queued, ran on the new primary (its retry 3.3 s after the
    // refusal), unless the failover took longer than that. The waiter's
    // pass-on of its member runs there too: that one is due.
    let release = format!("\"evalsha\" \"{}\"", script_sha("release"));
    monitor.sync().await;
    let ran = monitor.count(&[&release]);
    assert!(
        ran == 0 && drained.is_ok(),
        "a release was queued for an attempt that never reached Redis: the new primary ran it \
         {ran} times; shutdown: {drained:?}"
    );
}

/// A semaphore and an election through a failover (the primary
/// SIGKILLed): the permits and the leadership held across it were
/// replicated and stay held (neither lost); a waiter parked for the full
/// semaphore gets a permit within seconds of a release on the new primary;
/// after the leader resigns there, a campaigner parked across the failover
/// is elected in a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_and_an_election_carry_on_through_a_failover() {
    let topo = Topology::start().await;
    let (a, b) = (sentinel_client(&topo).await, sentinel_client(&topo).await);
    let (sem, vote) = (unique("failover-sem"), unique("failover-vote"));
    let lease = Duration::from_secs(60);
    let first = a
        .semaphore(&sem, 2)
        .with_lease(lease)
        .acquire()
        .await
        .expect("permit 1");
    let second = a
        .semaphore(&sem, 2)
        .with_lease(lease)
        .acquire()
        .await
        .expect("permit 2");
    let leader = a.election(&vote).campaign("a").await.expect("a leads");
    let term = leader.term();

    // Both retry what a failover makes them meet (retryable errors), as a
    // caller would; anything else ends them.
    let waiting = b.semaphore(&sem, 2).with_lease(lease);
    let permit_waiter = tokio::spawn(async move {
        loop {
            match waiting.acquire().await {
                Err(e) if e.is_retryable() => sleep(Duration::from_millis(50)).await,
                other => return other.map(|p| p.fence()),
            }
        }
    });
    let election = b.election(&vote);
    let campaigner = tokio::spawn(async move {
        loop {
            match election.campaign("b").await {
                Err(e) if e.is_retryable() => sleep(Duration::from_millis(50)).await,
                other => return other.map(|l| l.term()),
            }
        }
    });
    sleep(Duration::from_millis(500)).await;
    assert!(
        replica_caught_up(&topo.primary_url()).await,
        "the replica did not catch up before the kill"
    );
    topo.kill_primary().await;
    topo.wait_for_failover().await;
    sleep(Duration::from_secs(1)).await;
    assert!(
        !permit_waiter.is_finished(),
        "the permit waiter ended: {:?}",
        permit_waiter.await
    );
    assert!(
        !campaigner.is_finished(),
        "the campaigner ended: {:?}",
        campaigner.await
    );
    assert!(!first.is_lost() && !second.is_lost() && !leader.is_lost());

    works_again(&a, Duration::from_secs(15)).await;
    let released = Instant::now();
    first.unlock().await.expect("release on the new primary");
    let fence = timeout(Duration::from_secs(10), permit_waiter)
        .await
        .expect("the permit waiter was not served within 10 s of the release")
        .expect("task")
        .expect("the waiter's permit");
    let served = released.elapsed();
    assert!(fence > second.fence());

    leader.resign().await.expect("resign on the new primary");
    let next = timeout(Duration::from_secs(10), campaigner)
        .await
        .expect("the campaigner was not elected within 10 s of the resignation")
        .expect("task")
        .expect("b's leadership");
    assert!(next > term, "term {next} after term {term}");
    second.unlock().await.expect("release");
    eprintln!("semaphore waiter served {served:?} after the release; next term {next} > {term}");
}

// -------------------------------------------------------------- window

/// `scripts/redis/sentinel.sh start BASE` brings up a healthy topology and
/// prints the three sentinel URLs, which a redbell client can use;
/// `stop BASE` takes all five processes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_sh_starts_and_stops_a_topology() {
    let base = free_layout_base();
    let (mut started, urls) = Topology::start_at(base, &[]).await;
    let expected: Vec<String> = [10, 11, 12].iter().map(|o| node_url(base + o)).collect();
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
    let c = Client::sentinel(&urls, MASTER)
        .await
        .expect("a client through the script's sentinels");
    let name = unique("script");
    let g = c.mutex(&name).lock().await.expect("lock");
    let mut primary = raw(&node_url(base)).await;
    assert!(exists(&mut primary, &lock_key(&name)).await);
    g.unlock().await.expect("unlock");
    drop(c);

    started.stop().await;
    for o in [0, 1, 10, 11, 12] {
        let pong: Option<String> = query(base + o, &redis::cmd("PING")).await;
        assert_eq!(pong, None, "port {} still answers after stop", base + o);
    }
    let _ = std::fs::remove_dir_all(started.dir());
}
