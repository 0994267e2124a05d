//! redbell clients on a cluster, and waiters queued on a lock's shard.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell::Client;
use tokio::task::JoinHandle;

use crate::{POLL, WaiterReport, eventually_every, spawn_waiter, waiters_key};

use super::{Cluster, zcard};

/// A cluster client on the given node URLs.
///
/// # Panics
///
/// When it cannot connect.
pub async fn cluster_client(urls: &[String]) -> Client {
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster(&urls)
        .await
        .unwrap_or_else(|e| panic!("Client::cluster({urls:?}): {e}"))
}

/// A cluster client whose locks get `lease` by default, renewed every
/// `every`.
///
/// # Panics
///
/// When it cannot connect.
pub async fn cluster_client_with(urls: &[String], lease: Duration, every: Duration) -> Client {
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster_builder(&urls)
        .default_lease(lease)
        .renew_every(every)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("Client::cluster_builder({urls:?}): {e}"))
}

/// Three clients on `cluster`: a holder whose locks get a 30 s lease,
/// renewed every second (so a release, not an expiry, lets the waiters in),
/// and two waiting clients with the defaults.
pub async fn holder_and_waiters(cluster: &Cluster) -> (Client, Client, Client) {
    let urls = cluster.urls();
    let holder = cluster_client_with(&urls, Duration::from_secs(30), Duration::from_secs(1)).await;
    (
        holder,
        cluster_client(&urls).await,
        cluster_client(&urls).await,
    )
}

/// Spawns a [`spawn_waiter`] for lock `name` on each of `clients`
/// (`waiter 0`, `waiter 1`, ...), counted in `inside`, and waits (up to
/// 10 s) until all of them parked, each client's one queued waiter in the
/// lock's waiter queue on node `port`.
///
/// # Panics
///
/// When they do not all queue; `what` names the step in the message.
pub async fn queue_waiters(
    clients: &[&Client],
    name: &str,
    port: u16,
    inside: &Arc<AtomicUsize>,
    what: &str,
) -> Vec<JoinHandle<WaiterReport>> {
    let waiters: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| spawn_waiter(format!("waiter {i}"), c.mutex(name), inside.clone()))
        .collect();
    // A client queues one waiter per lock at a time; its others park in
    // it: one member per distinct client, and each client's waiters parked.
    let mut distinct: Vec<(&Client, i64)> = Vec::new();
    for c in clients {
        match distinct.iter_mut().find(|(d, _)| std::ptr::eq(*d, *c)) {
            Some((_, count)) => *count += 1,
            None => distinct.push((c, 1)),
        }
    }
    let n = i64::try_from(distinct.len()).expect("a few clients");
    let key = waiters_key(name);
    let queued = eventually_every(Duration::from_secs(10), POLL, || async {
        zcard(port, &key).await >= n && distinct.iter().all(|(c, k)| c.stats().waiters >= *k)
    })
    .await;
    assert!(queued, "{what}: the {n} waiters never queued");
    waiters
}
