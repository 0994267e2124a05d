//! The FairMutex's exclusion against a real Redis: a crashed holder hands
//! over at its lease's expiry, and one holder at a time under load, also
//! while a client's connections are killed.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, client, client_ids, client_list, counter_key,
    counter_value, del, fence_key, join_within, lock_key, non_atomic_increment, raw, redis_url,
    unique,
};
use tokio::time::{Instant, timeout};

use redbell_integration_tests::scenes::fair::*;

/// A holder that vanished (guard leaked, 500 ms lease): the waiter gets the
/// lock within milliseconds of the lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holder_hands_over_at_lease_expiry() {
    let url = redis_url();
    let name = unique("fair-crashed");
    let (crashed, waiter) = (client(&url).await, client(&url).await);
    let guard = crashed
        .fair_mutex(&name)
        .with_lease(Duration::from_millis(500))
        .lock()
        .await
        .unwrap();
    let leaked_at = Instant::now();
    std::mem::forget(guard);
    let g = timeout(PROMPT, waiter.fair_mutex(&name).with_lease(LONG).lock())
        .await
        .expect("the waiter hung on a crashed holder")
        .unwrap();
    let waited = leaked_at.elapsed();
    eprintln!("acquired {waited:?} after the holder vanished (lease 500 ms)");
    assert!(
        waited >= Duration::from_millis(450),
        "acquired after {waited:?}"
    );
    assert!(
        waited <= Duration::from_millis(1200),
        "acquired after {waited:?}"
    );
    g.unlock().await.unwrap();
    let mut conn = raw(&url).await;
    assert_clean(&mut conn, &name).await;
}

/// 4 clients x 8 tasks, 400 acquisitions: a non-atomic counter stays exact,
/// nobody is ever inside together, and the lock moves to another task on at
/// least 90% of the hand-offs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_and_handoffs_under_load() {
    const TOTAL: usize = 400;
    let url = redis_url();
    let name = unique("fair-load");
    let counter = counter_key(&name);
    let tickets = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let owners = Arc::new(StdMutex::new(Vec::with_capacity(TOTAL)));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for _ in 0..4 {
        let c = client(&url).await;
        let conn = raw(&url).await;
        for _ in 0..8 {
            let task_id = tasks.len();
            let mutex = c.fair_mutex(&name).with_lease(LONG);
            let mut conn = conn.clone();
            let (counter, tickets, inside, owners) = (
                counter.clone(),
                tickets.clone(),
                inside.clone(),
                owners.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while tickets.fetch_add(1, Ordering::SeqCst) < TOTAL {
                    let g = mutex
                        .lock_timeout(Duration::from_secs(30))
                        .await
                        .unwrap_or_else(|e| panic!("task {task_id}: lock: {e}"));
                    // Left on drop, so that a panic below shows as itself
                    // and not as every later holder's "two holders".
                    let here = Inside::enter(&inside, task_id);
                    owners.lock().unwrap().push(task_id);
                    non_atomic_increment(&mut conn, &counter, Duration::ZERO).await;
                    drop(here);
                    g.unlock()
                        .await
                        .unwrap_or_else(|e| panic!("task {task_id}: unlock: {e}"));
                }
            }));
        }
    }
    join_within(
        Duration::from_secs(60),
        tasks,
        "400 hand-offs took over 60 s",
    )
    .await;
    let took = started.elapsed();
    let mut conn = raw(&url).await;
    let n = counter_value(&mut conn, &counter).await;
    assert_eq!(n, TOTAL as i64, "the non-atomic counter lost increments");
    let owners = owners.lock().unwrap().clone();
    assert_eq!(owners.len(), TOTAL);
    let moved = owners.windows(2).filter(|w| w[0] != w[1]).count();
    let ratio = moved as f64 / (TOTAL - 1) as f64;
    eprintln!("{TOTAL} acquisitions in {took:?}; hand-off ratio {ratio:.3}");
    assert!(ratio >= 0.9, "hand-off ratio {ratio:.3}");
    assert_clean(&mut conn, &name).await;
    del(&mut conn, &[&counter, &fence_key(&name)]).await;
}

/// A task's time in the critical section: counts it in on entry (failing
/// if another task is in) and out when dropped.
struct Inside<'a>(&'a AtomicUsize);

