//! What a parked waiter costs its process in heap (issue 32: at most 1 KiB
//! per waiter). 1,000 tasks park in `lock()` on 100 locks (10 each, as
//! `redbell-bench scale` parks them) and the bytes live in this process
//! after parking, minus before, are counted by a counting global allocator
//! of this test binary (one test in it, so no other test allocates
//! meanwhile).
//!
//! The count covers everything a parked waiter keeps: its tokio task (the
//! task's future holds the `Mutex` handle and the `lock()` future), its
//! place in the client's hub, and its share of the lock's keys and wake
//! channel. Before issue 32's part 1 this was ~2.1 KB in a release build
//! (`redbell-bench scale`, 100,000 waiters).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use redbell_integration_tests::{client, redis_url, unique};

/// Counts the bytes live (asked for, not what the allocator rounds them
/// up to).
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to `System` unchanged; the counting only
// reads the layout's size.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The budget is 1 KiB per parked waiter. This build (debug, with
/// this test's long lock names and a user's task, `async move {
/// m.lock().await }`) keeps ~900 B now: its tokio task a 640-byte block,
/// the waiter 96, and a tenth of the lock's keys (one buffer), its place
/// in the hub's map and its map of waiters. The bound leaves that ~60 B
/// of slack (allocators and hash tables grow in steps), and fails if the
/// task grows back into the 768-byte class (~1,030 B) or towards the old
/// ~2 KB (`redbell-bench scale`, release, 100,000 waiters: ~2.1 KB before
/// issue 32's part 1, then 1,032 B, now ~980 B in the bench's own
/// bigger task).
const MAX_PER_WAITER: i64 = 960;
const LOCKS: usize = 100;
const WAITERS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_waiter_keeps_about_1_kib_of_heap() {
    let url = redis_url();
    let base = unique("parked-heap");
    let holder = client(&url).await;
    let waiters = client(&url).await;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let guard = holder
            .mutex(&format!("{base}-{i}"))
            .with_lease(Duration::from_secs(120))
            .lock()
            .await
            .expect("holder locks");
        guards.push(guard);
    }
    let names: Vec<String> = (0..WAITERS)
        .map(|i| format!("{base}-{}", i % LOCKS))
        .collect();
    let mut tasks = Vec::with_capacity(WAITERS);
    // Settle what the clients' connections allocate on their first calls.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = LIVE.load(Ordering::SeqCst);
    for name in &names {
        let m = waiters.mutex(name);
        // Only `lock()` in the task, as in the bench: the guard is
        // unlocked outside (an `unlock()` in it would size it too).
        tasks.push(tokio::spawn(async move { m.lock().await }));
    }
    // Parked: every waiter counted in the gauge (each one's first park),
    // and the attempts' transient state freed (the count stops moving).
    let parked = tokio::time::timeout(Duration::from_secs(120), async {
        while waiters.stats().waiters < WAITERS as i64 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        parked.is_ok(),
        "{} of {WAITERS} waiters parked in 120 s",
        waiters.stats().waiters
    );
    let mut after = LIVE.load(Ordering::SeqCst);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = LIVE.load(Ordering::SeqCst);
        if now == after {
            break;
        }
        after = now;
    }
    let per_waiter = (after - before) / WAITERS as i64;
    println!("live heap per parked waiter: {per_waiter} B");
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "a waiter ended while the locks were held"
    );

    // Every waiter is still served once the holder lets go.
    for guard in guards {
        guard.unlock().await.expect("holder unlocks");
    }
    // Each guard unlocked as soon as its task has it (in any order: the
    // next holder of a lock is whichever of its waiters was woken).
    let unlocks: Vec<_> = tasks
        .into_iter()
        .map(|t| {
            tokio::spawn(async move {
                let guard = t.await.expect("task").expect("waiter locks");
                guard.unlock().await.expect("waiter unlocks");
            })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        for u in unlocks {
            u.await.expect("unlock task");
        }
    })
    .await;
    assert!(
        all.is_ok(),
        "{WAITERS} waiters were not all served in 120 s"
    );
    assert!(
        per_waiter <= MAX_PER_WAITER,
        "a parked waiter keeps {per_waiter} B of heap, over the {MAX_PER_WAITER} B budget"
    );
}
