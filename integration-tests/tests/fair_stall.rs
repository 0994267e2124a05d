//! A guard holds its full lease from the moment `lock()` returns, however
//! it was handed over: a holder whose runtime stalls right after `lock()`
//! (CPU-bound work on its thread, a page-in, a debugger) keeps the lock for
//! its lease, and nobody else gets it meanwhile.
//!
//! Each test: holder A; waiter B on a current-thread runtime of its own
//! (a [`Side`], standing for another process: its client's connections,
//! hub and renewal task live there); waiter C, a third client, parked behind
//! B. A releases; as soon as B's `lock()` returns, B blocks its runtime's
//! only thread (`std::thread::sleep`), so none of its background tasks run
//! either. Meanwhile the lock key must hold B's token with more than a
//! claim left, C must not get the lock, and B's `unlock()` afterwards must
//! find the lock still its own. The plain Mutex's woken waiter takes the
//! lock with its own attempt, so it always passed; the fair one is the
//! case of issue 29, item 5.

use std::time::Duration;

use redbell::{Client, MutexGuard};
use redbell_integration_tests::{
    PROMPT, Side, client, fifo_key, get, lock_key, pttl, raw, redis_url, spawn_timed, unique,
    wait_for_members, wait_for_subscribers, waiters_key,
};
use tokio::time::{Instant, timeout};

/// A fair grant's claim (`CLAIM_MS` in the library): a lease no longer
/// than this on B's key right after its `lock()` is not B's full lease.
const CLAIM: i64 = 500;

/// Which mutex, and how its guards lease the lock.
#[derive(Clone, Copy, Debug)]
struct Case {
    fair: bool,
    /// `None`: the client's lease (30 s), renewed while the guard lives.
    lease: Option<Duration>,
    /// How long B's runtime stalls right after its `lock()` returned.
    stall: Duration,
}

/// Locks `name` as `case` says.
async fn lock(client: &Client, name: &str, case: Case) -> MutexGuard {
    let result = match (case.fair, case.lease) {
        (true, Some(lease)) => client.fair_mutex(name).with_lease(lease).lock().await,
        (true, None) => client.fair_mutex(name).lock().await,
        (false, Some(lease)) => client.mutex(name).with_lease(lease).lock().await,
        (false, None) => client.mutex(name).lock().await,
    };
    result.expect("lock")
}

/// The scenario of the module docs; panics if C got the lock during B's
/// stall, or B's key held less than its lease, or B's unlock found the lock
/// gone or another's.
async fn holder_stalling_after_lock_keeps_the_lock(case: Case) {
    let url = redis_url();
    let name = unique(if case.fair {
        "fair-stall"
    } else {
        "plain-stall"
    });
    let queue = if case.fair {
        fifo_key(&name)
    } else {
        waiters_key(&name)
    };
    let mut conn = raw(&url).await;
    let a = client(&url).await;
    let a_guard = lock(&a, &name, case).await;

    let side = Side::start();
    let b = side.client(&url).await;
    let (got_tx, got_rx) = tokio::sync::oneshot::channel();
    let b_name = name.clone();
    let b_task = side.spawn(async move {
        let guard = lock(&b, &b_name, case).await;
        let got = Instant::now();
        let _ = got_tx.send(guard.token().to_owned());
        // The stall: this runtime's only thread blocks, so B's hub and
        // renewal task stop too (its sockets stay open).
        std::thread::sleep(case.stall);
        let resumed = Instant::now();
        (got, resumed, guard.unlock().await)
    });
    wait_for_members(&conn, &queue, 1, Duration::from_millis(5)).await;
    wait_for_subscribers(&url, &name, 1).await;
    // The plain queue is ordered by each entry's expiry (the holder's
    // expiry at its attempt, plus a grace): A's later expiry puts C behind
    // B there too.
    tokio::time::sleep(Duration::from_millis(5)).await;
    a_guard
        .extend(case.lease.unwrap_or(Duration::from_secs(30)) + Duration::from_secs(1))
        .await
        .expect("A's extend");
    let c = client(&url).await;
    let c_name = name.clone();
    let c_task = spawn_timed(async move { lock(&c, &c_name, case).await });
    wait_for_members(&conn, &queue, 2, Duration::from_millis(5)).await;
    wait_for_subscribers(&url, &name, 2).await;

    let released = Instant::now();
    a_guard.unlock().await.expect("A's unlock");
    let b_token = timeout(PROMPT, got_rx)
        .await
        .expect("B's lock() did not return")
        .expect("B's task failed");
    // B's runtime is stalled now: what does the server hold for it?
    let holder = get(&mut conn, &lock_key(&name)).await;
    let left = pttl(&mut conn, &lock_key(&name)).await;
    let (got, resumed, b_unlock) = timeout(PROMPT + case.stall, b_task)
        .await
        .expect("B's task hung")
        .expect("B's task panicked");
    let (c_in, c_guard) = timeout(PROMPT, c_task)
        .await
        .expect("C was never served")
        .unwrap();
    eprintln!(
        "{case:?}: B in {:?} after the release; during its stall the key held {} \
         with pttl {left} ms; B resumed {:?} later, unlock: {b_unlock:?}; C in {:?} \
         after the release",
        got - released,
        if holder.as_deref() == Some(b_token.as_str()) {
            "B's token"
        } else {
            "another value"
        },
        resumed - got,
        c_in - released,
    );
    assert!(
        c_in >= resumed,
        "C got the lock {:?} into B's {:?} stall (B's unlock: {b_unlock:?})",
        c_in - got,
        case.stall
    );
    assert!(b_unlock.is_ok(), "B's unlock after its stall: {b_unlock:?}");
    assert_eq!(
        holder.as_deref(),
        Some(b_token.as_str()),
        "key during B's stall"
    );
    assert!(
        left > CLAIM,
        "B's key had {left} ms left right after its lock() returned: not its lease"
    );
    c_guard.unlock().await.expect("C's unlock");
}

/// The reproduction: an 800 ms stall right after
/// `FairMutex::lock()`, with the client's renewed lease (30 s).
///
/// Before (the guard came back on the grant message, with the 500 ms claim
/// until a confirm 100 ms later that the stall held back): C got the lock
/// about 600 ms into the stall and B's unlock found it no longer its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_holder_stalling_after_lock_keeps_the_lock() {
    holder_stalling_after_lock_keeps_the_lock(Case {
        fair: true,
        lease: None,
        stall: Duration::from_millis(800),
    })
    .await;
}

/// A stall longer than the claim but well within a fixed lease: 2 s of a
/// 10 s lease. Before: as above, C got the lock about 600 ms into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_holder_stalling_within_a_fixed_lease_keeps_the_lock() {
    holder_stalling_after_lock_keeps_the_lock(Case {
        fair: true,
        lease: Some(Duration::from_secs(10)),
        stall: Duration::from_secs(2),
    })
    .await;
}

/// The same on the plain Mutex, whose woken waiter's own attempt sets its
/// lease: it passed before the fix too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_holder_stalling_after_lock_keeps_the_lock() {
    holder_stalling_after_lock_keeps_the_lock(Case {
        fair: false,
        lease: None,
        stall: Duration::from_millis(800),
    })
    .await;
}

/// The plain Mutex with the 2 s stall in a 10 s fixed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_holder_stalling_within_a_fixed_lease_keeps_the_lock() {
    holder_stalling_after_lock_keeps_the_lock(Case {
        fair: false,
        lease: Some(Duration::from_secs(10)),
        stall: Duration::from_secs(2),
    })
    .await;
}
