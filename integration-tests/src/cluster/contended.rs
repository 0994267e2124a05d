//! A contended lock on one shard, the scene of every test that changes who
//! serves what under it: a holder and four parked waiters, then checks that
//! the hold moved with the change and the waiters were served in time.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use redbell::{Client, MutexGuard};
use tokio::task::JoinHandle;
use tokio::time::sleep;

use crate::{WaiterReport, lock_key};

use super::{Cluster, get, holder_and_waiters, queue_waiters, renewed_on};

/// Lock `name` on the primary `home`: held by `holder` (30 s lease, renewed
/// every second), with four waiters parked behind it, two on each of `wa`
/// and `wb`.
#[derive(Debug)]
pub struct Contended {
    /// The lock's name, unique to the test, its slot on `home`.
    pub name: String,
    /// The holder's client.
    pub holder: Client,
    /// The first waiting client.
    pub wa: Client,
    /// The second waiting client.
    pub wb: Client,
    /// The holder's guard.
    pub guard: MutexGuard,
    /// How many waiters hold the lock now (at most one).
    pub inside: Arc<AtomicUsize>,
    /// The waiters' tasks.
    pub waiters: Vec<JoinHandle<WaiterReport>>,
}

impl Contended {
    /// Takes a lock named after `what` on `home` and parks the four waiters
    /// behind it (`when` names the step in a failure), then gives them
    /// 300 ms to settle.
    ///
    /// # Panics
    ///
    /// When the lock cannot be taken or the waiters do not queue.
    pub async fn start(cluster: &Cluster, home: u16, what: &str, when: &str) -> Contended {
        let name = cluster.name_on(home, what).await;
        let (holder, wa, wb) = holder_and_waiters(cluster).await;
        let guard = holder.mutex(&name).lock().await.expect("the holder's lock");
        let inside = Arc::new(AtomicUsize::new(0));
        let waiters = queue_waiters(&[&wa, &wa, &wb, &wb], &name, home, &inside, when).await;
        sleep(Duration::from_millis(300)).await;
        Contended {
            name,
            holder,
            wa,
            wb,
            guard,
            inside,
            waiters,
        }
    }

    /// Checks that the hold is on `port` now (`moved` says so in a
    /// failure), no waiter got in meanwhile, and the watchdog renews it
    /// there (`renewed` says where) without reporting it lost.
    ///
    /// # Panics
    ///
    /// When any of that does not hold.
    pub async fn held_on(&self, port: u16, moved: &str, renewed: &str) {
        assert_eq!(
            get(port, &lock_key(&self.name)).await.as_deref(),
            Some(self.guard.token()),
            "{moved}"
        );
        assert!(
            self.waiters.iter().all(|w| !w.is_finished()),
            "a waiter finished while the holder still held the lock"
        );
        // The watchdog renews on the new node: shorten the key's TTL behind
        // its back and watch a renewal put it back.
        let ok = renewed_on(port, &lock_key(&self.name)).await;
        assert!(ok, "the lease was not renewed on {renewed}");
        assert!(
            !self.guard.is_lost(),
            "the holder's lease was reported lost"
        );
    }
}

/// The waiters were served in time after the release: the first within
/// 2 s, the last within 5 s (`first` and `last` from [`spread`](crate::spread)).
///
/// # Panics
///
/// When they were not.
pub fn served_in_time(first: Duration, last: Duration) {
    assert!(
        first < Duration::from_secs(2),
        "the first waiter got the lock {first:?} after the release"
    );
    assert!(
        last < Duration::from_secs(5),
        "the last waiter got the lock {last:?} after the release"
    );
}
