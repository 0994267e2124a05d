//! The edges of one place per client (a frozen pool of waiters) and of the
//! fair guard's full lease: a queuing waiter aborted at every await point
//! or kept but not polled, two frozen pools in a row, a pub/sub connection
//! killed while a pool waits, several pools keeping FIFO order, a
//! semaphore newcomer behind a permit owed to a frozen waiter, and a fair
//! grantee timed out, aborted or partitioned at its grant. Each injects its
//! fault on real servers and asserts the 1 s bound (with slack for a noisy
//! 2-core machine: [`BOUND`]); what each measured is printed.

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use redbell_integration_tests::{
    PrivateRedis, Proxy, Stoppable, client, fifo_key, got_within, kill_clients_of_type, raw,
    redis_url, unique, wait_for_members, wait_for_parked, waiters_key,
};

/// The bound (1 s), with slack for a loaded machine; a stall costs
/// a lease, [`LEASE`].
const BOUND: Duration = Duration::from_millis(2500);

/// The holder's lease: what a stall costs.
const LEASE: Duration = Duration::from_secs(8);

type Guard = Box<dyn std::any::Any + Send>;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Fair,
    Semaphore(u32),
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Fair => "fair",
            Kind::Semaphore(_) => "semaphore",
        }
    }

    fn queue(self, name: &str) -> String {
        match self {
            Kind::Mutex => waiters_key(name),
            Kind::Fair => fifo_key(name),
            Kind::Semaphore(_) => format!("redbell:{{{name}}}:queue"),
        }
    }
}

/// One acquisition of the lock by `c` (lease: the client's, or `lease`).
async fn acquire(
    c: &redbell::Client,
    kind: Kind,
    name: &str,
    lease: Option<Duration>,
    within: Option<Duration>,
) -> Result<Guard, redbell::Error> {
    Ok(match (kind, lease) {
        (Kind::Mutex, l) => {
            let m = l.map_or(c.mutex(name), |l| c.mutex(name).with_lease(l));
            match within {
                Some(t) => Box::new(m.lock_timeout(t).await?) as Guard,
                None => Box::new(m.lock().await?),
            }
        }
        (Kind::Fair, l) => {
            let m = l.map_or(c.fair_mutex(name), |l| c.fair_mutex(name).with_lease(l));
            match within {
                Some(t) => Box::new(m.lock_timeout(t).await?),
                None => Box::new(m.lock().await?),
            }
        }
        (Kind::Semaphore(p), l) => {
            let s = l.map_or(c.semaphore(name, p), |l| c.semaphore(name, p).with_lease(l));
            match within {
                Some(t) => Box::new(s.acquire_timeout(t).await?),
                None => Box::new(s.acquire().await?),
            }
        }
    })
}

/// Holds every permit of the lock with [`LEASE`]; dropping the guards
/// releases (in the background).
async fn hold(c: &redbell::Client, kind: Kind, name: &str) -> Vec<Guard> {
    let n = if let Kind::Semaphore(p) = kind { p } else { 1 };
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(acquire(c, kind, name, Some(LEASE), None).await.unwrap());
    }
    held
}

fn spawn_acquire(
    c: &redbell::Client,
    kind: Kind,
    name: &str,
) -> tokio::task::JoinHandle<Result<Guard, redbell::Error>> {
    let (c, name) = (c.clone(), name.to_owned());
    tokio::spawn(async move { acquire(&c, kind, &name, None, None).await })
}

/// The client's queuing waiter is dropped (its task aborted) `d` after it
/// and a second waiter of the same client joined, at every await point
/// from its first attempt through its SUBSCRIBE to its park (200 ms: the
/// same drop as a `lock_timeout` expiring while parked). The turn must
/// pass to the second, which must get the lock within the bound of the
/// release.
async fn queuer_aborted(kind: Kind) {
    let url = redis_url();
    let holder = client(&url).await;
    let mut worst = Duration::ZERO;
    for d in [0u64, 1, 2, 3, 4, 6, 8, 12, 20, 50, 200] {
        let name = unique(&format!("r29b-abort-{}-{d}", kind.arg()));
        let held = hold(&holder, kind, &name).await;
        let a = client(&url).await; // fresh: its first waiter must subscribe
        let first = spawn_acquire(&a, kind, &name);
        sleep(Duration::from_millis(1)).await;
        let second = spawn_acquire(&a, kind, &name);
        sleep(Duration::from_millis(d)).await;
        first.abort();
        sleep(Duration::from_millis(300)).await; // the second parks
        let released = Instant::now();
        drop(held);
        let what = format!("{kind:?}, queuer aborted at {d} ms: its sibling");
        let _g = got_within(second, released, BOUND, &what).await;
        worst = worst.max(released.elapsed());
    }
    eprintln!("{kind:?}: worst hand-off to the sibling of an aborted queuer {worst:?}");
}

