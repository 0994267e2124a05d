//! A FairMutex across a Sentinel failover that lost the queue's last
//! changes: the promoted replica still queues members whose acquisitions
//! were served (and released) on the old primary. Their clients are still
//! subscribed (a live waiter, or the subscription's linger), so each such
//! member passes the probe and gets a grant nobody confirms; the lock then
//! sat free a claim (500 ms) per stale member while live waiters waited (a
//! 10-minute Sentinel soak: 2.9 s, where the bound was 2.7 s).
//!
//! A client that is sent a grant for a waiter it no longer has, whose
//! acquisition holds no live guard, passes the grant on (`fair_pass`) at
//! once, as it does a wake-up.

use std::time::Duration;

use redbell_integration_tests::sentinel::{Topology, replica_caught_up, sentinel_client};
use redbell_integration_tests::{
    LONG, PROMPT, fair_queue, fifo_key, get, lock_key, pttl, raw, recovering, unique,
    wait_for_members,
};
use tokio::time::{Instant, timeout};

/// How many clients leave a stale member behind.
const STALE: usize = 4;

/// Four clients queue behind a holder, replication is held back, and all
/// four are served and let go on the old primary; the holder takes the lock
/// again and the four wait once more; the primary is killed. The promoted
/// replica has the holder's first key (until its 5 s lease ends) and the
/// four served members; the four waiters move there and queue behind them.
/// One of them must get the lock within a second of that lease's end, not a
/// claim per stale member later.
///
/// Before (a grant to a gone waiter was ignored): about 2 s past the lease
/// (four claims of 500 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_members_after_a_failover_do_not_hold_the_lock_free() {
    let (topo, proxy) = Topology::start_with_proxy().await;
    let name = unique("sentinel-fair-stale");
    let holder = sentinel_client(&topo).await;
    let mut queued = Vec::new();
    for _ in 0..STALE {
        queued.push(sentinel_client(&topo).await);
    }
    let primary = raw(&topo.primary_url()).await;
    let mut replica = raw(&topo.replica_url()).await;
    let fifo = fifo_key(&name);

    // A lease the stale key outlives the failover with, short enough to
    // end soon after it.
    let guard = holder
        .fair_mutex(&name)
        .with_lease(Duration::from_secs(5))
        .lock()
        .await
        .expect("the holder's lock");
    let mut served = Vec::new();
    for (i, c) in queued.iter().enumerate() {
        let fair = c.fair_mutex(&name).with_lease(LONG);
        served.push(tokio::spawn(async move {
            let g = fair.lock().await.expect("a queued waiter's lock");
            g.unlock().await.expect("a queued waiter's unlock");
        }));
        // One at a time, so they queue in this order.
        wait_for_members(&primary, &fifo, i as i64 + 1, POLL_QUEUE).await;
    }
    assert!(replica_caught_up(&topo.primary_url()).await);
    let members = fair_queue(&mut replica, &name).await;
    assert_eq!(members.len(), STALE, "the replica's queue: {members:?}");

    // Held back: every waiter served and gone on the old primary only, then
    // the holder again, and the same clients waiting once more.
    proxy.pause().await;
    guard.unlock().await.expect("the holder's unlock");
    for s in served {
        timeout(PROMPT, s)
            .await
            .expect("the queued waiters were not served in turn")
            .expect("a queued waiter failed");
    }
    let lost_hold = holder
        .fair_mutex(&name)
        .with_lease(LONG)
        .lock()
        .await
        .expect("the holder's second lock");
    let mut waiting = Vec::new();
    for (i, c) in queued.iter().enumerate() {
        let fair = c.fair_mutex(&name).with_lease(LONG);
        waiting.push(tokio::spawn(async move {
            // As the soak's workers do: a lock() that met the dead primary
            // fails, and the worker asks again.
            let (g, _) =
                recovering("a waiter's lock across the failover", LONG, || fair.lock()).await;
            let at = Instant::now();
            g.unlock()
                .await
                .expect("a waiter's unlock after the failover");
            at
        }));
        wait_for_members(&primary, &fifo, i as i64 + 1, POLL_QUEUE).await;
    }
    topo.kill_primary().await;
    proxy.cut().await.expect("cut the proxy");
    let failover = topo.wait_for_failover().await;

    let url = topo.replica_url();
    let mut new_primary = raw(&url).await;
    let stale_key = get(&mut new_primary, &lock_key(&name)).await;
    let left = pttl(&mut new_primary, &lock_key(&name)).await;
    let free_at = Instant::now() + Duration::from_millis(left.max(0) as u64);
    assert!(
        stale_key.is_some() && left > 0,
        "the holder's first key is gone from the new primary ({left} ms): the failover took too long"
    );
    let stale: Vec<String> = fair_queue(&mut new_primary, &name)
        .await
        .into_iter()
        .filter(|m| members.contains(m))
        .collect();
    assert_eq!(
        stale, members,
        "the promoted replica does not queue the served members: replication was not held back"
    );

    let mut first = None::<Instant>;
    for w in waiting {
        let at = timeout(Duration::from_secs(30), w)
            .await
            .expect("a waiter never got the lock after the failover")
            .expect("a waiter failed after the failover");
        first = Some(first.map_or(at, |f| f.min(at)));
    }
    let late = first
        .expect("four waiters")
        .saturating_duration_since(free_at);
    eprintln!(
        "failover {failover:?}; the first waiter got the lock {late:?} after the stale lease \
         ended ({STALE} stale members)"
    );
    assert!(
        late < Duration::from_secs(1),
        "the lock sat free {late:?} past the stale lease while four clients waited: the stale \
         members' grants lapsed one claim at a time"
    );
    drop(lost_hold); // lost with the old primary
}

/// How often the queue is polled while the waiters line up.
const POLL_QUEUE: Duration = Duration::from_millis(5);
