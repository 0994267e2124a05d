//! The counting semaphore against a real Redis, in one process: never more
//! than N holders, FIFO order, releases that are not ours refused, a
//! mismatched permit count refused, no traffic while parked, cancel storms,
//! a frozen woken waiter, renewal and status, and a Redis Cluster. (Holders
//! and waiters in processes of their own: `semaphore_processes.rs`.)
//!
//! The measured figures are printed to stderr:
//! `cargo test --test semaphore -- --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::cluster::{Cluster, cluster_client};
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, Side, client, eventually, fence_key, hash_tag, holders_key, permits_key,
    queue_key, raw, redis_url, renewing_client, script_sha, unique, wait_for_members,
    wait_for_parked, warm_up, zcard,
};
use tokio::time::{Instant, sleep, timeout};

/// How long a live waiter may take to get a free permit after the release
/// that freed it, frozen waiters ahead or not (as for the Mutex).
const BOUND: Duration = Duration::from_secs(1);

/// N permits are handed out, not one more; each has its own token and a
/// fence greater than every earlier one; a release lets the next one in.
#[tokio::test]
async fn at_most_n_permits_with_increasing_fences() {
    let url = redis_url();
    let name = unique("sem-basic");
    let c = client(&url).await;
    let sem = c.semaphore(&name, 3);
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(sem.try_acquire().await.unwrap().expect("a free permit"));
    }
    assert!(sem.try_acquire().await.unwrap().is_none(), "a 4th permit");
    let fences: Vec<u64> = permits.iter().map(|p| p.fence()).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let mut tokens: Vec<&str> = permits.iter().map(|p| p.token()).collect();
    tokens.dedup();
    assert_eq!(tokens.len(), 3);
    assert_eq!(permits[0].name(), name);

    let conn = raw(&url).await;
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 3);
    permits.pop().unwrap().unlock().await.unwrap();
    let again = sem
        .acquire_timeout(PROMPT)
        .await
        .expect("the released permit");
    assert!(again.fence() > fences[2]);
    for p in permits {
        p.unlock().await.unwrap();
    }
    again.unlock().await.unwrap();
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 0);
    let mut conn2 = conn.clone();
    for key in [holders_key(&name), queue_key(&name), permits_key(&name)] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn2)
            .await
            .unwrap();
        assert!(pttl != -1, "{key} has no expiry");
    }
}

/// Releasing a permit whose lease ran out (reclaimed, and taken by someone
/// else since) is NotHeld and frees nobody else's; a foreign token's
/// release changes nothing.
#[tokio::test]
async fn releases_that_are_not_ours_are_refused() {
    let url = redis_url();
    let name = unique("sem-not-ours");
    let c = client(&url).await;
    let short = c.semaphore(&name, 1).with_lease(Duration::from_millis(300));
    let stale = short.acquire().await.unwrap();
    sleep(Duration::from_millis(400)).await;
    assert!(stale.is_lost());
    let taker = c.semaphore(&name, 1).acquire_timeout(PROMPT).await.unwrap();
    assert!(matches!(stale.unlock().await, Err(Error::NotHeld)));
    let conn = raw(&url).await;
    assert_eq!(
        zcard(&mut conn.clone(), &holders_key(&name)).await,
        1,
        "the taker's permit"
    );

    // A foreign token, straight at the release script.
    let mut conn2 = conn.clone();
    let code: i64 = redis::cmd("EVALSHA")
        .arg(script_sha("sem_release"))
        .arg(4)
        .arg(holders_key(&name))
        .arg(queue_key(&name))
        .arg(format!("redbell:{{{name}}}:queue:expiry"))
        .arg(permits_key(&name))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("not-a-token-of-ours")
        .arg(format!("redbell:{{{name}}}:wake:"))
        .arg(1)
        .arg(250)
        .query_async(&mut conn2)
        .await
        .unwrap();
    assert_eq!(code, -1);
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 1);
    assert!(!taker.is_lost());

    // An extend of a lost permit is refused too; a live one works.
    taker.extend(Duration::from_secs(5)).await.unwrap();
    taker.unlock().await.unwrap();
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 0);
}

