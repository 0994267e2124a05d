//! What a parked waiter costs its process (issue 32): a task parked in
//! `lock()` keeps its whole future alive while it waits, and a future is as
//! big as its biggest await point. The script call's state (redis-rs, the
//! recovery of a lost reply) made every parked `lock()` ~11 KB in a release
//! build (~15 KB of RSS per waiter at 10,000 waiters, `redbell-bench
//! scale`); the attempt and the SUBSCRIBE are now boxed and live only
//! during the call.

use std::time::Duration;

use redbell_integration_tests::{client, redis_url, unique};

/// Above this, parked waiters cost more than the 1 KiB per waiter
/// in the future alone. Debug builds lay futures out larger than release
/// builds; both stay under this bound with the attempt boxed.
const MAX_LOCK_FUTURE: usize = 2 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_lock_future_is_small_and_still_hands_over() {
    let url = redis_url();
    let name = unique("parked-memory");
    let holder = client(&url).await;
    let waiters = client(&url).await;
    let guard = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .await
        .expect("holder locks");

    let mutex = waiters.mutex(&name);
    let size = std::mem::size_of_val(&mutex.lock());
    println!("lock() future: {size} bytes");
    assert!(
        size <= MAX_LOCK_FUTURE,
        "a parked lock() future is {size} bytes, over {MAX_LOCK_FUTURE}: every parked waiter \
         carries it"
    );

    // The boxed attempt still does its work: 200 parked waiters of one
    // client all get the lock in turn once the holder lets go.
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let m = waiters.mutex(&name);
            tokio::spawn(async move { m.lock().await?.unlock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.unlock().await.expect("holder unlocks");
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        for t in tasks {
            t.await.expect("task").expect("waiter locks and unlocks");
        }
    })
    .await;
    assert!(
        all.is_ok(),
        "200 parked waiters were not all served in 60 s"
    );
}
