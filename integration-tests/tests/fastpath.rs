//! The lean paths of the plain mutex's scripts, and what each shortcut must
//! still guarantee: an uncontended lock+unlock skips the queue work, yet a
//! waiter that queued meanwhile is woken; the release's reservation for the
//! woken waiter lives in the lock key and serves that waiter only; the fence
//! is written with `SET ... GET` and still counts past a clock behind it.

use std::time::{Duration, Instant};

use redbell_integration_tests::{
    LONG, PrivateRedis, client, commandstats, fence_key, get, lock_key, pttl, raw, reset_stats,
    server_ms, set, set_px, unique, waiters_key, zrange,
};

/// An uncontended `lock()` + `unlock()` costs two script calls and at most
/// 9 commands in all, none of them queue work, PUBLISH or PTTL. Before the
/// lean scripts: 13 (the acquire read the hand-off key and the readers
/// apart and removed its member from a queue that did not exist; the
/// release pruned and read the queue after TIME).
#[tokio::test]
async fn an_uncontended_lock_and_unlock_does_no_queue_work() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let c = client(&url).await;
    let mutex = c.mutex(&unique("lean")).with_lease(LONG);
    mutex.lock().await.unwrap().unlock().await.unwrap(); // scripts loaded
    const PAIRS: u64 = 50;
    reset_stats(&mut conn).await;
    for _ in 0..PAIRS {
        mutex.lock().await.unwrap().unlock().await.unwrap();
    }
    let stats = commandstats(&mut conn).await;
    let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
    let all: u64 = stats
        .iter()
        .filter(|(name, _)| !name.starts_with("config") && !name.starts_with("info"))
        .map(|(_, n)| n)
        .sum();
    eprintln!("{PAIRS} pairs: {stats:?}");
    assert_eq!(calls("evalsha"), 2 * PAIRS, "{stats:?}");
    for none in [
        "publish",
        "zadd",
        "zrem",
        "zremrangebyscore",
        "pttl",
        "pexpire",
    ] {
        assert_eq!(calls(none), 0, "{none} on the uncontended path: {stats:?}");
    }
    assert!(
        all <= 9 * PAIRS,
        "{:.2} commands per lock+unlock (at most 9): {stats:?}",
        all as f64 / PAIRS as f64
    );
}

/// The release's "nobody waits" shortcut reads the queue in the same script
/// as its DEL, so a waiter that queued after the holder took the free lock
/// (there was no queue key then) is still woken at once, not after the
/// holder's 30 s lease.
#[tokio::test]
async fn a_release_wakes_a_waiter_that_queued_after_a_fast_path_acquire() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let name = unique("fast-then-queued");
    let (holder, waiter) = (client(&url).await, client(&url).await);
    for round in 0..5 {
        let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
        assert!(
            zrange(&mut conn, &waiters_key(&name)).await.is_empty(),
            "round {round}: the holder found a queue"
        );
        let mutex = waiter.mutex(&name).with_lease(LONG);
        let task = tokio::spawn(async move { mutex.lock().await.map(|g| (Instant::now(), g)) });
        let queued = tokio::time::timeout(Duration::from_secs(5), async {
            while zrange(&mut conn, &waiters_key(&name)).await.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(queued.is_ok(), "round {round}: the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await; // parked
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let (acquired, g) = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the release did not wake the waiter"))
            .unwrap()
            .unwrap();
        let took = acquired - released;
        assert!(
            took < Duration::from_secs(1),
            "round {round}: woken {took:?} after the release"
        );
        g.unlock().await.unwrap();
        assert!(
            get(&mut conn, &lock_key(&name)).await.is_none(),
            "round {round}: the lock key is left behind"
        );
    }
}

/// One run of the acquire script, as the client sends it.
async fn acquire(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    token: &str,
    member: &str,
) -> (i64, i64) {
    let source = redbell::scripts()
        .into_iter()
        .find(|s| s.name == "acquire")
        .unwrap()
        .source;
    let lock = lock_key(name);
    redis::cmd("EVAL")
        .arg(source)
        .arg(5)
        .arg(&lock)
        .arg(format!("{lock}:fence"))
        .arg(format!("{lock}:waiters"))
        .arg(format!("{lock}:readers"))
        .arg(format!("{lock}:holders"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(token)
        .arg(30_000)
        .arg(60_000)
        .arg(member)
        .arg(2_000)
        .arg(1_000)
        .arg(100)
        .arg("m")
        .query_async(conn)
        .await
        .unwrap()
}

/// The release reserves the free lock for the waiter it woke by writing
/// `m:<member>` into the lock key for the reservation: everyone else (a
/// waiter, a `try_lock`) finds it held for the rest of the reservation and
/// the waiter queues; the woken member takes it with its own token and the
/// full lease.
#[tokio::test]
async fn a_reservation_serves_the_woken_waiter_only() {
    let redis = PrivateRedis::start().await;
    let mut conn = raw(&redis.url()).await;
    let name = unique("reserved");
    let lock = lock_key(&name);
    set_px(&mut conn, &lock, "m:c1:1", 500).await;

    let (got, park) = acquire(&mut conn, &name, "mother", "c2:7").await;
    assert_eq!(got, 0, "another waiter took a reserved lock");
    assert!((1..=500).contains(&park), "parks {park} ms");
    assert_eq!(zrange(&mut conn, &waiters_key(&name)).await, ["c2:7"]);
    let (got, _) = acquire(&mut conn, &name, "mtry", "").await;
    assert_eq!(got, 0, "a try_lock took a reserved lock");

    let before = server_ms(&mut conn).await * 1000;
    let (got, fence) = acquire(&mut conn, &name, "mmine", "c1:1").await;
    assert_eq!(got, 1, "the woken waiter did not get its reservation");
    assert!(fence as u64 >= before, "fence {fence} is behind the clock");
    assert_eq!(get(&mut conn, &lock).await.as_deref(), Some("mmine"));
    assert!(pttl(&mut conn, &lock).await > 29_000, "not the full lease");
    assert_eq!(zrange(&mut conn, &waiters_key(&name)).await, ["c2:7"]);
}

/// The fence is written with `SET ... GET` before the previous value is
/// known; when the clock is behind the counter (a clock stepped back, or a
/// failover to a server whose clock lags), it is corrected to previous + 1.
#[tokio::test]
async fn the_fence_counts_on_past_a_clock_behind_it() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let name = unique("fence-ahead");
    let ahead = server_ms(&mut conn).await * 1000 + 3_600_000_000_000;
    set(&mut conn, &fence_key(&name), ahead).await;
    let c = client(&url).await;
    let mutex = c.mutex(&name).with_lease(LONG);
    for i in 1..=3 {
        let g = mutex.lock().await.unwrap();
        assert_eq!(g.fence(), ahead + i, "acquisition {i}");
        g.unlock().await.unwrap();
    }
    assert_eq!(
        get(&mut conn, &fence_key(&name)).await,
        Some((ahead + 3).to_string())
    );
    assert!(
        pttl(&mut conn, &fence_key(&name)).await > 0,
        "the fence key lost its expiry"
    );
}