/// Another permit count is a typed error, not a resize; zero permits are
/// refused before any I/O.
#[tokio::test]
async fn a_mismatched_permit_count_is_refused() {
    let url = redis_url();
    let name = unique("sem-mismatch");
    let c = client(&url).await;
    let held = c.semaphore(&name, 3).acquire().await.unwrap();
    match c.semaphore(&name, 4).acquire().await {
        Err(Error::PermitsMismatch {
            name: n,
            stored,
            asked,
        }) => {
            assert_eq!((n.as_str(), stored, asked), (name.as_str(), 3, 4));
        }
        other => panic!("expected PermitsMismatch, got {other:?}"),
    }
    assert!(matches!(
        c.semaphore(&name, 2).try_acquire().await,
        Err(Error::PermitsMismatch { stored: 3, .. })
    ));
    assert!(matches!(
        c.semaphore(&name, 0).acquire().await,
        Err(Error::InvalidPermits { permits: 0, .. })
    ));
    let conn = raw(&url).await;
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 1);
    held.unlock().await.unwrap();
}

/// Waiters get their permits in the order they queued, and a newcomer does
/// not take a free permit owed to a queued waiter.
#[tokio::test]
async fn waiters_are_served_in_arrival_order() {
    let url = redis_url();
    let name = unique("sem-fifo");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let held = holder
        .semaphore(&name, 1)
        .with_lease(LONG)
        .acquire()
        .await
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = client(&url).await;
        let order = order.clone();
        let sem = c.semaphore(&name, 1);
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(20)).await;
            permit.unlock().await.unwrap();
            drop(c);
        }));
        wait_for_members(&conn, &queue_key(&name), i + 1, Duration::from_millis(5)).await;
    }
    held.unlock().await.unwrap();
    for t in tasks {
        timeout(Duration::from_secs(10), t)
            .await
            .expect("every waiter got its turn")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

/// While waiters are parked, nothing is sent on the semaphore's keys;
/// afterwards the releases hand over with a few commands per acquisition.
#[tokio::test]
async fn no_commands_while_waiters_are_parked() {
    let url = redis_url();
    let name = unique("sem-quiet");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    warm_up(&holder).await;
    let sem = holder.semaphore(&name, 2).with_lease(LONG);
    let held = [sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    let mut tasks = Vec::new();
    let clients = [client(&url).await, client(&url).await];
    for c in &clients {
        for _ in 0..3 {
            let s = c.semaphore(&name, 2).with_lease(LONG);
            tasks.push(tokio::spawn(async move {
                let p = s.acquire().await.unwrap();
                sleep(Duration::from_millis(10)).await;
                p.unlock().await.unwrap();
            }));
        }
    }
    // One place in the queue per client; the others park in their client.
    wait_for_members(&conn, &queue_key(&name), 2, Duration::from_millis(10)).await;
    for c in &clients {
        wait_for_parked(c, 3).await;
    }
    let monitor = Monitor::start(&url).await;
    sleep(Duration::from_millis(100)).await;
    monitor.sync().await;
    let mark = monitor.mark();
    sleep(Duration::from_secs(2)).await;
    monitor.sync().await;
    let parked = monitor.count_since(mark, &[&hash_tag(&name)]);
    assert_eq!(
        parked,
        0,
        "commands while parked: {:?}",
        monitor.matching_since(mark, &[&hash_tag(&name)])
    );
    let mark = monitor.mark();
    for p in held {
        p.unlock().await.unwrap();
    }
    for t in tasks {
        timeout(Duration::from_secs(10), t).await.unwrap().unwrap();
    }
    monitor.sync().await;
    let evals = monitor.count_since(mark, &["EVAL", &hash_tag(&name)]);
    eprintln!("6 parked acquisitions + 8 releases: {evals} script calls");
    // Per acquisition: the attempt after its wake-up, its release, and at
    // most two standby attempts; nothing else.
    assert!(evals <= 8 + 6 * 3, "{evals} script calls");
}

/// One holder counted inside a section of at most `max` holders; counted
/// out on drop (also when its task is aborted inside).
struct Inside(Arc<AtomicI64>);

impl Inside {
    fn enter(count: &Arc<AtomicI64>, max: i64) -> Inside {
        let before = count.fetch_add(1, Ordering::SeqCst);
        assert!(before < max, "{} holders", before + 1);
        Inside(count.clone())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waiters timed out or aborted at random moments, while permits come and
/// go, leave nothing held and nothing queued; the permits are all free after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_storms_leave_nothing_held() {
    let url = redis_url();
    let name = unique("sem-storm");
    let clients = [client(&url).await, client(&url).await, client(&url).await];
    let acquired = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..60u64 {
        let sem = clients[i as usize % 3].semaphore(&name, 2);
        let acquired = acquired.clone();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let wait = Duration::from_millis(1 + (i * 7) % 40);
            if let Ok(Ok(p)) = timeout(wait, sem.acquire()).await {
                acquired.fetch_add(1, Ordering::SeqCst);
                let section = Inside::enter(&inside, 2);
                sleep(Duration::from_millis(i % 5)).await;
                drop(section); // before the permit goes, even when aborted
                if i % 2 == 0 {
                    drop(p); // released in the background
                } else {
                    let _ = p.unlock().await;
                }
            }
        }));
        if i % 10 == 0 {
            sleep(Duration::from_millis(3)).await;
        }
    }
    // Some are aborted outright, wherever they are.
    for t in tasks.iter().step_by(7) {
        t.abort();
    }
    for t in tasks {
        match timeout(Duration::from_secs(10), t)
            .await
            .expect("a storm task hung")
        {
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => {}
        }
    }
    for c in &clients {
        c.shutdown().await.unwrap();
    }
    let conn = raw(&url).await;
    let clear = eventually(Duration::from_secs(5), || {
        let conn = conn.clone();
        let name = name.clone();
        async move {
            zcard(&mut conn.clone(), &holders_key(&name)).await == 0
                && zcard(&mut conn.clone(), &queue_key(&name)).await == 0
        }
    })
    .await;
    assert!(clear, "a permit or a queue entry was left behind");
    let sem = clients[0].semaphore(&name, 2);
    let a = sem.try_acquire().await.unwrap().expect("a free permit");
    let b = sem
        .try_acquire()
        .await
        .unwrap()
        .expect("a second free permit");
    eprintln!(
        "cancel storm: {} of 60 acquired",
        acquired.load(Ordering::SeqCst)
    );
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
}

