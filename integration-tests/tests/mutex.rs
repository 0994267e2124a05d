//! The Mutex against a real Redis: exclusion, ownership, event-driven hand-off,
//! single flight, crashed holders, timeouts, dropped guards and fencing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redbell::{Error, LockKind};
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, client, counter_key, counter_value, del, eventually,
    exists, fence_key, get, gone_within, hash_tag, join_within, lock_key, non_atomic_increment,
    promptly, pttl, raw, redis_url, script_sha, set, set_px, spawn_timed, unique,
    wait_for_subscribers, waiters_key, warm_up, zcard,
};
use tokio::time::{Instant, timeout};

/// 3 clients x 16 tasks x 50 non-atomic GET/SET increments under one lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_2400_increments() {
    let url = redis_url();
    let name = unique("exclusion");
    let counter = counter_key(&name);
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(&url).await;
        let conn = raw(&url).await;
        for _ in 0..16 {
            let mutex = client.mutex(&name).with_lease(LONG);
            let mut conn = conn.clone();
            let counter = counter.clone();
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let guard = mutex.lock().await.expect("lock");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    non_atomic_increment(&mut conn, &counter, Duration::from_micros(100)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.expect("unlock of a 30 s lease");
                }
            }));
        }
    }
    join_within(
        Duration::from_secs(90),
        tasks,
        "2400 critical sections did not finish within 90 s",
    )
    .await;
    let mut conn = raw(&url).await;
    assert_eq!(counter_value(&mut conn, &counter).await, 2400);
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "lock key left behind"
    );
    del(&mut conn, &[&counter, &fence_key(&name)]).await;
}

/// A expires, B takes the lock: A can neither unlock nor extend B's lock.
#[tokio::test]
async fn expired_owner_cannot_unlock_or_extend_the_new_holder() {
    let url = redis_url();
    let name = unique("owner");
    let (a, b) = (client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let key = lock_key(&name);

    let a_guard = a
        .mutex(&name)
        .with_lease(Duration::from_millis(200))
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b_guard = timeout(PROMPT, b.mutex(&name).with_lease(LONG).lock())
        .await
        .expect("B could not take an expired lock")
        .unwrap();
    assert_ne!(a_guard.token(), b_guard.token());
    assert!(b_guard.fence() > a_guard.fence());

    let extended = promptly("extend", a_guard.extend(Duration::from_secs(100))).await;
    assert!(matches!(extended, Err(Error::NotHeld)), "{extended:?}");
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        ttl > 0 && ttl <= 30_000,
        "A's extend changed B's lease: pttl {ttl}"
    );

    let unlocked = promptly("unlock", a_guard.unlock()).await;
    assert!(matches!(unlocked, Err(Error::NotHeld)), "{unlocked:?}");
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some(b_guard.token()));

    b_guard.unlock().await.expect("B still owns its lock");
    assert!(!exists(&mut conn, &key).await);
}

/// A's lease runs out and nobody takes the lock: unlock and extend report
/// NotHeld (not success, not a hang) and create nothing.
#[tokio::test]
async fn unlock_after_expiry_is_not_held() {
    let url = redis_url();
    let name = unique("expired");
    let a = client(&url).await;
    let mut conn = raw(&url).await;
    let guard = a
        .mutex(&name)
        .with_lease(Duration::from_millis(100))
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let extended = promptly("extend", guard.extend(LONG)).await;
    assert!(matches!(extended, Err(Error::NotHeld)), "{extended:?}");
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "extend revived the key"
    );
    let unlocked = promptly("unlock", guard.unlock()).await;
    assert!(matches!(unlocked, Err(Error::NotHeld)), "{unlocked:?}");
    assert!(!exists(&mut conn, &lock_key(&name)).await);
}

/// Someone else's token in the key (here written by hand): our guard can
/// neither unlock nor extend it, and the key is left as it is.
#[tokio::test]
async fn a_foreign_token_is_neither_unlocked_nor_extended() {
    let url = redis_url();
    let name = unique("foreign");
    let a = client(&url).await;
    let mut conn = raw(&url).await;
    let key = lock_key(&name);
    let guard = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    set_px(&mut conn, &key, "intruder-token", 20_000).await;
    let r = promptly("extend", guard.extend(Duration::from_secs(100))).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        ttl > 0 && ttl <= 20_000,
        "extend changed someone else's lease: pttl {ttl}"
    );
    let r = promptly("unlock", guard.unlock()).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert_eq!(
        get(&mut conn, &key).await.as_deref(),
        Some("intruder-token")
    );
    del(&mut conn, &[&key]).await;
}

