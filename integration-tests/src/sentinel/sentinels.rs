//! Failovers the tests wait for, and clients that find the primary through
//! the sentinels.

use std::time::Duration;

use redbell::Client;
use tokio::time::Instant;

use super::{MASTER, Topology};

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
        let done = self
            .wait_for_primary(self.replica_port(), Duration::from_secs(20))
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
        self.ask_failover(via)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
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
