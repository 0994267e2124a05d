//! Cancellation: `tokio::time::timeout(d, mutex.lock())` dropped at any await
//! point leaves no lock behind and strands no other waiter.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use redbell::MutexGuard;
use redbell_integration_tests::{
    LONG, client, eventually, get, join_within, raw, redis_url, scan, unique, zcard,
};
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

/// The lock keys (not fence or queue keys) of names starting with `prefix`, with their values.
async fn lock_keys(conn: &mut MultiplexedConnection, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for key in scan(conn, &format!("redbell:{{{prefix}*")).await {
        // Only lock keys `redbell:{name}`; not `:fence`, `:waiters`, ...
        if !key.ends_with('}') {
            continue;
        }
        if let Some(v) = get(conn, &key).await {
            out.insert(key, v);
        }
    }
    out
}

/// How many entries the sorted sets (waiter queues) of names starting with
/// `prefix` hold in all.
async fn queued_members(conn: &mut MultiplexedConnection, prefix: &str) -> i64 {
    let mut n = 0;
    for key in scan(conn, &format!("redbell:{{{prefix}*")).await {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        if kind == "zset" {
            n += zcard(conn, &key).await;
        }
    }
    n
}

/// Whether, within 2 s, no lock key of a name starting with `prefix` is
/// left ([`lock_keys`] empty).
async fn lock_keys_cleared(conn: &MultiplexedConnection, prefix: &str) -> bool {
    eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        async move { lock_keys(&mut conn, prefix).await.is_empty() }
    })
    .await
}

/// 1,000 lock() futures on ~20 contended names across 4 clients, each cut off
/// after 0-5 ms, amid holders: afterwards only the keys of live guards remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_futures_leave_no_lock_behind() {
    let url = redis_url();
    let prefix = unique("cancel");
    let names: Arc<Vec<String>> = Arc::new((0..20).map(|i| format!("{prefix}-{i}")).collect());
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&url).await);
    }

    // Holders keep the names contended during the storm.
    let mut holders = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mutex = clients[i % clients.len()].mutex(name).with_lease(LONG);
        holders.push(tokio::spawn(async move {
            for round in 0..5 {
                let g = mutex.lock().await.expect("holder lock");
                tokio::time::sleep(Duration::from_millis(3 + round)).await;
                if round % 2 == 0 {
                    g.unlock().await.expect("holder unlock");
                } else {
                    drop(g);
                }
                tokio::task::yield_now().await;
            }
        }));
    }

    let mut cancelled = Vec::new();
    let plans: Vec<(usize, usize, u64, u32)> = {
        let mut rng = rand::rng();
        (0..1000)
            .map(|_| {
                (
                    rng.random_range(0..clients.len()),
                    rng.random_range(0..names.len()),
                    rng.random_range(0..=5_000),
                    rng.random_range(0..4),
                )
            })
            .collect()
    };
    for (c, n, micros, fate) in plans {
        let mutex = clients[c].mutex(&names[n]).with_lease(LONG);
        cancelled.push(tokio::spawn(async move {
            match timeout(Duration::from_micros(micros), mutex.lock()).await {
                Err(_) => (false, None),
                Ok(Err(e)) => panic!("lock failed: {e:?}"),
                // Some acquisitions are kept alive to the end, the rest
                // unlocked or dropped at once.
                Ok(Ok(g)) => match fate {
                    0 => (true, Some(g)),
                    1 => {
                        g.unlock().await.expect("unlock");
                        (true, None)
                    }
                    _ => (true, None),
                },
            }
        }));
    }

    let mut alive: Vec<MutexGuard> = Vec::new();
    let mut acquired = 0;
    for (got, kept) in join_within(
        Duration::from_secs(60),
        cancelled,
        "the cancelled futures did not all finish",
    )
    .await
    {
        acquired += usize::from(got);
        alive.extend(kept);
    }
    eprintln!(
        "{acquired} of 1000 acquired before their timeout, {} kept",
        alive.len()
    );
    // Holders that cannot finish because a kept guard blocks their name are
    // cancelled too (dropped mid-wait).
    tokio::time::sleep(Duration::from_millis(500)).await;
    for h in &holders {
        h.abort();
    }
    for h in holders {
        let _ = h.await;
    }

    let expected: BTreeMap<String, String> = alive
        .iter()
        .map(|g| (format!("redbell:{{{}}}", g.name()), g.token().to_owned()))
        .collect();
    assert_eq!(expected.len(), alive.len(), "two live guards on one name");
    let mut conn = raw(&url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut last = lock_keys(&mut conn, &prefix).await;
    while last != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        last = lock_keys(&mut conn, &prefix).await;
    }
    assert_eq!(
        last, expected,
        "lock keys in Redis (left) vs live guards (right): cancelled futures left locks behind"
    );

    drop(alive);
    // Cancelled waiters also left the waiter queues (any sorted set under
    // the names; entries would otherwise linger until they expire).
    let queues_clear = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        let prefix = prefix.clone();
        async move { queued_members(&mut conn, &prefix).await == 0 }
    })
    .await;
    assert!(
        queues_clear,
        "{} waiter entries left queued by cancelled waiters",
        queued_members(&mut conn, &prefix).await
    );
    let cleared = lock_keys_cleared(&conn, &prefix).await;
    assert!(cleared, "dropped guards were not released");
}

/// A waiter that is cancelled right when the release arrives must pass the
/// wake-up on: the other local waiter still gets the lock at once (the
/// lease is 30 s, so a lost wake-up shows as a timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_passes_the_wakeup_on() {
    let url = redis_url();
    let name = unique("pass-on");
    let (holder, waiters) = (client(&url).await, client(&url).await);
    for round in 0..20u64 {
        let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
        let doomed = {
            let mutex = waiters.mutex(&name).with_lease(LONG);
            tokio::spawn(async move { mutex.lock().await })
        };
        let survivor = {
            let mutex = waiters.mutex(&name).with_lease(LONG);
            tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        guard.unlock().await.unwrap();
        // Cancel the first waiter somewhere around its wake-up.
        tokio::time::sleep(Duration::from_micros(round * 150)).await;
        doomed.abort();
        let doomed_guard = doomed.await.ok().map(|r| r.expect("doomed lock"));
        if let Some(g) = doomed_guard {
            g.unlock().await.unwrap();
        }
        let g = survivor
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: the other waiter was stranded: {e}"));
        g.unlock().await.unwrap();
    }
}

/// try_lock and lock_timeout futures cancelled mid-flight leave nothing held
/// either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_try_lock_leaves_no_lock_behind() {
    let url = redis_url();
    let prefix = unique("cancel-try");
    let c = client(&url).await;
    let mut tasks = Vec::new();
    for i in 0..300u64 {
        let mutex = c.mutex(&format!("{prefix}-{}", i % 10)).with_lease(LONG);
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let _ = timeout(Duration::from_micros(i * 13 % 3000), mutex.try_lock()).await;
            } else {
                let _ = timeout(
                    Duration::from_micros(i * 17 % 3000),
                    mutex.lock_timeout(Duration::from_millis(2)),
                )
                .await;
            }
        }));
    }
    for t in futures_util::future::join_all(tasks).await {
        t.unwrap();
    }
    let conn = raw(&url).await;
    let clean = lock_keys_cleared(&conn, &prefix).await;
    assert!(clean, "cancelled try_lock/lock_timeout left a lock behind");
}
