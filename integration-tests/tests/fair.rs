//! The FairMutex against a real Redis: FIFO order, no barging, direct
//! hand-off surviving lost and unconfirmed grants, cancelled and timed-out
//! heads, crashed holders, exclusion under load, and a clean queue after.
//!
//! Some tests run one client on a Tokio runtime of its own ([`Side`]), which
//! stands for another process: freezing that runtime stops the client dead
//! (it reads nothing, sends nothing, runs no timer) while its sockets stay
//! open, like a process that hangs or dies right after a grant reached it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redbell::{Client, Error, FairMutex, MutexGuard};
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, Side, client, client_ids, client_list, config_set,
    counter_key, counter_value, del, eventually, exists, fair_queue, fence_key, fifo_expiry_key,
    fifo_key, get, join_within, kill_client, lock_key, non_atomic_increment, pttl, raw, redis_url,
    spawn_timed, subscribers, subscriptions, unique, wait_for_members, wait_for_subscribers,
    wake_channel, zrange,
};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// The holder's lease in the unconfirmed-grant tests.
const HOLDER_LEASE: Duration = Duration::from_secs(4);

/// Waits until `n` waiters are queued for lock `name` at the server.
async fn wait_queued(conn: &MultiplexedConnection, name: &str, n: i64) {
    wait_for_members(conn, &fifo_key(name), n, Duration::from_millis(2)).await;
}

/// Waits until `n` waiters are queued for lock `name` and `n` clients
/// listen on it: all of them parked, ready to be granted the lock.
async fn wait_parked(conn: &MultiplexedConnection, url: &str, name: &str, n: i64) {
    wait_queued(conn, name, n).await;
    wait_for_subscribers(url, name, n).await;
}

/// Asserts that lock `name` is free and its queue keys are gone.
async fn assert_clean(conn: &mut MultiplexedConnection, name: &str) {
    let ok = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        async move {
            !exists(&mut conn, &lock_key(name)).await
                && !exists(&mut conn, &fifo_key(name)).await
                && !exists(&mut conn, &fifo_expiry_key(name)).await
        }
    })
    .await;
    if !ok {
        let fifo = zrange(conn, &fifo_key(name)).await;
        panic!(
            "lock {name} not clean once idle: holder {:?}, queue {fifo:?}, expiry key exists: {}",
            get(conn, &lock_key(name)).await,
            exists(conn, &fifo_expiry_key(name)).await
        );
    }
}

/// The ids of the connections a client opened: those in the server's
/// [`client_list`] now that were not in `before`.
async fn new_connections(admin: &mut MultiplexedConnection, before: &HashSet<u64>) -> HashSet<u64> {
    client_ids(&client_list(admin).await)
        .difference(before)
        .copied()
        .collect()
}

/// A waiter's outcome: when lock() returned, and what.
type Waited = (Instant, Result<MutexGuard, Error>);

fn spawn_lock(mutex: FairMutex) -> JoinHandle<Waited> {
    spawn_timed(async move { mutex.lock().await })
}

/// Waits until A (its lock() already spawned) is queued and listening, then
/// queues B behind it: B's lock() task, once both are parked.
async fn queue_b_behind_a(
    conn: &MultiplexedConnection,
    url: &str,
    name: &str,
    b: &Client,
) -> JoinHandle<Waited> {
    wait_parked(conn, url, name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(name).with_lease(LONG));
    wait_parked(conn, url, name, 2).await;
    b_task
}

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