/// A waiter parked on a lock held with a 30 s lease acquires within 200 ms of
/// the unlock, and sends nothing naming the lock while parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_waiter_wakes_on_unlock_without_polling() {
    let url = redis_url();
    let name = unique("wake");
    let key = lock_key(&name);
    let monitor = Monitor::start(&url).await;
    let (holder, waiter) = (client(&url).await, client(&url).await);
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();

    let mutex = waiter.mutex(&name).with_lease(LONG);
    let task = spawn_timed(async move { mutex.lock().await });
    // Parked: it subscribed, then made its attempt after subscribing.
    wait_for_subscribers(&url, &name, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    monitor.sync().await;
    let attempts = monitor.count(&["evalsha", script_sha("acquire"), &key]);
    assert!(
        attempts >= 2,
        "expected the fast-path and the post-subscribe attempts, saw {attempts}"
    );

    let mark = monitor.mark();
    tokio::time::sleep(Duration::from_secs(1)).await;
    monitor.sync().await;
    let polled = monitor.matching_since(mark, &[&hash_tag(&name)]);
    assert!(
        polled.is_empty(),
        "commands naming the lock while parked: {polled:#?}"
    );
    assert!(!task.is_finished(), "the waiter took a held lock");

    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (acquired_at, got) = timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    let got = got.expect("waiter lock");
    let delay = acquired_at - released_at;
    eprintln!("hand-off after unlock took {delay:?}");
    assert!(
        delay < Duration::from_millis(200),
        "hand-off took {delay:?}"
    );
    got.unlock().await.unwrap();
}

/// 100 waiters of one client, 20 hand-offs: at most 2 acquire attempts per
/// release on average (one wake-up reaches one local waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_flight_100_local_waiters() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("single-flight");
    let key = lock_key(&name);
    let acquire = script_sha("acquire");
    let monitor = Monitor::start(&url).await;
    let c = client(&url).await;
    let first = c.mutex(&name).with_lease(LONG).lock().await.unwrap();

    const WAITERS: usize = 100;
    const HANDOFFS: usize = 20;
    let acquired = Arc::new(AtomicUsize::new(0));
    let (measure_tx, measure_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let measure_tx = Arc::new(std::sync::Mutex::new(Some(measure_tx)));
    let go_rx = Arc::new(tokio::sync::Mutex::new(Some(go_rx)));
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let mutex = c.mutex(&name).with_lease(LONG);
        let acquired = acquired.clone();
        let measure_tx = measure_tx.clone();
        let go_rx = go_rx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = mutex.lock().await.expect("lock");
            let n = acquired.fetch_add(1, Ordering::SeqCst) + 1;
            if n == HANDOFFS + 1 {
                // Hold while the test counts.
                let _ = measure_tx.lock().unwrap().take().unwrap().send(());
                let rx = go_rx.lock().await.take().unwrap();
                let _ = rx.await;
            } else {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            guard.unlock().await.expect("unlock");
        }));
    }
    // Everyone parked, after a failed attempt; one of them (the client's
    // one place in the queue) queued.
    let conn = raw(&url).await;
    let queue = waiters_key(&name);
    let parked = eventually(Duration::from_secs(20), || {
        let mut conn = conn.clone();
        let (queue, c) = (queue.clone(), c.clone());
        async move { c.stats().waiters == WAITERS as i64 && zcard(&mut conn, &queue).await == 1 }
    })
    .await;
    assert!(parked, "waiters did not all park");
    tokio::time::sleep(Duration::from_millis(300)).await;
    monitor.sync().await;
    let mark = monitor.mark();

    first.unlock().await.unwrap();
    timeout(Duration::from_secs(20), measure_rx)
        .await
        .expect("20 hand-offs took over 20 s")
        .unwrap();
    monitor.sync().await;
    let attempts = monitor.count_since(mark, &["evalsha", acquire, &key]);
    let releases = HANDOFFS + 1; // the first holder's, then one per task
    assert!(
        attempts <= 2 * releases,
        "{attempts} acquire attempts for {releases} releases (more than 2 per release)"
    );
    let _ = go_tx.send(());
    join_within(
        Duration::from_secs(30),
        tasks,
        "the remaining waiters did not finish",
    )
    .await;
    assert_eq!(acquired.load(Ordering::SeqCst), WAITERS);
}

