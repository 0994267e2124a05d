//! Sentinels the client reaches over a slow link: each behind a proxy that
//! delivers every reply late ([`Proxy::lag_replies`]). A look at the
//! sentinels is bounded by the client's connect timeout, so a sentinel
//! that answers within it is heard, however slowly. Each test on a real
//! topology of its own ([`Topology`]).

use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::sentinel::{
    MASTER, Topology, master_port, on_old_primary_until_moved,
};
use redbell_integration_tests::{Proxy, eventually_every, unique};
use tokio::time::Instant;

/// How late each proxy delivers what a sentinel sends: more than redis-rs
/// waits for a reply by default (500 ms), well within the connect timeout.
const LAG: Duration = Duration::from_millis(700);

/// The client's connect timeout: a connection to a sentinel (one lag for
/// its handshake) and its answer (one more) fit in it twice over.
const CONNECT: Duration = Duration::from_secs(5);

/// Every sentinel 700 ms away: the client connects (it used to fail with
/// "timed out": its asks kept redis-rs's defaults, 1 s to connect and
/// 500 ms per reply, whatever the connect timeout), and it follows a
/// failover, its locks landing on the new primary within 5 s of the
/// sentinels naming it (a move takes about three lags: the announcement,
/// then a look).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_on_a_slow_link_are_heard_within_the_connect_timeout() {
    let topo = Topology::start().await;
    let mut proxies = Vec::new();
    for port in topo.sentinel_ports() {
        let proxy = Proxy::start(0, port).await.expect("a proxy");
        proxy.lag_replies(LAG);
        proxies.push(proxy);
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let client = Client::sentinel_builder(&urls, MASTER)
        .connect_timeout(CONNECT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("a client of sentinels {LAG:?} away: {e}"));
    let name = unique("sentinel-slow");
    let g = client.mutex(&name).lock().await.expect("lock before");
    g.unlock().await.expect("unlock before");

    topo.ask_failover(0).await.expect("SENTINEL FAILOVER");
    let (announcer, replica) = (topo.sentinel_ports()[0], topo.replica_port());
    let named = eventually_every(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async move { master_port(announcer).await == Some(replica) },
    )
    .await;
    assert!(named, "sentinel 0 did not name the replica within 20 s");
    let switched = Instant::now();
    let on_old = on_old_primary_until_moved(
        &client,
        &topo,
        &name,
        (switched, Duration::from_secs(5)),
        &format!("after sentinel 0 named the new primary, with the sentinels {LAG:?} away"),
    )
    .await;
    eprintln!(
        "sentinels {LAG:?} away: the client's locks were on the new primary {:?} after \
         sentinel 0 named it ({on_old} granted on the old one first)",
        switched.elapsed()
    );
}