/// Lost grant, case (a): the head's client lost its pub/sub connection (and
/// cannot reconnect) when the holder releases: the grant reaches nobody, so
/// the next waiter is granted at once in the same script. The cut-off waiter
/// is served later, never together with the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_reaching_nobody_moves_on_at_once() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-lost-grant");
    let mut admin = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let before = client_ids(&client_list(&mut admin).await);
    let side = Side::start();
    let a = side.client(&url).await;
    // A's connections (the helpers below open short-lived ones)
    let a_ids = new_connections(&mut admin, &before).await;
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));

    let (am, a_inside) = (a.fair_mutex(&name).with_lease(LONG), inside.clone());
    let a_task = side.spawn(async move {
        let g = am.lock().await.expect("A's lock");
        assert_eq!(
            a_inside.fetch_add(1, Ordering::SeqCst),
            0,
            "A got in beside B"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        a_inside.fetch_sub(1, Ordering::SeqCst);
        g.unlock().await.expect("A's unlock");
    });
    let b_task = queue_b_behind_a(&admin, &url, &name, &b).await;

    let list = client_list(&mut admin).await;
    let a_pubsub: Vec<u64> = list
        .iter()
        .filter(|(id, line)| a_ids.contains(id) && subscriptions(line) > 0)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(a_pubsub.len(), 1, "A's pub/sub connection: {list:#?}");
    let frozen = side.freeze().await; // A cannot reconnect
    kill_client(&mut admin, a_pubsub[0]).await;
    assert_eq!(
        subscribers(&mut admin, &name).await,
        1,
        "only B listens now"
    );

    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was not granted the lock")
        .unwrap();
    let g = g.unwrap();
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release whose grant to A reached nobody");
    assert!(delay < Duration::from_millis(500), "B in after {delay:?}");
    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
    drop(frozen); // A reconnects while B holds
    tokio::time::sleep(Duration::from_millis(300)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    g.unlock().await.unwrap();
    timeout(PROMPT, a_task)
        .await
        .expect("A was never served after its reconnect")
        .unwrap();
    assert_clean(&mut admin, &name).await;
}

/// Case (b): the grant reached the head's client, which is cancelled before
/// it confirms (its lock() task aborted while its runtime is frozen): once it
/// runs again, the grant is passed on to the next waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_grantee_passes_the_grant_on() {
    let url = redis_url();
    let name = unique("fair-cancel-grant");
    let mut conn = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let side = Side::start();
    let a = side.client(&url).await;
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let a_task = side.spawn(async move { am.lock().await.map(drop) });
    let b_task = queue_b_behind_a(&conn, &url, &name, &b).await;

    let frozen = side.freeze().await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    // The lock is now A's, on a claim lease.
    let claimed = pttl(&mut conn, &lock_key(&name)).await;
    assert!(
        claimed > 0 && claimed <= 500,
        "no claim lease for A: pttl {claimed}"
    );
    a_task.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let thawed_at = Instant::now();
    drop(frozen);
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let after_thaw = b_in.saturating_duration_since(thawed_at);
    eprintln!(
        "B in {after_thaw:?} after the cancelled grantee ran again ({:?} after the release)",
        b_in - released_at
    );
    assert!(
        b_in - released_at < Duration::from_millis(450),
        "B in {:?} after the release: not passed on when A was cancelled, only when the \
         500 ms claim lapsed",
        b_in - released_at
    );
    assert!(
        timeout(PROMPT, a_task)
            .await
            .unwrap()
            .unwrap_err()
            .is_cancelled(),
        "A's task was not cancelled"
    );
    g.unlock().await.unwrap();
    assert_clean(&mut conn, &name).await;
}

/// As above, but the head's lock_timeout() runs out while it holds an
/// unconfirmed grant: it reports Timeout and the grant moves on at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_grantee_passes_the_grant_on() {
    let url = redis_url();
    let name = unique("fair-timeout-grant");
    let mut conn = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let side = Side::start();
    let a = side.client(&url).await;
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let a_deadline = Instant::now() + Duration::from_millis(1500);
    let a_task =
        side.spawn(async move { am.lock_timeout(Duration::from_millis(1500)).await.map(drop) });
    let b_task = queue_b_behind_a(&conn, &url, &name, &b).await;
    assert!(
        Instant::now() + Duration::from_millis(100) < a_deadline,
        "set-up too slow"
    );

    // Frozen from shortly before A's deadline to just after it: shorter than
    // the 500 ms claim, so only a pass-on can serve B before the claim lapses.
    tokio::time::sleep_until(a_deadline - Duration::from_millis(150)).await;
    let frozen = side.freeze().await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap(); // granted to the frozen A
    tokio::time::sleep_until(a_deadline + Duration::from_millis(30)).await;
    let thawed_at = Instant::now();
    drop(frozen);
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let after_thaw = b_in.saturating_duration_since(thawed_at);
    let after_release = b_in - released_at;
    eprintln!(
        "B in {after_thaw:?} after the timed-out grantee ran again ({after_release:?} after \
         the release, A frozen for {:?})",
        thawed_at - released_at
    );
    assert!(
        after_release < Duration::from_millis(450),
        "B in {after_release:?} after the release: not passed on when A timed out, only when \
         the 500 ms claim lapsed"
    );
    let a_result = timeout(PROMPT, a_task).await.unwrap().unwrap();
    assert!(matches!(a_result, Err(Error::Timeout)), "{a_result:?}");
    g.unlock().await.unwrap();
    assert_clean(&mut conn, &name).await;
}

