//! The counting semaphore across processes (the `sem_worker` binary): never
//! more than N holders among 8 processes, a SIGKILLed holder's permit back
//! at its lease expiry, and a killed waiter at the head behind a killed
//! holder holding up nobody.
//!
//! The measured figures are printed to stderr:
//! `cargo test --test semaphore_processes -- --nocapture`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{
    built_binary, client, holders_key, queue_key, raw, redis_url, unique, wait_for_members, zcard,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{Instant, sleep, timeout};

/// `sem_worker` processes: `loop` (many acquisitions, gauge-checked) or
/// `hold` (one permit held until killed).
fn sem_worker(url: &str, args: &[&str]) -> Child {
    Command::new(built_binary("sem_worker"))
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sem_worker")
}

/// A `sem_worker hold` process on the 1-permit semaphore `name` with a
/// renewed lease of `lease_ms`, once it holds the permit: the process and
/// the permit's token.
async fn holding_process(url: &str, name: &str, lease_ms: &str) -> (Child, String) {
    let mut holder = sem_worker(url, &["hold", name, "1", lease_ms]);
    let stdout = holder.stdout.take().unwrap();
    let mut lines = BufReader::new(tokio::process::ChildStdout::from_std(stdout).unwrap()).lines();
    let line = timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the holder took its permit")
        .unwrap()
        .unwrap();
    let token = line.strip_prefix("held ").expect("held <token>").to_owned();
    (holder, token)
}

/// How many ms after the lease expiry of the killed holder's permit `token`
/// (still in the holders set) the `waiter` got a permit (its fence is the
/// server's clock at its acquire); the permit is released.
async fn taken_after_expiry(
    conn: &redis::aio::MultiplexedConnection,
    name: &str,
    token: &str,
    waiter: tokio::task::JoinHandle<Result<redbell::Permit, Error>>,
) -> f64 {
    let mut conn = conn.clone();
    let expiry: f64 = redis::cmd("ZSCORE")
        .arg(holders_key(name))
        .arg(token)
        .query_async(&mut conn)
        .await
        .expect("the killed holder's permit is still there");
    let permit = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got the permit")
        .unwrap()
        .unwrap();
    let late_ms = (permit.fence() / 1000) as f64 - expiry;
    assert!(late_ms >= 0.0, "taken before the expiry: {late_ms} ms");
    permit.unlock().await.unwrap();
    late_ms
}

/// 8 processes x 40 acquisitions of a 3-permit semaphore: the INCR/DECR
/// gauge inside the section never exceeds 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_across_8_processes() {
    let url = redis_url();
    let name = unique("sem-procs");
    let started = Instant::now();
    let workers: Vec<Child> = (0..8)
        .map(|_| sem_worker(&url, &["loop", &name, "3", "40"]))
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .map(|w| w.wait_with_output().expect("sem_worker output"))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut max = 0;
    for out in &outputs {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "sem_worker: {} {text}", out.status);
        let field = |key: &str| -> i64 {
            text.split_whitespace()
                .find_map(|f| f.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {text:?}"))
        };
        assert_eq!(field("over="), 0, "more than 3 holders: {text}");
        assert_eq!(field("done="), 40);
        max = max.max(field("max="));
    }
    eprintln!(
        "8 processes x 40 acquisitions of 3 permits in {:?}; highest gauge {max}",
        started.elapsed()
    );
    assert!(max <= 3);
    let conn = raw(&url).await;
    assert_eq!(zcard(&mut conn.clone(), &holders_key(&name)).await, 0);
    assert_eq!(zcard(&mut conn.clone(), &queue_key(&name)).await, 0);
}

/// A SIGKILLed holder's permit comes back at its lease expiry, and the
/// parked waiter takes it within 50 ms of that, measured on the server
/// (the waiter's fence is the server's clock at its acquire).
#[tokio::test]
async fn a_killed_holders_permit_returns_at_its_lease_expiry() {
    let url = redis_url();
    let name = unique("sem-killed");
    let (mut holder, token) = holding_process(&url, &name, "1500").await;

    let c = client(&url).await;
    let sem = c.semaphore(&name, 1);
    let waiter = tokio::spawn(async move { sem.acquire().await });
    let conn = raw(&url).await;
    wait_for_members(&conn, &queue_key(&name), 1, Duration::from_millis(10)).await;
    sleep(Duration::from_millis(700)).await; // a renewal or two
    holder.kill().unwrap();
    let _ = holder.wait();
    // The holder's last renewal set its expiry; nothing moves it now.
    let late_ms = taken_after_expiry(&conn, &name, &token, waiter).await;
    eprintln!("the waiter took the killed holder's permit {late_ms} ms after its lease expiry");
    assert!(late_ms < 50.0, "taken {late_ms} ms after the expiry");
}

/// A waiter SIGKILLed while at the head of the queue does not hold up the
/// live waiter behind it once a SIGKILLed holder's permit expires: the
/// first attempt after the expiry reclaims the permit and wakes the head,
/// finds it gone and wakes the next. (The holders set once expired with its
/// last lease, so that attempt found no holder to reclaim and woke nobody:
/// the permit stayed owed to the dead head until its queue entry ran out,
/// about 2 s later. After a failover the same befell queue entries whose
/// waits had ended on the old primary.)
#[tokio::test]
async fn a_killed_head_waiter_does_not_hold_up_a_killed_holders_permit() {
    let url = redis_url();
    let name = unique("sem-dead-head");
    let conn = raw(&url).await;
    let (mut holder, token) = holding_process(&url, &name, "600").await;
    // The second `hold` process queues behind it: the head of the queue.
    let mut head = sem_worker(&url, &["hold", &name, "1", "600"]);
    wait_for_members(&conn, &queue_key(&name), 1, Duration::from_millis(5)).await;
    let c = client(&url).await;
    let sem = c.semaphore(&name, 1);
    let waiter = tokio::spawn(async move { sem.acquire().await });
    wait_for_members(&conn, &queue_key(&name), 2, Duration::from_millis(5)).await;

    head.kill().unwrap();
    let _ = head.wait();
    holder.kill().unwrap();
    let _ = holder.wait();
    let late_ms = taken_after_expiry(&conn, &name, &token, waiter).await;
    eprintln!("behind a killed head: the permit was taken {late_ms} ms after its lease expiry");
    assert!(late_ms < 250.0, "taken {late_ms} ms after the expiry");
}