#[tokio::test]
async fn mutex_queuer_aborted_at_every_await() {
    queuer_aborted(Kind::Mutex).await;
}

#[tokio::test]
async fn fair_queuer_aborted_at_every_await() {
    queuer_aborted(Kind::Fair).await;
}

#[tokio::test]
async fn semaphore_queuer_aborted_at_every_await() {
    queuer_aborted(Kind::Semaphore(1)).await;
}

/// A live process whose queuing waiter's future is kept but no longer
/// polled (a `select!` that moved on and will come back to it; a task
/// starved on a busy thread): it holds the client's one place. Its sibling,
/// polled and live, must still get the free lock within the bound of the
/// release: nobody else waits, so no standby reaches anyone.
async fn unpolled_queuer(kind: Kind) {
    let url = redis_url();
    let name = unique(&format!("r29b-unpolled-{}", kind.arg()));
    let (conn, holder, a) = (raw(&url).await, client(&url).await, client(&url).await);
    let held = hold(&holder, kind, &name).await;
    let mut first = Box::pin(acquire(&a, kind, &name, None, None));
    // Polled until it has queued, then left alone (not dropped).
    assert!(
        timeout(Duration::from_millis(500), &mut first)
            .await
            .is_err()
    );
    wait_for_members(&conn, &kind.queue(&name), 1, Duration::from_millis(10)).await;
    let second = spawn_acquire(&a, kind, &name);
    wait_for_parked(&a, 2).await;
    sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    drop(held);
    let what = format!("{kind:?}, the live sibling of an unpolled queuer");
    let _g = got_within(second, released, BOUND, &what).await;
    eprintln!(
        "{what} got the lock {:?} after the release",
        released.elapsed()
    );
    drop(first);
}

#[tokio::test]
async fn mutex_unpolled_queuer_sibling() {
    unpolled_queuer(Kind::Mutex).await;
}

#[tokio::test]
async fn fair_unpolled_queuer_sibling() {
    unpolled_queuer(Kind::Fair).await;
}

#[tokio::test]
async fn semaphore_unpolled_queuer_sibling() {
    unpolled_queuer(Kind::Semaphore(1)).await;
}

/// Two frozen processes, each with `k` tasks waiting, queue ahead of a live
/// waiter: one place each, so the release's two standbys reach the second
/// pool and the live waiter, which gets the lock within the bound.
async fn two_frozen_pools(kind: Kind, k: usize) {
    let url = redis_url();
    let name = unique(&format!("r29b-two-pools-{}", kind.arg()));
    let (conn, holder) = (raw(&url).await, client(&url).await);
    let queue = kind.queue(&name);
    // A Mutex queue is ordered by expiry: the pools queue during a shorter
    // lease than the live waiter's (extended below), so they are ahead.
    let first_lease = LEASE - Duration::from_secs(2);
    let lease = if let Kind::Mutex = kind {
        first_lease
    } else {
        LEASE
    };
    let mut held = vec![
        acquire(&holder, kind, &name, Some(lease), None)
            .await
            .unwrap(),
    ];
    let args = [kind.arg(), &name, &k.to_string(), "1"];
    let bin = env!("CARGO_BIN_EXE_pool_waiter").as_ref();
    let mut pools = Vec::new();
    for i in 0..2 {
        let mut pool = Stoppable::start(bin, &args);
        pool.wait_for_line(&format!("waiting {k}"));
        wait_for_members(&conn, &queue, i + 1, Duration::from_millis(10)).await;
        pools.push(pool);
    }
    if let Kind::Mutex = kind {
        let g = held[0].downcast_ref::<redbell::MutexGuard>().unwrap();
        g.extend(LEASE).await.unwrap();
    }
    sleep(Duration::from_millis(200)).await;
    for pool in &pools {
        pool.stop();
    }
    let live_client = client(&url).await;
    let live = spawn_acquire(&live_client, kind, &name);
    wait_for_members(&conn, &queue, 3, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    drop(held.pop());
    let what = format!("{kind:?}, two frozen pools of {k} ahead: the live waiter");
    let _g = got_within(live, released, BOUND, &what).await;
    eprintln!(
        "{what} got the lock {:?} after the release",
        released.elapsed()
    );
    std::mem::forget(held);
}

#[tokio::test]
async fn mutex_two_frozen_pools_ahead() {
    two_frozen_pools(Kind::Mutex, 8).await;
}

#[tokio::test]
async fn fair_two_frozen_pools_ahead() {
    two_frozen_pools(Kind::Fair, 8).await;
}

#[tokio::test]
async fn semaphore_two_frozen_pools_ahead() {
    two_frozen_pools(Kind::Semaphore(1), 8).await;
}

/// A pool of 6 live tasks of one client waits; every pub/sub connection is
/// killed (CLIENT KILL TYPE pubsub), and the holder releases at once, while
/// the client resubscribes. Every task must be served (each holds 20 ms),
/// far sooner than the holder's lease.
async fn pubsub_killed_while_pool_waits(kind: Kind) {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique(&format!("r29b-pubsub-{}", kind.arg()));
    let (mut conn, holder, a) = (raw(&url).await, client(&url).await, client(&url).await);
    let held = hold(&holder, kind, &name).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (a2, name) = (a.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let g = acquire(&a2, kind, &name, None, None).await?;
            sleep(Duration::from_millis(20)).await;
            drop(g);
            Ok::<_, redbell::Error>(())
        }));
        wait_for_parked(&a, i + 1).await;
    }
    assert!(kill_clients_of_type(&mut conn, "pubsub").await >= 1);
    let released = Instant::now();
    drop(held);
    for t in tasks {
        timeout(LEASE - Duration::from_secs(1), t)
            .await
            .unwrap_or_else(|_| panic!("{kind:?}: a pool task stalled after a pubsub kill"))
            .unwrap()
            .unwrap();
    }
    let all = released.elapsed();
    eprintln!("{kind:?}: a pool of 6 served in {all:?} after a pubsub kill and release");
    assert!(all < 2 * BOUND, "{kind:?}: 6 tasks took {all:?}");
}

