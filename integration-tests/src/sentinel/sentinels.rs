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

/// After a failover to the topology's replica: takes a lock on a fresh name
/// every 100 ms until one lands on the new primary, and says how many
/// landed on the old one first. Fails when they still land there
/// `limit` after `since` (`what` says after what).
///
/// # Panics
///
/// As said, and when a lock lands on neither server.
pub async fn on_old_primary_until_moved(
    client: &Client,
    topo: &Topology,
    name: &str,
    (since, limit): (Instant, Duration),
    what: &str,
) -> u32 {
    let (mut old, mut new) = (
        crate::raw(&topo.primary_url()).await,
        crate::raw(&topo.replica_url()).await,
    );
    let mut on_old = 0;
    loop {
        let probe = format!("{name}-{on_old}");
        let g = client
            .mutex(&probe)
            .try_lock()
            .await
            .expect("try_lock after the failover")
            .expect("a fresh name is free");
        let there = crate::get(&mut new, &crate::lock_key(&probe)).await;
        let stale = crate::get(&mut old, &crate::lock_key(&probe)).await;
        drop(g);
        if there.is_some() {
            return on_old;
        }
        assert!(stale.is_some(), "the lock is on neither server");
        on_old += 1;
        assert!(
            since.elapsed() < limit,
            "{on_old} locks granted on the old primary in the {limit:?} {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes a lock (so the client is on the primary), fails over through
/// sentinel 0 with the old primary left up, and checks that the client's
/// locks land on the new primary within `within` of sentinel 0 naming it
/// (`what` says what else is wrong, for the messages); prints how long
/// that took.
///
/// # Panics
///
/// When sentinel 0 does not name the replica within 20 s, or a lock is
/// granted on the old primary after `within`.
pub async fn failover_followed_within(
    topo: &Topology,
    client: &Client,
    within: Duration,
    what: &str,
) {
    let name = crate::unique("sentinel-follow");
    let warm = client.mutex(&name).lock().await.expect("lock before");
    warm.unlock().await.expect("unlock before");
    topo.ask_failover(0).await.expect("SENTINEL FAILOVER");
    let (announcer, replica) = (topo.sentinel_ports()[0], topo.replica_port());
    let named = crate::eventually_every(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async move { super::master_port(announcer).await == Some(replica) },
    )
    .await;
    assert!(named, "sentinel 0 did not name the replica within 20 s");
    let switched = Instant::now();
    let on_old = on_old_primary_until_moved(
        client,
        topo,
        &name,
        (switched, within),
        &format!("after sentinel 0 named the new primary, {what}"),
    )
    .await;
    eprintln!(
        "{what}: the client's locks were on the new primary {:?} after sentinel 0 \
         named it ({on_old} granted on the old one first)",
        switched.elapsed()
    );
}

/// A sentinel of a [`Topology`] frozen with SIGSTOP: its sockets stay open
/// and accept connections, but it reads and answers nothing, and hears of
/// no failover. Continued (SIGCONT) on drop, so a failing test leaves none
/// frozen.
#[derive(Debug)]
pub struct FrozenSentinel {
    pid: u32,
}

impl Topology {
    /// Freezes sentinel `index` (0..3), by the script's pid file.
    ///
    /// # Panics
    ///
    /// When the pid file cannot be read or the signal cannot be sent.
    pub fn freeze_sentinel(&self, index: usize) -> FrozenSentinel {
        let file = self.dir().join(format!("sentinel-{index}.pid"));
        let pid: u32 = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("the pid in {}: {e}", file.display()));
        crate::signal(pid, "STOP");
        FrozenSentinel { pid }
    }
}

impl Drop for FrozenSentinel {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.pid.to_string()])
            .status();
    }
}
