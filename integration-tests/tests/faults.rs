//! Faults injected for real on a private server: pub/sub connections killed
//! (lost release messages), command connections killed, the server restarted
//! while tasks wait.

use std::time::Duration;

use redbell::{Error, MutexGuard};
use redbell_integration_tests::{
    LONG, PrivateRedis, client, client_list, config_set, eventually, gone_within,
    kill_clients_of_type, lock_key, raw, subscribers, subscriptions, unique, wait_for_subscribers,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// `CLIENT KILL TYPE kind` on a fresh connection (which may be of that
/// type itself); how many connections were killed.
async fn kill_clients(url: &str, kind: &str) -> i64 {
    kill_clients_of_type(&mut raw(url).await, kind).await
}

/// Waiters on 2 clients, their pub/sub connections killed, then the release:
/// every waiter still acquires, one after another, long before the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_killed_pubsub_connections() {
    lost_release_test(false).await;
}

/// As above, but the server refuses new connections (maxclients) while the
/// pub/sub connections are down, so the release is certainly published to
/// nobody: the waiters learn of it only through the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_release_published_to_nobody() {
    lost_release_test(true).await;
}

async fn lost_release_test(refuse_reconnects: bool) {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("lost-messages");
    let mut admin = raw(&url).await;
    let holder = client(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();

    let mut tasks: Vec<JoinHandle<Duration>> = Vec::new();
    let started = Instant::now();
    for _ in 0..2 {
        let c = client(&url).await;
        for _ in 0..3 {
            let mutex = c.mutex(&name).with_lease(LONG);
            tasks.push(tokio::spawn(async move {
                let g = mutex.lock().await.expect("lock");
                tokio::time::sleep(Duration::from_millis(10)).await;
                g.unlock().await.expect("unlock");
                started.elapsed()
            }));
        }
    }
    wait_for_subscribers(&url, &name, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    if refuse_reconnects {
        let list = client_list(&mut admin).await;
        let pubsub = list.iter().filter(|(_, l)| l.contains("flags=P")).count();
        config_set(&mut admin, "maxclients", list.len() - pubsub).await;
    }
    let killed = kill_clients_of_type(&mut admin, "pubsub").await;
    assert!(killed >= 2, "killed {killed} pub/sub connections");
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    if refuse_reconnects {
        assert_eq!(subscribers(&mut admin, &name).await, 0);
        tokio::time::sleep(Duration::from_millis(300)).await;
        config_set(&mut admin, "maxclients", 10_000).await;
    }

    for t in tasks {
        timeout(Duration::from_secs(10), t)
            .await
            .expect("a waiter missed the release and is sleeping out the 30 s lease")
            .unwrap();
    }
    let took = released_at.elapsed();
    assert!(took < Duration::from_secs(5), "6 hand-offs took {took:?}");
}

/// Pub/sub connections killed repeatedly during a stream of hand-offs: no
/// waiter is stranded for a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoffs_continue_through_repeated_pubsub_kills() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("kill-storm");
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = client(&url).await;
        for _ in 0..4 {
            let mutex = c.mutex(&name).with_lease(LONG);
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = mutex.lock().await.expect("lock");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.unlock().await.expect("unlock");
                }
            }));
        }
    }
    let all = futures_util::future::join_all(tasks);
    tokio::pin!(all);
    let deadline = Instant::now() + Duration::from_secs(20);
    let results = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = tokio::time::sleep(Duration::from_millis(37)) => {
                assert!(Instant::now() < deadline, "80 hand-offs took over 20 s: a waiter is stranded");
                kill_clients(&url, "pubsub").await;
            }
        }
    };
    for r in results {
        r.unwrap();
    }
}

/// The command connection killed while a guard is held: unlock either works
/// or reports a Redis error (the background retry then releases), and the
/// client keeps working afterwards.
#[tokio::test]
async fn command_connection_killed_while_holding() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("kill-normal");
    let c = client(&url).await;
    let guard = c.mutex(&name).with_lease(LONG).lock().await.unwrap();
    kill_clients(&url, "normal").await;
    match timeout(Duration::from_secs(10), guard.unlock())
        .await
        .expect("unlock hung")
    {
        Ok(()) => {}
        Err(e @ Error::Redis(_)) => assert!(e.is_retryable(), "{e}"),
        Err(e) => panic!("unexpected error {e:?}"),
    }
    let conn = raw(&url).await;
    let released = gone_within(&conn, &lock_key(&name), Duration::from_secs(3)).await;
    assert!(
        released,
        "the lock was not released after the connection came back"
    );
    let g = timeout(Duration::from_secs(10), c.mutex(&name).lock())
        .await
        .expect("lock hung after a reconnect")
        .expect("lock after a reconnect");
    g.unlock().await.unwrap();
}

enum Outcome {
    Acquired,
    Failed(Error),
}

async fn settle(g: Result<MutexGuard, Error>) -> Outcome {
    match g {
        Ok(g) => {
            // The lock may be ours on the new server; release it, whatever the answer.
            let _ = g.unlock().await;
            Outcome::Acquired
        }
        Err(e) => Outcome::Failed(e),
    }
}