/// Case (c): the grant reached the head's client, which then never confirms
/// and never passes it on (the whole client frozen, as if it died on
/// receipt): the next waiter takes over once the 500 ms claim lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_grant_lapses_after_the_claim_lease() {
    let url = redis_url();
    let name = unique("fair-dead-grantee");
    let mut conn = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let side = Side::start();
    let a = side.client(&url).await;
    // The holder's lease: long against the 500 ms claim, short enough for
    // this test to see B served when it ends, if not before.
    let guard = h
        .fair_mutex(&name)
        .with_lease(HOLDER_LEASE)
        .lock()
        .await
        .unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let _a_task = side.spawn(async move { am.lock().await.map(drop) });
    let b_task = queue_b_behind_a(&conn, &url, &name, &b).await;

    let _frozen = side.freeze().await; // for the rest of the test
    let holder_left = pttl(&mut conn, &lock_key(&name)).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let claimed = pttl(&mut conn, &lock_key(&name)).await;
    assert!(
        claimed > 0 && claimed <= 500,
        "no claim for A: pttl {claimed}"
    );
    let (b_in, g) = timeout(HOLDER_LEASE * 2, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release granted to a dead client");
    g.unlock().await.unwrap();
    assert!(
        delay >= Duration::from_millis(400),
        "B in before A's claim lapsed: {delay:?}"
    );
    assert!(
        delay < Duration::from_secs(2),
        "B in {delay:?} after the release granted to a client that died on receipt, not \
         ~500 ms (the claim lease): the holder had {holder_left} ms left when released"
    );
}

/// Case (c'): the grantee's command connection is killed (and reconnects are
/// refused) so its confirmation, release and pass-on cannot reach Redis:
/// the next waiter takes over within the claim lease plus slack. The
/// grantee's `lock()` returns no guard on the claim: its attempt, which
/// would confirm the grant, fails (should a guard come back, its `lost()`
/// must fire no later than the next waiter gets the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grantee_cut_off_from_redis_stalls_the_queue_for_the_claim_at_most() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-cut-off");
    let mut admin = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let before = client_ids(&client_list(&mut admin).await);
    let a = client(&url).await;
    // A's connections (the helpers below open short-lived ones)
    let a_ids = new_connections(&mut admin, &before).await;
    let guard = h
        .fair_mutex(&name)
        .with_lease(HOLDER_LEASE)
        .lock()
        .await
        .unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let a_task = tokio::spawn(async move {
        let g = am.lock().await?;
        let got = Instant::now();
        timeout(Duration::from_secs(5), g.lost())
            .await
            .expect("the guard of a grant that cannot be confirmed was never lost");
        Ok::<_, Error>((got, Instant::now(), g.is_lost()))
    });
    let b_task = queue_b_behind_a(&admin, &url, &name, &b).await;

    let list = client_list(&mut admin).await;
    let a_command: Vec<u64> = list
        .iter()
        .filter(|(id, line)| a_ids.contains(id) && subscriptions(line) == 0)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(a_command.len(), 1, "A's command connection: {list:#?}");
    // Room for the connections that stay (admin, H, B, A's pub/sub), none
    // for A's reconnect: the helpers' short-lived connections are not counted.
    let staying = list
        .iter()
        .filter(|(id, _)| before.contains(id) || a_ids.contains(id))
        .count();
    config_set(&mut admin, "maxclients", staying - 1).await;
    kill_client(&mut admin, a_command[0]).await;

    let holder_left = pttl(&mut admin, &lock_key(&name)).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap(); // granted to A, whose pub/sub still listens
    let b_result = timeout(HOLDER_LEASE * 2, b_task).await;
    config_set(&mut admin, "maxclients", 10_000).await;
    let a_result = timeout(PROMPT, a_task)
        .await
        .expect("A's lock() hung")
        .unwrap();
    let (b_in, g) = b_result.expect("B was never served").unwrap();
    let g = g.unwrap();
    match a_result {
        // Its grant message came too late to use, and the attempt failed.
        Err(Error::Redis(_)) => {}
        Ok((got, lost, is_lost)) => {
            eprintln!(
                "A returned {:?} after the release, lost {:?} after it; B in {:?} after it",
                got - released_at,
                lost - released_at,
                b_in - released_at
            );
            assert!(is_lost, "lost() resolved but is_lost() is false");
            assert!(
                lost <= b_in,
                "A's guard was lost {:?} after B got in: two holders",
                lost - b_in
            );
        }
        Err(e) => panic!("A: {e:?}"),
    }
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release granted to a client cut off from Redis");
    g.unlock().await.unwrap();
    assert!(
        delay < Duration::from_secs(2),
        "B in {delay:?} after the release granted to a client cut off from Redis, not ~500 ms \
         (the claim lease): the holder had {holder_left} ms left when released"
    );
}

