//! The FairMutex tests' scenes: queues waited for, a lock checked clean once
//! idle, and the three clients of a grant's fate (holder H, grantee A on a
//! runtime of its own, B queued behind A).

use std::time::Duration;

use crate::{
    LONG, Side, client, eventually, exists, fifo_expiry_key, fifo_key, get, lock_key, raw,
    redis_url, spawn_timed, unique, wait_for_members, wait_for_subscribers, zrange,
};
use redbell::{Client, Error, FairMutex, MutexGuard};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Waits until `n` waiters are queued for lock `name` at the server.
pub async fn wait_queued(conn: &MultiplexedConnection, name: &str, n: i64) {
    wait_for_members(conn, &fifo_key(name), n, Duration::from_millis(2)).await;
}

/// Waits until `n` waiters are queued for lock `name` and `n` clients
/// listen on it: all of them parked, ready to be granted the lock.
pub async fn wait_parked(conn: &MultiplexedConnection, url: &str, name: &str, n: i64) {
    wait_queued(conn, name, n).await;
    wait_for_subscribers(url, name, n).await;
}

/// Asserts that lock `name` is free and its queue keys are gone.
pub async fn assert_clean(conn: &mut MultiplexedConnection, name: &str) {
    let ok = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        async move {
            !exists(&mut conn, &lock_key(name)).await
                && !exists(&mut conn, &fifo_key(name)).await
                && !exists(&mut conn, &fifo_expiry_key(name)).await
        }
    })
    .await;
    if !ok {
        let fifo = zrange(conn, &fifo_key(name)).await;
        panic!(
            "lock {name} not clean once idle: holder {:?}, queue {fifo:?}, expiry key exists: {}",
            get(conn, &lock_key(name)).await,
            exists(conn, &fifo_expiry_key(name)).await
        );
    }
}

/// A waiter's outcome: when lock() returned, and what.
pub type Waited = (Instant, Result<MutexGuard, Error>);

/// Spawns `mutex.lock()`, timed ([`spawn_timed`]).
pub fn spawn_lock(mutex: FairMutex) -> JoinHandle<Waited> {
    spawn_timed(async move { mutex.lock().await })
}

/// Waits until A (its lock() already spawned) is queued and listening, then
/// queues B behind it: B's lock() task, once both are parked.
pub async fn queue_b_behind_a(
    conn: &MultiplexedConnection,
    url: &str,
    name: &str,
    b: &Client,
) -> JoinHandle<Waited> {
    wait_parked(conn, url, name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(name).with_lease(LONG));
    wait_parked(conn, url, name, 2).await;
    b_task
}

/// A grant's fate, set up: holder H holds lock `name` for its lease;
/// grantee A is a client on a [`Side`] of its own (freeze it to stop it
/// dead); B is a third client, to queue behind A
/// ([`Grant::queue_b_behind_a`]).
#[derive(Debug)]
pub struct Grant {
    /// The shared server's URL.
    pub url: String,
    /// The lock's name, unique to the test.
    pub name: String,
    /// A raw connection to the server.
    pub conn: MultiplexedConnection,
    /// The holder's client (the guard needs it alive).
    pub h: Client,
    /// H's guard on `name`.
    pub guard: MutexGuard,
    /// The runtime A runs on.
    pub side: Side,
    /// The grantee's client, on `side`.
    pub a: Client,
    /// The client queued behind A.
    pub b: Client,
}

impl Grant {
    /// H takes lock `unique(what)` with `lease`; A's client starts on a
    /// side runtime; B's is ready.
    pub async fn start(what: &str, lease: Duration) -> Grant {
        let url = redis_url();
        let name = unique(what);
        let conn = raw(&url).await;
        let (h, b) = (client(&url).await, client(&url).await);
        let side = Side::start();
        let a = side.client(&url).await;
        let guard = h.fair_mutex(&name).with_lease(lease).lock().await.unwrap();
        Grant {
            url,
            name,
            conn,
            h,
            guard,
            side,
            a,
            b,
        }
    }

    /// A's FairMutex on the lock, with a long lease.
    pub fn a_mutex(&self) -> FairMutex {
        self.a.fair_mutex(&self.name).with_lease(LONG)
    }

    /// Once A (its `lock()` already spawned on the side) is parked, queues
    /// B behind it: B's `lock()` task, once both are parked.
    pub async fn queue_b_behind_a(&self) -> JoinHandle<Waited> {
        queue_b_behind_a(&self.conn, &self.url, &self.name, &self.b).await
    }
}