impl<'a> Inside<'a> {
    fn enter(inside: &'a AtomicUsize, task_id: usize) -> Self {
        let others = inside.fetch_add(1, Ordering::SeqCst);
        let me = Self(inside);
        assert_eq!(
            others, 0,
            "task {task_id} got the lock while another held it"
        );
        me
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A mixed run of 4 s in which one client's connections are killed every
/// 50 ms: a non-atomic counter stays exact, nobody is ever inside together,
/// and the clients left alone keep being served. On failure, the MONITOR
/// lines naming the first overlapped holder's token are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_holds_while_a_clients_connections_are_killed() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-kill-mix");
    let counter = counter_key(&name);
    let lease = Duration::from_secs(3);
    let mut admin = raw(&url).await;
    let monitor = Monitor::start(&url).await;
    let data = raw(&url).await;
    let stable = [client(&url).await, client(&url).await];
    let spared = client_ids(&client_list(&mut admin).await);
    let victim = client(&url).await; // every connection made from here on is killed

    let stop_at = Instant::now() + Duration::from_secs(4);
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(StdMutex::new(Vec::<String>::new()));
    let holder = Arc::new(StdMutex::new(None::<(usize, String, u64)>));
    let lock = lock_key(&name);
    let mut tasks = Vec::new();
    for (who, c) in stable.iter().chain([&victim]).enumerate() {
        for _ in 0..3 {
            let mutex = c.fair_mutex(&name).with_lease(lease);
            let mut data = data.clone();
            let (counter, inside, overlaps) = (counter.clone(), inside.clone(), overlaps.clone());
            let (holder, lock) = (holder.clone(), lock.clone());
            tasks.push(tokio::spawn(async move {
                let (mut done, mut errors) = (0u64, 0u64);
                let mut longest = Duration::ZERO;
                while Instant::now() < stop_at {
                    let asked = Instant::now();
                    let g = match mutex.lock_timeout(Duration::from_secs(15)).await {
                        Ok(g) => g,
                        Err(e) if who == 2 && !matches!(e, Error::Timeout) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                        Err(e) => panic!("client {who}: lock_timeout(15 s): {e:?}"),
                    };
                    longest = longest.max(asked.elapsed());
                    let me = (who, g.token().to_owned(), g.fence());
                    let other = holder.lock().unwrap().replace(me.clone());
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps
                            .lock()
                            .unwrap()
                            .push(format!("{me:?} got in while {other:?} was inside"));
                    }
                    let (n, key): (Option<i64>, Option<String>) = redis::pipe()
                        .get(&counter)
                        .get(&lock)
                        .query_async(&mut data)
                        .await
                        .unwrap();
                    if key.as_deref() != Some(g.token()) {
                        overlaps
                            .lock()
                            .unwrap()
                            .push(format!("{me:?} inside while the lock key holds {key:?}"));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let _: () = redis::cmd("SET")
                        .arg(&counter)
                        .arg(n.unwrap_or(0) + 1)
                        .query_async(&mut data)
                        .await
                        .unwrap();
                    *holder.lock().unwrap() = None;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done += 1;
                    match g.unlock().await {
                        Ok(()) => {}
                        Err(e) if who == 2 => {
                            let _ = e;
                            errors += 1;
                        }
                        Err(e) => panic!("client {who}: unlock: {e:?}"),
                    }
                }
                (who, done, errors, longest)
            }));
        }
    }
    let mut kills = 0;
    while Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
        for (id, _) in client_list(&mut admin).await {
            if !spared.contains(&id) {
                let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut admin)
                    .await;
                kills += 1;
            }
        }
    }
    let mut per_client = [0u64; 3];
    let mut victim_errors = 0;
    let mut longest = Duration::ZERO;
    for (who, done, errors, wait) in
        join_within(Duration::from_secs(40), tasks, "the mixed run did not end").await
    {
        per_client[who] += done;
        victim_errors += errors;
        if who < 2 {
            longest = longest.max(wait);
        }
    }
    let total: u64 = per_client.iter().sum();
    let mut data = data.clone();
    let n = counter_value(&mut data, &counter).await;
    eprintln!(
        "{kills} connections killed; critical sections per client {per_client:?}; \
         victim errors {victim_errors}; longest wait of a spared client {longest:?}"
    );
    let overlaps = overlaps.lock().unwrap().clone();
    if let Some(first) = overlaps.first() {
        monitor.sync().await;
        let token = first.split('"').nth(3).unwrap_or("?").to_owned();
        eprintln!("MONITOR lines naming {token}:");
        for line in monitor
            .lines()
            .iter()
            .filter(|l| l.contains(&token))
            .take(20)
        {
            eprintln!("  {}", &line[..line.len().min(300)]);
        }
    }
    assert!(
        overlaps.is_empty(),
        "exclusion broken {} times (client 2 is the one whose connections are killed): {:#?}",
        overlaps.len(),
        &overlaps[..overlaps.len().min(6)]
    );
    assert_eq!(n as u64, total, "the non-atomic counter lost increments");
    assert!(kills >= 20, "only {kills} connections killed");
    assert!(
        per_client[0] >= 10 && per_client[1] >= 10,
        "the spared clients were starved: {per_client:?}"
    );
}