#[tokio::test]
async fn mutex_pubsub_killed_while_pool_waits() {
    pubsub_killed_while_pool_waits(Kind::Mutex).await;
}

#[tokio::test]
async fn fair_pubsub_killed_while_pool_waits() {
    pubsub_killed_while_pool_waits(Kind::Fair).await;
}

#[tokio::test]
async fn semaphore_of_3_pubsub_killed_while_pool_waits() {
    pubsub_killed_while_pool_waits(Kind::Semaphore(3)).await;
}

/// Fair: waiter W1's `lock_timeout` deadline falls around the moment of
/// its grant (the release is sent `offset` ms before the deadline,
/// -2..=10 ms), W2 of another client waits behind it. Whether W1 got the
/// lock (dropped at once) or timed out, W2 must get it within the bound of
/// the release: the grant is passed on, never stranded for a lease.
#[tokio::test]
async fn fair_timeout_at_grant_time() {
    let url = redis_url();
    let (holder, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let conn = raw(&url).await;
    let (mut worst, mut timeouts) = (Duration::ZERO, 0);
    for offset in -2i64..=10 {
        let name = unique(&format!("r29b-fair-deadline-{offset}"));
        let held = holder
            .fair_mutex(&name)
            .with_lease(LEASE)
            .lock()
            .await
            .unwrap();
        let within = Duration::from_millis(600);
        let start = Instant::now();
        let w1 = {
            let (a, name) = (a.clone(), name.clone());
            tokio::spawn(async move { a.fair_mutex(&name).lock_timeout(within).await })
        };
        wait_for_members(&conn, &fifo_key(&name), 1, Duration::from_millis(5)).await;
        let w2 = spawn_acquire(&b, Kind::Fair, &name);
        wait_for_members(&conn, &fifo_key(&name), 2, Duration::from_millis(5)).await;
        let deadline = start + within;
        let off = Duration::from_millis(offset.unsigned_abs());
        tokio::time::sleep_until(if offset >= 0 {
            deadline - off
        } else {
            deadline + off
        })
        .await;
        let released = Instant::now();
        held.unlock().await.unwrap();
        match w1.await.unwrap() {
            Ok(g) => drop(g),
            Err(redbell::Error::Timeout) => timeouts += 1,
            Err(e) => panic!("W1: {e}"),
        }
        let what = format!("fair, W1's deadline {offset} ms after the release: W2");
        let _g = got_within(w2, released, BOUND, &what).await;
        worst = worst.max(released.elapsed());
    }
    eprintln!(
        "fair deadline at grant: worst hand-off to W2 {worst:?}, W1 timed out {timeouts} of 13"
    );
}

/// Fair: grantee W1's client is partitioned (proxy: its connections stay
/// open, nothing passes either way) after W1 queued, before the release:
/// the grant's PUBLISH counts W1's pub/sub connection as a receiver, but
/// W1 never attempts. W2 (another client, behind it) must get the lock
/// within the bound of the release, and W1 must not get a guard while W2
/// holds, even once its connections work again; W1 gets the lock once W2
/// is done.
#[tokio::test]
async fn fair_grantee_partitioned_at_grant() {
    let redis = PrivateRedis::start().await;
    let proxy = Proxy::start(0, redis.port()).await.expect("a proxy");
    let url = redis.url();
    let name = unique("r29b-fair-partition");
    let (conn, holder, b) = (raw(&url).await, client(&url).await, client(&url).await);
    let a = redbell::Client::builder(proxy.url().as_str())
        .response_timeout(Duration::from_secs(1))
        .probe_interval(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let held = holder
        .fair_mutex(&name)
        .with_lease(LEASE)
        .lock()
        .await
        .unwrap();
    let w1 = {
        let (a, name) = (a.clone(), name.clone());
        tokio::spawn(async move {
            let g = a.fair_mutex(&name).lock().await;
            (Instant::now(), g)
        })
    };
    wait_for_members(&conn, &fifo_key(&name), 1, Duration::from_millis(5)).await;
    let w2 = spawn_acquire(&b, Kind::Fair, &name);
    wait_for_members(&conn, &fifo_key(&name), 2, Duration::from_millis(5)).await;
    sleep(Duration::from_millis(100)).await;
    proxy.partition().await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let g2 = got_within(w2, released, BOUND, "fair, grantee partitioned: W2").await;
    eprintln!("W2 got the lock {:?} after the release", released.elapsed());
    sleep(Duration::from_secs(3)).await;
    proxy.resume(); // W1's connections answer again (or were replaced)
    sleep(Duration::from_secs(3)).await;
    assert!(
        !w1.is_finished(),
        "W1 got a guard while W2 held: {:?}",
        w1.await
    );
    let freed = Instant::now();
    drop(g2);
    let (at, g1) = timeout(Duration::from_secs(10), w1).await.unwrap().unwrap();
    let g1 = g1.expect("W1 gets the lock once W2 released");
    eprintln!("W1 got it {:?} after W2 released", at.duration_since(freed));
    drop(g1);
}

/// Fair: grantee W1's task is aborted after the release, at every point of
/// its grant's way (after 0..40 yields of the test's task, then 1..=4 ms:
/// before, while and after its grant arrives and its confirming attempt is
/// in flight); W2 of another client waits behind. W2 must get the lock
/// within the bound of the release: the grant (or W1's fresh lease) is
/// given back, not stranded for a lease. Every offset is tried; each one
/// that strands the lock is reported with the lock key's value and PTTL.
#[tokio::test]
async fn fair_grantee_aborted_after_grant() {
    let url = redis_url();
    let (holder, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let (mut worst, mut stranded, mut aborted) = (Duration::ZERO, Vec::new(), 0);
    let schedule = (0..40).map(|y| (y, 0)).chain((1..=4).map(|ms| (0, ms)));
    for (yields, ms) in schedule {
        let d = format!("{yields} yields + {ms} ms");
        let name = unique("r29b-fair-abort");
        let held = holder
            .fair_mutex(&name)
            .with_lease(LEASE)
            .lock()
            .await
            .unwrap();
        let w1 = spawn_acquire(&a, Kind::Fair, &name);
        wait_for_members(&conn, &fifo_key(&name), 1, Duration::from_millis(5)).await;
        let w2 = spawn_acquire(&b, Kind::Fair, &name);
        wait_for_members(&conn, &fifo_key(&name), 2, Duration::from_millis(5)).await;
        let released = Instant::now();
        let unlock = tokio::spawn(held.unlock());
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        sleep(Duration::from_millis(ms)).await;
        w1.abort();
        unlock.await.unwrap().unwrap();
        // Finished before the abort: a guard, given back now.
        match w1.await {
            Ok(got) => drop(got.unwrap()),
            Err(e) => {
                assert!(e.is_cancelled());
                aborted += 1;
            }
        }
        match timeout(BOUND, w2).await {
            Ok(got) => {
                drop(got.unwrap().unwrap());
                worst = worst.max(released.elapsed());
            }
            Err(_) => {
                let key = redbell_integration_tests::lock_key(&name);
                let value = redbell_integration_tests::get(&mut conn, &key).await;
                let left = redbell_integration_tests::pttl(&mut conn, &key).await;
                stranded.push(format!("{d}: lock {value:?}, PTTL {left} ms"));
            }
        }
    }
    eprintln!("fair grantee aborted ({aborted} of 44 before its lock()): worst to W2 {worst:?}");
    assert!(
        stranded.is_empty(),
        "W2 did not get the lock within {BOUND:?} of the release: {stranded:#?}"
    );
}

/// Three clients with three waiters each, joined interleaved (each after
/// the previous parked): a fair lock (and a semaphore of one permit) serves
/// them in the order they joined, although each client queues one waiter
/// at a time.
async fn pools_keep_fifo(kind: Kind) {
    let url = redis_url();
    let name = unique(&format!("r29b-pools-fifo-{}", kind.arg()));
    let holder = client(&url).await;
    let held = hold(&holder, kind, &name).await;
    let clients = [client(&url).await, client(&url).await, client(&url).await];
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let plan = [0usize, 1, 0, 2, 1, 0, 2, 2, 1];
    let mut parked = [0i64; 3];
    let mut tasks = Vec::new();
    for (i, &c) in plan.iter().enumerate() {
        let (cl, name, order) = (clients[c].clone(), name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = acquire(&cl, kind, &name, None, None).await.unwrap();
            order.lock().unwrap().push(i);
            sleep(Duration::from_millis(30)).await;
            drop(g);
        }));
        parked[c] += 1;
        wait_for_parked(&clients[c], parked[c]).await;
    }
    let released = Instant::now();
    drop(held);
    redbell_integration_tests::join_within(Duration::from_secs(10), tasks, "all served").await;
    eprintln!(
        "{kind:?}: 9 waiters of 3 clients served in {:?}",
        released.elapsed()
    );
    assert_eq!(
        *order.lock().unwrap(),
        (0..9).collect::<Vec<_>>(),
        "{kind:?}"
    );
}

#[tokio::test]
async fn fair_pools_of_three_clients_keep_fifo() {
    pools_keep_fifo(Kind::Fair).await;
}

#[tokio::test]
async fn semaphore_pools_of_three_clients_keep_fifo() {
    pools_keep_fifo(Kind::Semaphore(1)).await;
}

/// A Semaphore of 2 permits: a frozen pool (4 tasks, one queue place) and
/// a live waiter L1 queue while a holder has both permits; the holder
/// releases both. L1 gets one; the other is owed to the frozen pool's woken
/// member, whose entry is cut to the reservation. A live newcomer L2 that
/// arrives `after` L1 got its permit must get the free one within the
/// bound, not when L1's lease ends.
async fn semaphore_newcomer_after_frozen_owed(after: Duration) {
    let url = redis_url();
    let name = unique("r29b-sem2-newcomer");
    let kind = Kind::Semaphore(2);
    let (conn, holder) = (raw(&url).await, client(&url).await);
    let queue = kind.queue(&name);
    let held = hold(&holder, kind, &name).await;
    let mut pool = Stoppable::start(
        env!("CARGO_BIN_EXE_pool_waiter").as_ref(),
        &["semaphore", &name, "4", "2"],
    );
    pool.wait_for_line("waiting 4");
    wait_for_members(&conn, &queue, 1, Duration::from_millis(10)).await;
    let (l1c, l2c) = (client(&url).await, client(&url).await);
    let l1 = {
        let (c, name) = (l1c.clone(), name.clone());
        tokio::spawn(async move { c.semaphore(&name, 2).with_lease(LEASE).acquire().await })
    };
    wait_for_members(&conn, &queue, 2, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(100)).await;
    pool.stop();
    let released = Instant::now();
    drop(held);
    let _p1 = got_within(l1, released, BOUND, "Semaphore(2), L1").await;
    let got1 = released.elapsed();
    sleep(after).await;
    let arrived = Instant::now();
    let l2 = spawn_acquire(&l2c, kind, &name);
    let what = format!("Semaphore(2), a newcomer {after:?} after L1 got its permit");
    let _p2 = got_within(l2, arrived, BOUND, &what).await;
    eprintln!(
        "L1 got a permit {got1:?} after the release; {what} got the other {:?} after arriving",
        arrived.elapsed()
    );
}

#[tokio::test]
async fn semaphore_newcomer_soon_after_frozen_owed() {
    semaphore_newcomer_after_frozen_owed(Duration::from_millis(20)).await;
}

/// The control: once the frozen member's entry lapsed, a newcomer's
/// attempt prunes it and takes the free permit.
#[tokio::test]
async fn semaphore_newcomer_late_after_frozen_owed() {
    semaphore_newcomer_after_frozen_owed(Duration::from_millis(1000)).await;
}
