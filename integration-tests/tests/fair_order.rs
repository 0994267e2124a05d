//! The FairMutex's order against a real Redis: waiters served in arrival
//! order with increasing fences, newcomers never barging past the queue, and
//! a newcomer behind only dead entries taking the free lock at once.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redbell_integration_tests::{
    LONG, PROMPT, client, fifo_key, join_within, raw, redis_url, subscribers, unique,
    wait_for_subscribers,
};
use tokio::time::{Instant, timeout};

use redbell_integration_tests::scenes::fair::*;

/// 6 clients queue one after another behind a held lock and get it in
/// arrival order, with increasing fences, in each of 20 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    let url = redis_url();
    let name = unique("fair-order");
    let holder = client(&url).await;
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(client(&url).await);
    }
    let mut conn = raw(&url).await;
    for round in 0..20 {
        let h = holder
            .fair_mutex(&name)
            .with_lease(LONG)
            .lock_timeout(PROMPT)
            .await
            .expect("the idle lock");
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            let mutex = c.fair_mutex(&name).with_lease(LONG);
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let g = mutex
                    .lock_timeout(Duration::from_secs(20))
                    .await
                    .expect("lock");
                order.lock().unwrap().push((i, g.fence()));
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.unlock().await.expect("unlock");
            }));
            wait_queued(&conn, &name, i as i64 + 1).await;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        wait_for_subscribers(&url, &name, 6).await;
        h.unlock().await.unwrap();
        join_within(
            Duration::from_secs(20),
            tasks,
            "a round did not finish within 20 s",
        )
        .await;
        let order = order.lock().unwrap().clone();
        let who: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            who,
            [0, 1, 2, 3, 4, 5],
            "round {round}: served out of order"
        );
        for w in order.windows(2) {
            assert!(w[0].1 < w[1].1, "round {round}: fences {order:?}");
        }
    }
    assert_clean(&mut conn, &name).await;
}

/// While 3 waiters queue, a newcomer's try_lock fails (also at every moment
/// of the hand-offs), and a newcomer's lock() is served after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newcomers_do_not_barge() {
    let url = redis_url();
    let name = unique("fair-barge");
    let mut conn = raw(&url).await;
    let holder = client(&url).await;
    let h = holder
        .fair_mutex(&name)
        .with_lease(LONG)
        .lock()
        .await
        .unwrap();
    let order = Arc::new(StdMutex::new(Vec::new()));
    let newcomer_in = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let mutex = client(&url).await.fair_mutex(&name).with_lease(LONG);
        let (order, newcomer_in) = (order.clone(), newcomer_in.clone());
        if i == 3 {
            // The newcomer: first a try_lock behind the queue, then lock().
            assert!(
                mutex.try_lock().await.unwrap().is_none(),
                "try_lock got a held lock"
            );
        }
        tasks.push(tokio::spawn(async move {
            let g = mutex
                .lock_timeout(Duration::from_secs(20))
                .await
                .expect("lock");
            order.lock().unwrap().push(i);
            if i == 3 {
                newcomer_in.store(true, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.unlock().await.expect("unlock");
        }));
        wait_queued(&conn, &name, i + 1).await;
    }
    wait_for_subscribers(&url, &name, 4).await;

    // A barger keeps trying while the queue drains.
    let barger = client(&url).await.fair_mutex(&name).with_lease(LONG);
    let done = newcomer_in.clone();
    let barging = tokio::spawn(async move {
        let (mut tries, mut barged) = (0, 0);
        while !done.load(Ordering::SeqCst) {
            if let Some(g) = barger.try_lock().await.unwrap() {
                if !done.load(Ordering::SeqCst) {
                    barged += 1;
                }
                g.unlock().await.unwrap();
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (tries, barged)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.unlock().await.unwrap();
    join_within(Duration::from_secs(20), tasks, "the queue did not drain").await;
    let (tries, barged) = timeout(PROMPT, barging).await.unwrap().unwrap();
    eprintln!("barger: {tries} try_lock calls during the hand-offs, {barged} succeeded");
    assert_eq!(barged, 0, "try_lock took the lock ahead of queued waiters");
    assert!(tries >= 10, "the barger barely tried ({tries})");
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3], "served out of order");
    assert_clean(&mut conn, &name).await;
}

/// The lock is free (its holder's lease ran out) and the only queued entry
/// belongs to a client that is gone: a newcomer learns so in its attempt and
/// takes the lock at once, also when its client already listens on the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newcomer_behind_only_dead_entries_takes_the_free_lock_at_once() {
    let url = redis_url();
    let name = unique("fair-dead-queue");
    let mut conn = raw(&url).await;
    let (h, n) = (client(&url).await, client(&url).await);
    // N waits once, so that its client keeps listening (the subscription lingers).
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let first = spawn_lock(n.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 1).await;
    guard.unlock().await.unwrap();
    let (_, g) = timeout(PROMPT, first).await.unwrap().unwrap();
    g.unwrap().unlock().await.unwrap();

    // A dead client's entry at the head of the queue, the lock free.
    let dead = format!("{}:1:{}", unique("gone").replace('-', ""), "deadtoken");
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(fifo_key(&name))
        .arg(1)
        .arg(&dead)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        subscribers(&mut conn, &name).await >= 1,
        "N's subscription did not linger"
    );

    let started = Instant::now();
    let g = timeout(PROMPT, n.fair_mutex(&name).with_lease(LONG).lock())
        .await
        .expect("the newcomer hung")
        .unwrap();
    let took = started.elapsed();
    eprintln!("newcomer in after {took:?} behind a dead queue entry");
    g.unlock().await.unwrap();
    assert_clean(&mut conn, &name).await;
    assert!(
        took < Duration::from_millis(300),
        "a newcomer took {took:?} to get a free lock whose queue held only a dead entry"
    );
}
