//! `deadline()` on the guards and on `Leadership`: the local instant until
//! which the lease is known held, the one `lost()` fires at. It counts from
//! when the acquire (or the confirmed extend) was *sent*, less the drift
//! margin, so it never trails the key's expiry on the server; `AnyGuard`
//! tells the same one. `redbell run` and `elect` schedule their command's
//! stop by it.

use std::time::Duration;

use redbell::AnyGuard;
use redbell_integration_tests::{client, lock_key, pttl, raw, redis_url, renewing_client, unique};
use tokio::time::{Instant, timeout};

/// The margin the library keeps off a lease for clock drift: 1% + 2 ms.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Asserts `deadline` is `lease` − drift after an instant in
/// `[before, after]`: the send of the request that set it.
fn counts_from_the_send(deadline: Instant, before: Instant, after: Instant, lease: Duration) {
    let net = lease - drift(lease);
    assert!(
        deadline >= before + net && deadline <= after + net,
        "the deadline is {:?} after the call began, which took {:?} (expected {net:?} after \
         the send)",
        deadline - before,
        after - before
    );
}

/// The deadline counts from the acquire's send and from a confirmed
/// extend's; the key on the server outlives it; `lost()` fires at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_is_the_lease_from_the_send_less_the_drift() {
    let url = redis_url();
    let name = unique("deadline");
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let lease = Duration::from_secs(2);
    let mutex = c.mutex(&name).with_lease(lease);

    let before = Instant::now();
    let guard = mutex.lock().await.unwrap();
    counts_from_the_send(guard.deadline(), before, Instant::now(), lease);

    // The key outlives the deadline: its expiry, read now, is later.
    let asked = Instant::now();
    let left = pttl(&mut conn, &lock_key(&name)).await;
    let expiry = asked + Duration::from_millis(u64::try_from(left).expect("a pttl"));
    assert!(
        guard.deadline() <= expiry + Duration::from_millis(1),
        "the deadline trails the key's expiry by {:?}",
        guard.deadline() - expiry
    );

    // A confirmed extend moves it, from the extend's send.
    let longer = Duration::from_secs(5);
    let before = Instant::now();
    guard.extend(longer).await.unwrap();
    counts_from_the_send(guard.deadline(), before, Instant::now(), longer);

    // A shorter one moves it in; lost() fires at it, not before.
    let shorter = Duration::from_secs(1);
    let before = Instant::now();
    guard.extend(shorter).await.unwrap();
    let deadline = guard.deadline();
    counts_from_the_send(deadline, before, Instant::now(), shorter);
    timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() fires at the deadline");
    assert!(
        Instant::now() >= deadline,
        "lost() fired before the deadline"
    );
    assert!(guard.is_lost());
}

/// An `AnyGuard` is the same acquisition: same token, fence and deadline,
/// and it releases the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_guard_is_the_same_hold() {
    let url = redis_url();
    let name = unique("deadline-any");
    let c = client(&url).await;
    let lease = Duration::from_secs(10);
    let read = c.rwlock(&name).with_lease(lease).read().await.unwrap();
    let (token, fence, deadline) = (read.token().to_owned(), read.fence(), read.deadline());
    let any = AnyGuard::from(read);
    assert_eq!(
        (any.token(), any.fence(), any.deadline(), any.name()),
        (token.as_str(), fence, deadline, name.as_str())
    );
    any.unlock().await.unwrap();
    let write = c.rwlock(&name).with_lease(lease).try_write().await.unwrap();
    assert!(write.is_some(), "the read hold was released");
}

/// A leadership's deadline is its lock guard's: from the campaign's send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_tells_its_deadline() {
    let url = redis_url();
    let name = unique("deadline-leader");
    let lease = Duration::from_secs(3);
    let c = renewing_client(&url, lease, lease / 3).await;
    let before = Instant::now();
    let leadership = c.election(&name).campaign("me").await.unwrap();
    counts_from_the_send(leadership.deadline(), before, Instant::now(), lease);
    leadership.resign().await.unwrap();
}
