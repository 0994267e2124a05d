//! What the sentinels say: the master they name, whether they agree it is
//! healthy, a failover; and clients that find the primary through them.

use std::time::Duration;

use redbell::Client;
use tokio::time::Instant;

use crate::{POLL, eventually_every, query, replication_field};

use super::{MASTER, Topology};

/// The port of the master a sentinel names (`SENTINEL
/// get-master-addr-by-name`), `None` when it cannot tell.
pub async fn master_port(sentinel: u16) -> Option<u16> {
    let addr: Option<Vec<String>> = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER),
    )
    .await?;
    let addr = addr?;
    (addr.first().map(String::as_str) == Some("127.0.0.1")).then_some(())?;
    addr.get(1)?.parse().ok()
}

/// Whether a sentinel sees a healthy master on `primary`: that address,
/// flags exactly `master` (no `s_down`/`o_down`, no failover in progress),
/// the two other sentinels and one replica.
pub async fn sentinel_agrees(sentinel: u16, primary: u16) -> bool {
    if master_port(sentinel).await != Some(primary) {
        return false;
    }
    let Some(fields): Option<Vec<String>> =
        query(sentinel, redis::cmd("SENTINEL").arg("master").arg(MASTER)).await
    else {
        return false;
    };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv.get(1))
            .map(String::as_str)
    };
    field("flags") == Some("master")
        && field("num-other-sentinels") == Some("2")
        && field("num-slaves") == Some("1")
}

/// The sentinel URLs as `Client::sentinel` takes them.
pub fn as_strs(urls: &[String]) -> Vec<&str> {
    urls.iter().map(String::as_str).collect()
}

/// A redbell client that finds the primary through the topology's sentinels.
///
/// # Panics
///
/// When it cannot connect.
pub async fn sentinel_client(topo: &Topology) -> Client {
    let urls = topo.sentinel_urls();
    Client::sentinel(&urls, MASTER)
        .await
        .unwrap_or_else(|e| panic!("Client::sentinel({urls:?}): {e}"))
}

impl Topology {
    /// Waits (up to 20 s) until the sentinels name the replica as the master
    /// and the replica reports the master role; how long that took.
    ///
    /// # Panics
    ///
    /// When that does not happen within 20 s.
    pub async fn wait_for_failover(&self) -> Duration {
        let started = Instant::now();
        let (sentinels, replica) = (self.sentinel_ports(), self.replica_port());
        let done = eventually_every(Duration::from_secs(20), POLL, || async move {
            for s in sentinels {
                if master_port(s).await != Some(replica) {
                    return false;
                }
            }
            replication_field(replica, "role").await.as_deref() == Some("master")
        })
        .await;
        assert!(done, "no failover to the replica within 20 s of the kill");
        started.elapsed()
    }

    /// Asks sentinel `via` (an index into the sentinels) for `SENTINEL
    /// FAILOVER`, then [waits](Topology::wait_for_failover) until they all
    /// name the replica; how long the wait took.
    ///
    /// # Panics
    ///
    /// When the sentinel refuses, or the failover does not happen within
    /// 20 s.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future once the sentinel has answered stops only the
    /// wait: the failover goes on.
    pub async fn sentinel_failover(&self, via: usize) -> Duration {
        let asked: String = query(
            self.sentinel_ports()[via],
            redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER),
        )
        .await
        .expect("SENTINEL FAILOVER: no answer");
        assert_eq!(asked, "OK", "SENTINEL FAILOVER");
        self.wait_for_failover().await
    }
}

/// Locks and unlocks a fresh lock through `client` until it works (on the
/// new primary, after a failover), for at most `within`; how many
/// retryable errors came first.
///
/// # Panics
///
/// When it does not work within `within`, or fails with a permanent error.
pub async fn works_again(client: &Client, within: Duration) -> u32 {
    let name = crate::unique("works-again");
    let mut attempt = 0;
    let ((), failed) = crate::recovering("lock and unlock on the new primary", within, || {
        attempt += 1;
        let mutex = client.mutex(&format!("{name}-{attempt}"));
        async move {
            mutex
                .lock_timeout(Duration::from_secs(3))
                .await?
                .unlock()
                .await
        }
    })
    .await;
    failed
}