/// Tasks wait (lock_timeout and plain lock) while the server is restarted
/// empty: each gets the lock or a clear error, none hangs past its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_tasks_wait() {
    let mut redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("restart");
    let holder = client(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();

    let mut timed: Vec<JoinHandle<Result<Outcome, tokio::time::error::Elapsed>>> = Vec::new();
    let mut plain: Vec<JoinHandle<Result<Outcome, tokio::time::error::Elapsed>>> = Vec::new();
    for _ in 0..2 {
        let c = client(&url).await;
        for _ in 0..3 {
            let mutex = c.mutex(&name).with_lease(LONG);
            timed.push(tokio::spawn(async move {
                timeout(Duration::from_secs(10), async {
                    settle(mutex.lock_timeout(Duration::from_secs(5)).await).await
                })
                .await
            }));
            let mutex = c.mutex(&name).with_lease(LONG);
            plain.push(tokio::spawn(async move {
                timeout(Duration::from_secs(10), async {
                    settle(mutex.lock().await).await
                })
                .await
            }));
        }
    }
    wait_for_subscribers(&url, &name, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    redis.stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart().await;

    let (mut acquired, mut errors) = (0, Vec::new());
    for (kind, t) in timed
        .into_iter()
        .map(|t| ("lock_timeout(5 s)", t))
        .chain(plain.into_iter().map(|t| ("lock()", t)))
    {
        match t.await.unwrap() {
            Err(_) => panic!("{kind} was still waiting 10 s after it started: it hangs"),
            Ok(Outcome::Acquired) => acquired += 1,
            Ok(Outcome::Failed(e)) => {
                assert!(
                    matches!(e, Error::Redis(_) | Error::Timeout),
                    "{kind} failed with an unexpected error: {e:?}"
                );
                errors.push(e.to_string());
            }
        }
    }
    eprintln!("after the restart: {acquired} acquired, errors: {errors:?}");
    drop(guard);
    // The client works again on the new server: its connection was broken,
    // so the first command may still report that; within a few seconds a
    // lock succeeds.
    let mutex = holder.mutex(&name).with_lease(LONG);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match timeout(
            Duration::from_secs(3),
            mutex.lock_timeout(Duration::from_secs(2)),
        )
        .await
        .expect("lock_timeout hung on the restarted server")
        {
            Ok(g) => {
                g.unlock().await.unwrap();
                break;
            }
            Err(e) => assert!(
                Instant::now() < deadline,
                "the client did not recover within 5 s of the restart: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The largest `sub=` count among the server's connections: how many
/// channels the busiest subscriber listens on.
async fn max_subscriptions(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    client_list(conn)
        .await
        .iter()
        .map(|(_, line)| subscriptions(line))
        .max()
        .unwrap_or(0)
}

/// A waiter that starts waiting on a new lock while its client is
/// resubscribing after a pub/sub disconnect must still be woken by the
/// release (its channel must really be subscribed), not sleep out the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_joining_during_a_resubscribe_is_not_stranded() {
    const BULK: usize = 1000; // channels to resubscribe: makes the SUBSCRIBE take a while
    const PROBES: usize = 150;
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let prefix = unique("resub");
    let (h, c) = (client(&url).await, client(&url).await);
    let mut admin = raw(&url).await;

    let mut held = Vec::new();
    for i in 0..BULK + PROBES {
        let g = h
            .mutex(&format!("{prefix}-{i}"))
            .with_lease(LONG)
            .try_lock()
            .await
            .unwrap();
        held.push(g.expect("a fresh lock"));
    }
    let probe_guards = held.split_off(BULK);
    let mut bulk = Vec::new();
    for i in 0..BULK {
        let mutex = c.mutex(&format!("{prefix}-{i}")).with_lease(LONG);
        bulk.push(tokio::spawn(async move {
            mutex.lock_timeout(Duration::from_secs(60)).await
        }));
    }
    let subscribed = eventually(Duration::from_secs(30), || {
        let mut admin = admin.clone();
        async move { max_subscriptions(&mut admin).await >= BULK }
    })
    .await;
    assert!(subscribed, "the bulk waiters never all subscribed");

    let killed = kill_clients_of_type(&mut admin, "pubsub").await;
    assert!(killed >= 1);
    // New waiters keep arriving while the client reconnects and resubscribes.
    let mut probes = Vec::new();
    for i in BULK..BULK + PROBES {
        let mutex = c.mutex(&format!("{prefix}-{i}")).with_lease(LONG);
        probes.push(tokio::spawn(async move {
            mutex.lock_timeout(Duration::from_secs(25)).await
        }));
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    let resubscribed = eventually(Duration::from_secs(3), || {
        let mut admin = admin.clone();
        async move { max_subscriptions(&mut admin).await >= BULK + PROBES }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let subs = max_subscriptions(&mut admin).await;

    let released_at = Instant::now();
    for g in probe_guards {
        g.unlock().await.unwrap();
    }
    let mut stranded = 0;
    for p in probes {
        match timeout(
            Duration::from_secs(5).saturating_sub(released_at.elapsed()),
            p,
        )
        .await
        {
            Ok(r) => drop(r.unwrap().expect("probe lock")),
            Err(_) => stranded += 1,
        }
    }
    for g in held {
        drop(g);
    }
    for b in bulk {
        b.abort();
    }
    assert!(
        stranded == 0 && resubscribed,
        "{stranded} of {PROBES} waiters that joined during the resubscribe were not woken by the \
         release within 5 s (lease 30 s); the client listens on {subs} of {} channels",
        BULK + PROBES
    );
}
