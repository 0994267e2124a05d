//! What the lease tests share (`lease.rs`, `lease_renewal.rs`): a lease
//! checked to be kept alive while nothing else touches it.

use std::time::Duration;

use redbell::MutexGuard;
use tokio::time::{Instant, sleep};

// ---------------------------------------------------------------- helpers

/// Holds `guard` (of lock `name`) for `hold`, checking every 100 ms that
/// another client cannot take it; panics if its lease is lost meanwhile.
pub async fn keeps(
    guard: &MutexGuard,
    other: &redbell::Client,
    name: &str,
    hold: Duration,
    what: &str,
) {
    let started = Instant::now();
    let work = async {
        while started.elapsed() < hold {
            let stolen = other.mutex(name).try_lock().await.unwrap();
            assert!(
                stolen.is_none(),
                "{what}: another client took the lock {:?} in",
                started.elapsed()
            );
            sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        () = work => {}
        () = guard.lost() => panic!("{what}: lost {:?} in", started.elapsed()),
    }
}
