//! A reconnect storm on a private server: the pub/sub connection of every
//! client killed at once (`CLIENT KILL TYPE pubsub`), as a failover or a
//! network blip drops a whole fleet. The clients must not all reconnect in
//! the same instant (their first reconnect is jittered), and every waiter
//! is served afterwards.

use std::time::Duration;

use redbell_integration_tests::{
    LONG, PrivateRedis, client, connections_received, kill_clients_of_type, raw, unique,
    wait_for_subscribers,
};
use tokio::time::{Instant, timeout};

/// Clients in the storm.
const CLIENTS: usize = 20;

/// Kills every pub/sub connection, then polls the server's accepted
/// connections until all `CLIENTS` came back: the time from the first
/// reconnect to the last, as the polls saw it.
async fn storm(url: &str) -> Duration {
    let mut admin = raw(url).await;
    let mut poll = raw(url).await;
    let before = connections_received(&mut poll).await;
    let killed = kill_clients_of_type(&mut admin, "pubsub").await;
    assert_eq!(killed, CLIENTS as i64, "pub/sub connections killed");
    let t0 = Instant::now();
    let mut arrivals = Vec::new();
    let mut seen = before;
    while arrivals.len() < CLIENTS && t0.elapsed() < Duration::from_secs(30) {
        let n = connections_received(&mut poll).await;
        arrivals.extend((seen..n).map(|_| t0.elapsed()));
        seen = n;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(arrivals.len(), CLIENTS, "reconnects within 30 s");
    arrivals[CLIENTS - 1] - arrivals[0]
}

/// 20 clients, each with a waiter parked on one held lock; their pub/sub
/// connections killed at once. The 20 reconnects spread over more than
/// 10 ms (lockstep, before the first reconnect was jittered: all 20 within
/// one 5 ms poll); a loaded machine can lump arrivals into one late poll,
/// so up to three storms are tried. Then the release: every waiter
/// acquires, none sleeps out the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubsub_storm_reconnects_spread_out_and_serves_every_waiter() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("storm");
    let holder = client(&url).await;
    let guard = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let mut clients = Vec::new();
    let mut waiters = Vec::new();
    for _ in 0..CLIENTS {
        let c = client(&url).await;
        let mutex = c.mutex(&name).with_lease(LONG);
        waiters.push(tokio::spawn(async move {
            let g = mutex.lock().await.expect("lock");
            g.unlock().await.expect("unlock");
        }));
        clients.push(c);
    }
    wait_for_subscribers(&url, &name, CLIENTS as i64).await;

    let mut spans = Vec::new();
    for _ in 0..3 {
        let span = storm(&url).await;
        spans.push(span);
        wait_for_subscribers(&url, &name, CLIENTS as i64).await;
        if span > Duration::from_millis(10) {
            break;
        }
    }
    assert!(
        spans.iter().any(|s| *s > Duration::from_millis(10)),
        "{CLIENTS} clients reconnected in lockstep: first to last reconnect {spans:?}"
    );

    guard.unlock().await.unwrap();
    for w in waiters {
        timeout(Duration::from_secs(20), w)
            .await
            .expect("a waiter was stranded by the storm")
            .unwrap();
    }
}

/// The other storm: every command connection killed (`CLIENT KILL TYPE
/// normal`) while tasks wait. A parked waiter's next attempt goes out on
/// its dead connection; the acquire script is safe to send again (one that
/// ran and finds its own token reports the acquisition), so `lock()` sends
/// it once more on the fresh connection instead of failing. Before, every
/// such `lock()` returned `Error::Redis` (the storm bench saw 149 of 600
/// tasks fail so).
#[tokio::test]
async fn parked_waiters_ride_through_killed_command_connections() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut admin = raw(&url).await;
    let name = unique("storm-normal");
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&url).await);
    }
    // Held by someone else for a second: each waiter parks on the lease,
    // then attempts on the connection killed meanwhile.
    let lock = redbell_integration_tests::lock_key(&name);
    redbell_integration_tests::set_px(&mut admin, &lock, "mforeign", 1_000).await;
    let waiters: Vec<_> = clients
        .iter()
        .map(|c| {
            let m = c.mutex(&name);
            tokio::spawn(async move {
                let g = m.lock().await?;
                g.unlock().await
            })
        })
        .collect();
    wait_for_subscribers(&url, &name, 4).await;
    // SKIPME (the default): the admin connection survives.
    let killed = kill_clients_of_type(&mut admin, "normal").await;
    assert!(killed >= 4, "command connections killed: {killed}");
    for (i, w) in waiters.into_iter().enumerate() {
        let got = timeout(LONG, w)
            .await
            .expect("a waiter was stranded")
            .unwrap();
        assert!(
            got.is_ok(),
            "waiter {i}: lock() failed on a killed command connection: {got:?}"
        );
    }
}
