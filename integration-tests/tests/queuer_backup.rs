//! The backup of a client's queuing waiter (see "One place per client" in
//! `src/acquire.rs`): a live queuer keeps its turn, and its sibling sends
//! nothing when its backup window ends. (The unpolled queuer, whose sibling
//! must take over, is `pool_edges.rs`'s `*_unpolled_queuer_sibling`.)

use std::time::Duration;

use tokio::time::{Instant, sleep};

use redbell_integration_tests::{
    client, got_within, redis_url, unique, wait_for_members, wait_for_parked, waiters_key,
};

/// The bound (1 s), with slack for a loaded machine.
const BOUND: Duration = Duration::from_millis(2500);

/// The leases held: what a stall would cost.
const LEASE: Duration = Duration::from_secs(8);

type Guard = Box<dyn std::any::Any + Send>;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Semaphore,
}

impl Kind {
    fn queue(self, name: &str) -> String {
        match self {
            Kind::Mutex => waiters_key(name),
            Kind::Semaphore => format!("redbell:{{{name}}}:queue"),
        }
    }
}

async fn acquire(c: &redbell::Client, kind: Kind, name: &str) -> Result<Guard, redbell::Error> {
    Ok(match kind {
        Kind::Mutex => Box::new(c.mutex(name).with_lease(LEASE).lock().await?) as Guard,
        Kind::Semaphore => Box::new(c.semaphore(name, 1).with_lease(LEASE).acquire().await?),
    })
}

fn spawn_acquire(
    c: &redbell::Client,
    kind: Kind,
    name: &str,
) -> tokio::task::JoinHandle<Result<Guard, redbell::Error>> {
    let (c, name) = (c.clone(), name.to_owned());
    tokio::spawn(async move { acquire(&c, kind, &name).await })
}

/// B's waiter, then client A's queuer Q, then A's sibling S wait. The
/// release wakes B and sends Q a standby: Q (live) attempts after its
/// window and parks again. S's backup ends after that, finds Q attempted,
/// and sends nothing: A passes nothing on, nobody of A takes the lock
/// while B holds it, and when B releases, Q (still A's queuer) is served,
/// then S.
async fn live_queuer_keeps_its_turn(kind: Kind) {
    let url = redis_url();
    let name = unique(&format!("qbackup-live-{kind:?}"));
    let queue = kind.queue(&name);
    let conn = redbell_integration_tests::raw(&url).await;
    let (holder, b, a) = (client(&url).await, client(&url).await, client(&url).await);
    let held = acquire(&holder, kind, &name).await.unwrap();
    let b_waiter = spawn_acquire(&b, kind, &name);
    wait_for_members(&conn, &queue, 1, Duration::from_millis(10)).await;
    if let Kind::Mutex = kind {
        // A Mutex queue is ordered by expiry (the holder's, when each
        // queued): extended, the holder puts Q behind B.
        sleep(Duration::from_millis(50)).await;
        let g = held.downcast_ref::<redbell::MutexGuard>().unwrap();
        g.extend(LEASE).await.unwrap();
    }
    let q = spawn_acquire(&a, kind, &name);
    wait_for_members(&conn, &queue, 2, Duration::from_millis(10)).await;
    let s = spawn_acquire(&a, kind, &name);
    wait_for_parked(&a, 2).await;
    sleep(Duration::from_millis(100)).await;

    let released = Instant::now();
    drop(held);
    let what = format!("{kind:?}: B, first in line");
    let b_guard = got_within(b_waiter, released, BOUND, &what).await;
    // Every window (the standby's, then the backup's) has ended by now.
    sleep(Duration::from_millis(1200)).await;
    let stats = a.stats();
    assert_eq!(
        stats.wakeups_passed_on, 0,
        "{kind:?}: A's sibling took over from its live queuer: {stats:?}"
    );
    assert!(
        !q.is_finished() && !s.is_finished(),
        "{kind:?}: A took B's lock"
    );

    let released = Instant::now();
    drop(b_guard);
    let what = format!("{kind:?}: A's queuer, next in line");
    let q_guard = got_within(q, released, BOUND, &what).await;
    eprintln!(
        "{what} got the lock {:?} after B's release",
        released.elapsed()
    );
    assert!(!s.is_finished(), "{kind:?}: S took Q's lock");
    let released = Instant::now();
    drop(q_guard);
    let what = format!("{kind:?}: A's sibling, after its queuer");
    let _s = got_within(s, released, BOUND, &what).await;
    assert_eq!(a.stats().wakeups_passed_on, 0, "{kind:?}: {:?}", a.stats());
}

#[tokio::test]
async fn mutex_live_queuer_keeps_its_turn() {
    live_queuer_keeps_its_turn(Kind::Mutex).await;
}

#[tokio::test]
async fn semaphore_live_queuer_keeps_its_turn() {
    live_queuer_keeps_its_turn(Kind::Semaphore).await;
}