/// A head waiter that times out or is cancelled while the holder still holds
/// leaves the queue at once: the next waiter is granted the lock as soon as
/// the holder releases. Also with the release racing the head's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_giving_up_does_not_delay_the_next() {
    let url = redis_url();
    let name = unique("fair-head-gives-up");
    let mut conn = raw(&url).await;
    let (h, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let mut delays = Vec::new();
    // Release offsets from the head's deadline (ms): long after, just
    // after, at, and just before it.
    for (round, offset) in [200i64, 5, 0, -5, -100].into_iter().enumerate() {
        let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
        let am = a.fair_mutex(&name).with_lease(LONG);
        let a_task = tokio::spawn(async move {
            let r = am.lock_timeout(Duration::from_millis(600)).await;
            let gave_up = Instant::now();
            if let Ok(g) = r {
                g.unlock().await.unwrap(); // the release came first
                return (gave_up, true);
            }
            (gave_up, false)
        });
        let a_deadline = Instant::now() + Duration::from_millis(600);
        wait_queued(&conn, &name, 1).await;
        let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
        wait_parked(&conn, &url, &name, 2).await;
        let release_at = if offset >= 0 {
            a_deadline + Duration::from_millis(offset as u64)
        } else {
            a_deadline - Duration::from_millis(offset.unsigned_abs())
        };
        tokio::time::sleep_until(release_at).await;
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let (a_done, a_got_it) = timeout(PROMPT, a_task).await.unwrap().unwrap();
        let (b_in, g) = timeout(PROMPT, b_task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: B never served"))
            .unwrap();
        let g = g.unwrap();
        let delay = b_in.saturating_duration_since(released_at.max(a_done));
        eprintln!(
            "release at deadline{offset:+} ms: A {}, B in {delay:?} after the release / A's exit",
            if a_got_it { "got it first" } else { "gave up" }
        );
        assert!(
            delay < Duration::from_millis(500),
            "round {round}: B in {delay:?} after the head gave up"
        );
        delays.push(delay);
        g.unlock().await.unwrap();
        assert_clean(&mut conn, &name).await;
    }

    // Cancelled (task aborted) head.
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let a_task = spawn_lock(a.fair_mutex(&name).with_lease(LONG));
    wait_queued(&conn, &name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 2).await;
    a_task.abort();
    assert!(a_task.await.unwrap_err().is_cancelled());
    let queue_left = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        let name = name.clone();
        async move { fair_queue(&mut conn, &name).await.len() == 1 }
    })
    .await;
    assert!(queue_left, "the cancelled head stayed queued");
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B never served")
        .unwrap();
    let delay = b_in - released_at;
    eprintln!("after a cancelled head: B in {delay:?} after the release");
    assert!(delay < Duration::from_millis(500), "B in {delay:?}");
    delays.push(delay);
    g.unwrap().unlock().await.unwrap();
    assert_clean(&mut conn, &name).await;
    eprintln!("delays of the next waiter: {delays:?}");
}

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
                        .expect("lock");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    owners.lock().unwrap().push(task_id);
                    non_atomic_increment(&mut conn, &counter, Duration::ZERO).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.expect("unlock");
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

/// A grant message that reaches a client after its waiter already confirmed
/// the grant (the waiter was woken by something else first, e.g. the wake-up
/// of every waiter after a pub/sub reconnect, and its attempt found the
/// grant) must not cost the new holder its lock. Here the late message is
/// injected: the same grant payload published again once the waiter holds.
/// The kill storm of `exclusion_holds_while_a_clients_connections_are_killed`
/// produces it for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_message_does_not_release_the_new_holder() {
    let url = redis_url();
    let name = unique("fair-late-grant");
    let mut conn = raw(&url).await;
    let (h, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let a_task = spawn_lock(a.fair_mutex(&name).with_lease(LONG));
    wait_queued(&conn, &name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 2).await;
    // A's member "<client id>:<waiter id>:<token>": the grant to A is
    // published on P:{N}:wake:<client id> with payload "<waiter id>:<token>".
    let queue = fair_queue(&mut conn, &name).await;
    let (a_client, grant) = queue[0].split_once(':').expect("member format");

    guard.unlock().await.unwrap();
    let (_, g) = timeout(PROMPT, a_task)
        .await
        .expect("A not served")
        .unwrap();
    let g = g.unwrap();
    assert!(
        grant.ends_with(g.token()),
        "A's member {} has another token",
        queue[0]
    );
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg(wake_channel(&name, a_client))
        .arg(grant)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(receivers, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holder = get(&mut conn, &lock_key(&name)).await;
    let b_got_in = b_task.is_finished();
    let a_token = g.token().to_owned();
    let _ = g.unlock().await;
    let _ = timeout(PROMPT, b_task).await;
    assert!(
        holder.as_deref() == Some(a_token.as_str()) && !b_got_in,
        "a late grant message for a waiter that already holds the lock released it: \
         holder now {holder:?} (A's token {a_token}), B got in beside A: {b_got_in}"
    );
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
