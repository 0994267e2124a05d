//! Sentinel failover with some of the client's sentinels frozen (SIGSTOP:
//! they accept connections and answer nothing). The sentinel that runs the
//! failover (`SENTINEL FAILOVER`, the old primary left up and answering as
//! a primary) announces it; the client must move to the new primary as
//! soon as that sentinel names it, not once the frozen ones time out
//! (redis-rs gives up connecting to one after 1 s: a client that waits for
//! them grants locks on the old primary for a second or more after each
//! failover). Each test on a real topology of its own ([`Topology`]).
//!
//! The measured numbers are printed to stderr: `cargo test --test
//! sentinel_frozen -- --nocapture`.

use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::sentinel::{
    MASTER, Topology, failover_followed_within, sentinel_client,
};
use redbell_integration_tests::{Proxy, node_url};

/// How long after the failing-over sentinel names the new primary the
/// client's locks may still land on the old one: they move within one
/// lock (100 ms apart) with no sentinel frozen; waiting for a frozen one
/// takes a second or more.
const MOVE_WITHIN: Duration = Duration::from_millis(600);

/// Freezes the sentinels `frozen`, fails over through sentinel 0, and
/// checks the client's locks land on the new primary within
/// [`MOVE_WITHIN`] of sentinel 0 naming it.
async fn failover_with_frozen_sentinels(frozen: &[usize], what: &str) {
    let topo = Topology::start().await;
    let client = sentinel_client(&topo).await;
    let _frozen: Vec<_> = frozen.iter().map(|&i| topo.freeze_sentinel(i)).collect();
    failover_followed_within(&topo, &client, MOVE_WITHIN, what).await;
}

/// One of three sentinels frozen: the two others answer, and the client
/// moves at once on the announcing sentinel's newer answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_frozen_sentinel_does_not_keep_the_client_on_the_old_primary() {
    failover_with_frozen_sentinels(&[2], "one sentinel of three frozen").await;
}

/// Two of three frozen: only the announcing sentinel answers, with a newer
/// configuration epoch, and the node it names answers `ROLE` as master:
/// that decides it, without waiting for the two silent ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_frozen_sentinels_do_not_keep_the_client_on_the_old_primary() {
    failover_with_frozen_sentinels(&[1, 2], "two sentinels of three frozen").await;
}

/// Of the client's three sentinels, one is black-holed (behind a proxy
/// that is partitioned: connections are accepted, nothing is forwarded
/// either way) and one is no sentinel (a Redis server, which answers
/// `SENTINEL` with an error): the third, failing over, decides alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_and_a_wrong_sentinel_do_not_keep_the_client_on_the_old_primary() {
    let topo = Topology::start().await;
    let proxy = Proxy::start(0, topo.sentinel_ports()[2])
        .await
        .expect("a proxy");
    let urls = [
        proxy.url(),
        node_url(topo.replica_port()),
        topo.sentinel_urls()[0].clone(),
    ];
    let client = Client::sentinel(&urls, MASTER)
        .await
        .expect("a sentinel client");
    proxy.partition().await;
    failover_followed_within(
        &topo,
        &client,
        MOVE_WITHIN,
        "one sentinel black-holed, one no sentinel",
    )
    .await;
}