/// A woken waiter that froze (its socket open, so PUBLISH counts it) costs
/// the live waiters behind it a short window, not a lease; and while it is
/// owed the free permit, a newcomer's try_acquire does not take it.
#[tokio::test]
async fn a_frozen_woken_waiter_does_not_stall_the_others() {
    let url = redis_url();
    let name = unique("sem-frozen");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let held = holder
        .semaphore(&name, 1)
        .with_lease(LONG)
        .acquire()
        .await
        .unwrap();

    let side = Side::start();
    let frozen_client = side.client(&url).await;
    let sem = frozen_client.semaphore(&name, 1).with_lease(LONG);
    let _frozen_waiter = side.spawn(async move {
        let _c = frozen_client;
        sem.acquire().await.map(std::mem::forget)
    });
    wait_for_members(&conn, &queue_key(&name), 1, Duration::from_millis(5)).await;
    let live = client(&url).await;
    let mut waiters = Vec::new();
    for i in 0..3 {
        let sem = live.semaphore(&name, 1).with_lease(LONG);
        waiters.push(tokio::spawn(async move { sem.acquire().await }));
        // The live client's first waiter queues; the others park in it.
        wait_for_parked(&live, i + 1).await;
    }

    let frozen = side.freeze().await;
    let mut released = Instant::now();
    held.unlock().await.unwrap();
    let newcomer = client(&url).await;
    assert!(
        newcomer
            .semaphore(&name, 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a newcomer took the permit owed to the queue's head"
    );
    let mut pending = waiters;
    let mut worst = Duration::ZERO;
    while !pending.is_empty() {
        let (result, _, rest) = timeout(
            Duration::from_secs(10),
            futures_util::future::select_all(pending),
        )
        .await
        .expect("a live waiter got the permit within 10 s");
        let waited = released.elapsed();
        worst = worst.max(waited);
        assert!(waited < BOUND, "a live waiter waited {waited:?}");
        let permit = result.unwrap().unwrap();
        released = Instant::now();
        permit.unlock().await.unwrap();
        pending = rest;
    }
    eprintln!("behind a frozen woken waiter: the longest hand-off took {worst:?}");
    drop(frozen);
}

/// A renewed permit outlives several leases; status shows the holders,
/// their remaining leases and the waiters; min_replica_acks without
/// replicas gives the permit back and says so.
#[tokio::test]
async fn renewal_status_and_replica_acks() {
    let url = redis_url();
    let name = unique("sem-renew");
    let c = renewing_client(&url, Duration::from_millis(600), Duration::from_millis(200)).await;
    let sem = c.semaphore(&name, 2);
    let permit = sem.acquire().await.unwrap();
    let waiter_sem = c.semaphore(&name, 2).with_lease(LONG);
    let other = waiter_sem.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter_sem.acquire().await });
    let conn = raw(&url).await;
    wait_for_members(&conn, &queue_key(&name), 1, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(1500)).await;
    assert!(!permit.is_lost(), "the renewed permit was lost");
    let status = c.semaphore_status(&name).await.unwrap();
    assert_eq!(status.permits, Some(2));
    assert_eq!(status.waiters, 1);
    assert_eq!(status.holders.len(), 2, "{status:?}");
    assert!(status.holders.iter().any(|(t, _)| t == permit.token()));
    assert!(status.holders.iter().all(|(_, ttl)| *ttl <= LONG));
    let mut conn2 = conn.clone();
    let fence: String = redis::cmd("GET")
        .arg(fence_key(&name))
        .query_async(&mut conn2)
        .await
        .unwrap();
    assert_eq!(status.fence, fence.parse().ok());

    permit.unlock().await.unwrap();
    let third = timeout(PROMPT, waiting).await.unwrap().unwrap().unwrap();
    third.unlock().await.unwrap();
    other.unlock().await.unwrap();

    let acks = c
        .semaphore(&name, 2)
        .min_replica_acks(1, Duration::from_millis(100))
        .acquire()
        .await;
    assert!(
        matches!(
            acks,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{acks:?}"
    );
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 0);
}

/// On a Redis Cluster: 2 permits, 8 workers in two clients, fixed long
/// leases (so only wake-ups hand over): never more than 2 inside, and every
/// hand-off prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_cluster() {
    let cluster = Cluster::start().await;
    let urls = cluster.urls();
    let name = unique("sem-cluster");
    let clients = [cluster_client(&urls).await, cluster_client(&urls).await];
    let inside = Arc::new(AtomicI64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let sem = clients[i % 2].semaphore(&name, 2).with_lease(LONG);
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let p = sem.acquire().await.unwrap();
                assert!(inside.fetch_add(1, Ordering::SeqCst) < 2, "3 holders");
                sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                p.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        timeout(Duration::from_secs(20), t)
            .await
            .expect("the cluster semaphore hung: a wake-up was lost")
            .unwrap();
    }
    let took = started.elapsed();
    eprintln!("cluster: 40 acquisitions of 2 permits by 8 workers in {took:?}");
    // With 30 s leases, a lost wake-up would cost a lease.
    assert!(took < Duration::from_secs(15), "{took:?}");
    let status = clients[0].semaphore_status(&name).await.unwrap();
    assert!(
        status.holders.is_empty() && status.waiters == 0,
        "{status:?}"
    );
}