/// A holder that vanished (guard leaked) is replaced when its 500 ms lease
/// runs out, not later, and without any release being published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holder_hands_over_at_lease_expiry() {
    let url = redis_url();
    let name = unique("crashed");
    let monitor = Monitor::start(&url).await;
    let (crashed, waiter) = (client(&url).await, client(&url).await);
    // The lease starts on the server after this instant.
    let locking_at = Instant::now();
    let guard = crashed
        .mutex(&name)
        .with_lease(Duration::from_millis(500))
        .lock()
        .await
        .unwrap();
    let leaked_at = Instant::now();
    std::mem::forget(guard);

    let got = timeout(PROMPT, waiter.mutex(&name).with_lease(LONG).lock())
        .await
        .expect("the waiter hung on a crashed holder")
        .unwrap();
    let waited = leaked_at.elapsed();
    let since_locking = locking_at.elapsed();
    eprintln!("acquired {waited:?} after the holder vanished (lease 500 ms)");
    assert!(
        since_locking >= Duration::from_millis(495),
        "acquired {since_locking:?} after the holder's lock() started: before its 500 ms lease ran out"
    );
    assert!(
        waited <= Duration::from_millis(1500),
        "acquired {waited:?} after the leak: the lease expiry did not wake the waiter"
    );
    monitor.sync().await;
    let published = monitor.count(&["\"publish\"", &hash_tag(&name)]);
    assert_eq!(
        published, 0,
        "a release was published though nobody released"
    );
    got.unlock().await.unwrap();
}

/// lock_timeout on a held lock gives Error::Timeout near the deadline and
/// leaves nothing of its own behind.
#[tokio::test]
async fn lock_timeout_on_a_held_lock_times_out() {
    let url = redis_url();
    let name = unique("timeout");
    let (holder, other) = (client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let mutex = other.mutex(&name).with_lease(LONG);

    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(10),
        mutex.lock_timeout(Duration::from_millis(800)),
    )
    .await
    .expect("lock_timeout overran its deadline by 9.5 s");
    let took = started.elapsed();
    assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
    assert!(took >= Duration::from_millis(750), "gave up after {took:?}");
    assert!(took < Duration::from_millis(2500), "gave up after {took:?}");

    assert!(matches!(mutex.try_lock().await, Ok(None)));
    assert!(matches!(
        mutex.lock_timeout(Duration::ZERO).await,
        Err(Error::Timeout)
    ));
    assert_eq!(
        get(&mut conn, &lock_key(&name)).await.as_deref(),
        Some(guard.token())
    );
    guard.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "a timed-out waiter left a key"
    );
    // Once free, the same handle acquires at once.
    let g = mutex.lock_timeout(Duration::from_secs(5)).await.unwrap();
    g.unlock().await.unwrap();
}

/// Dropping a guard without unlock releases it in the background: another
/// client (already waiting, or arriving later) gets it quickly despite a 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_is_released_in_the_background() {
    let url = redis_url();
    let name = unique("dropped");
    let (a, b) = (client(&url).await, client(&url).await);
    let conn = raw(&url).await;

    // B arrives after the drop.
    let guard = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    drop(guard);
    let started = Instant::now();
    let g = b
        .mutex(&name)
        .with_lease(LONG)
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("the dropped guard was not released");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    g.unlock().await.unwrap();

    // B is parked when A drops its guard.
    let guard = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let mutex = b.mutex(&name).with_lease(LONG);
    let waiter = tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dropped_at = Instant::now();
    drop(guard);
    let g = waiter.await.unwrap().expect("waiter after a dropped guard");
    assert!(
        dropped_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        dropped_at.elapsed()
    );
    g.unlock().await.unwrap();

    // A client dropped together with its guard still releases.
    let guard = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    drop(a);
    drop(guard);
    assert!(
        gone_within(&conn, &lock_key(&name), Duration::from_secs(2)).await,
        "a guard outliving its client was not released"
    );
}

/// Fences across 3 clients and 300 acquisitions strictly increase in
/// acquisition order; the fence key holds the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_across_clients() {
    let url = redis_url();
    let name = unique("fence");
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&url).await;
        for _ in 0..4 {
            let mutex = c.mutex(&name).with_lease(LONG);
            let fences = fences.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = mutex.lock().await.unwrap();
                    fences.lock().unwrap().push(guard.fence());
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    join_within(
        Duration::from_secs(60),
        tasks,
        "300 acquisitions took over 60 s",
    )
    .await;
    let fences = fences.lock().unwrap().clone();
    assert_eq!(fences.len(), 300);
    for w in fences.windows(2) {
        assert!(w[0] < w[1], "fence went from {} to {}", w[0], w[1]);
    }
    let mut conn = raw(&url).await;
    let stored: u64 = get(&mut conn, &fence_key(&name))
        .await
        .expect("fence key")
        .parse()
        .unwrap();
    assert_eq!(stored, *fences.last().unwrap());
    let ttl = pttl(&mut conn, &fence_key(&name)).await;
    assert!(ttl > 0, "the fence key must expire eventually (pttl {ttl})");
}

/// The fence stays ahead of a counter from a server whose clock ran ahead,
/// and still increases after the counter was lost.
#[tokio::test]
async fn fence_survives_a_lost_or_advanced_counter() {
    let url = redis_url();
    let name = unique("fence-lost");
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let mutex = c.mutex(&name).with_lease(LONG);

    let f1 = mutex.lock().await.unwrap();
    let f1 = {
        let f = f1.fence();
        f1.unlock().await.unwrap();
        f
    };
    del(&mut conn, &[&fence_key(&name)]).await;
    let g = mutex.lock().await.unwrap();
    assert!(
        g.fence() > f1,
        "fence went back from {f1} to {} after the counter was lost",
        g.fence()
    );
    g.unlock().await.unwrap();

    let ahead = f1 + 3_600_000_000; // an hour ahead, in microseconds
    set(&mut conn, &fence_key(&name), ahead).await;
    let g = mutex.lock().await.unwrap();
    assert_eq!(g.fence(), ahead + 1);
    g.unlock().await.unwrap();
}

/// An uncontended lock costs one script call, no SUBSCRIBE and no PUBLISH
/// (nobody waits); unlock deletes the key.
#[tokio::test]
async fn uncontended_lock_is_one_round_trip() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let c = client(&url).await;
    warm_up(&c).await;

    let name = unique("fast");
    let monitor = Monitor::start(&url).await;
    let mut conn = raw(&url).await;
    let guard = c.mutex(&name).try_lock().await.unwrap().expect("free lock");
    assert_eq!(guard.name(), name);
    assert_eq!(
        get(&mut conn, &lock_key(&name)).await.as_deref(),
        Some(guard.token())
    );
    let ttl = pttl(&mut conn, &lock_key(&name)).await;
    assert!(
        ttl > 25_000 && ttl <= 30_000,
        "default lease is 30 s, pttl {ttl}"
    );
    guard.unlock().await.unwrap();
    assert!(!exists(&mut conn, &lock_key(&name)).await);
    let guard = c.mutex(&name).lock().await.unwrap();
    guard.unlock().await.unwrap();

    monitor.sync().await;
    let tag = hash_tag(&name);
    assert_eq!(monitor.count(&["evalsha", script_sha("acquire"), &tag]), 2);
    assert_eq!(monitor.count(&["evalsha", script_sha("release"), &tag]), 2);
    assert_eq!(
        monitor.count(&["subscribe", &tag]),
        0,
        "{:#?}",
        monitor.lines()
    );
    assert_eq!(
        monitor.count(&["\"publish\"", &tag]),
        0,
        "published with nobody waiting"
    );
}

/// `Client::inspect` and `break_lock` on a Mutex: the holder, its lease,
/// the fence and a queued waiter are shown; breaking the lock returns the
/// holder's token and hands the lock to the waiter, and the old guard's
/// unlock finds it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_holder_and_break_lock_hands_the_lock_on() {
    let (a, b) = (client(&redis_url()).await, client(&redis_url()).await);
    let name = unique("status-view");
    let free = a.inspect(&name).await.expect("inspect a free lock");
    assert_eq!((free.kind, free.holder, free.waiters), (None, None, 0));

    let guard = a.mutex(&name).lock().await.expect("lock");
    let mutex = b.mutex(&name);
    let waiter = tokio::spawn(async move { mutex.lock().await.map(|g| g.fence()) });
    wait_for_subscribers(&redis_url(), &name, 1).await;
    let held = promptly("inspect", a.inspect(&name))
        .await
        .expect("inspect");
    assert_eq!(held.kind, Some(LockKind::Mutex));
    let holder = held.holder.expect("a holder");
    assert_eq!(holder.token, guard.token());
    assert!(holder.ttl.is_some_and(|t| t > Duration::from_secs(20)));
    assert_eq!(held.fence, Some(guard.fence()));
    assert_eq!(held.waiters, 1);

    let broken = a.break_lock(&name).await.expect("break_lock");
    assert_eq!(broken.kind, Some(LockKind::Mutex));
    assert_eq!(broken.tokens, vec![guard.token().to_owned()]);
    let got = join_within(LONG, vec![waiter], "the waiter never got the lock").await;
    let fence = got
        .into_iter()
        .next()
        .expect("one waiter")
        .expect("the waiter's lock");
    assert!(fence > guard.fence());
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld)));
}
