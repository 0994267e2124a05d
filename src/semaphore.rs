//! The distributed counting [`Semaphore`] and its [`Permit`].
//!
//! # Implementation details
//!
//! The wire protocol is `PROTOCOL.md`, "Semaphore" (`sem_*.lua`, the data
//! model in `sem_common.lua`); the wait loop is `acquire.rs`, the same as
//! the mutexes'. The kind's own rules:
//!
//! - **Owed permits.** With `free` permits not held, the first `free`
//!   queued waiters are owed one: a caller at rank `r` takes a permit iff
//!   `r < free`, and a caller not queued counts as the back of the queue.
//! - **Wake-ups.** Whatever frees permits (a release, expired holders
//!   reclaimed by any script, an owed waiter that left or lapsed) wakes the
//!   waiters newly owed, one message each on their clients' channels, and
//!   cuts their entries to [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS);
//!   the next seven in line stand by for twice that, and their attempt
//!   prunes a woken member that froze.
//! - **Parks.** Until the earliest holder's lease ends (when a crashed
//!   holder's permit comes back), or, while permits are free but owed to
//!   members ahead, until the earliest owed entry lapses. A waiter queues
//!   only once its wake channel is subscribed, as for the fair mutex.

use std::fmt;
use std::time::Duration;

use crate::Error;
use crate::acquire::Acquirer;
use crate::client::Client;
use crate::guard::guard_api;
use crate::keys::{Kind, Replication};

/// A distributed counting semaphore: at most `permits` holders at once,
/// each with its own token, lease and fence.
///
/// Cheap to clone; clones name the same semaphore. Holding a `Semaphore`
/// holds nothing in Redis: [`acquire`](Semaphore::acquire) and friends
/// return a [`Permit`] that owns one permit.
///
/// # Data model
///
/// Every key lives under the hash tag `P:{N}` (`P` the client's prefix,
/// `N` the name), so a semaphore lives in one cluster slot:
///
/// - `P:{N}:holders`, a sorted set: each permit's token, scored by its lease
///   expiry in **server** time. A holder whose lease ran out (it crashed, or
///   was cut off from Redis) is reclaimed by the next acquire or release,
///   which wakes whoever the permit is owed to. The set outlives the latest
///   lease in it by 2 s, so that a lapsed permit is always reclaimed that
///   way and never freed unseen by the key's expiry.
/// - `P:{N}:permits`: the permit count. A handle asking for another count
///   gets [`Error::PermitsMismatch`]; the count is never resized silently.
///   It expires with the holders and the queue, so once nobody holds or
///   waits (for at most a lease and 2 s) a new count may be used.
/// - `P:{N}:queue` and `P:{N}:queue:expiry`: the waiters, FIFO by arrival,
///   each entry expiring unless its waiter refreshes it.
/// - `P:{N}:fence`: the fencing counter, shared with the other lock kinds
///   of the same name.
///
/// # Policy
///
/// - **FIFO by arrival.** A free permit goes to the head of the queue; a
///   newcomer (and [`try_acquire`](Semaphore::try_acquire)) takes one only
///   when more permits are free than waiters are queued, so nobody is
///   starved by newcomers. A client keeps one place in the queue per
///   semaphore: its waiters take turns, each queuing (by its arrival) when
///   the one before it got its permit or left (meanwhile they take a
///   permit only when one is free and owed to nobody), so a frozen process
///   holds one place, not one per waiting task.
/// - **Event-driven.** A release wakes as many waiters as it freed permits,
///   each through its own client's wake channel, at O(1) Redis work per
///   permit whatever the number of waiters; parked waiters send nothing.
///   A woken waiter that froze costs the next in line a short window
///   (0.5 s), not a lease, and a newcomer no more than its reservation
///   (0.25 s: while a permit is free but owed, a park ends when the owed
///   entry lapses). Every park ends by the earliest holder's lease
///   at the latest, so a crashed holder's permit is taken within moments of
///   its expiry.
/// - **One permit per call.** There is no `acquire_many`: under FIFO a
///   request for several permits would hold up everyone behind it until all
///   are free, and taking them one by one from two callers can deadlock.
///   Hold several [`Permit`]s only if every caller takes them in one order.
///
/// # Guarantees, and their limits
///
/// While a permit's [`is_lost`](Permit::is_lost) is false, its token is in
/// the holders set, and the holders set never has more than `permits`
/// live members. The limits are those of the [`Mutex`](crate::Mutex) (see
/// [`MutexGuard`](crate::MutexGuard#when-two-holders-can-coexist)): a
/// holder that works on past its lease, a server that lost writes (a
/// failover, a restart, keys removed from outside), or clocks that break
/// the drift margin can give more than `permits` holders; the
/// [fence](Permit::fence) lets a resource refuse the stale ones.
#[derive(Clone)]
pub struct Semaphore(Acquirer);

impl Client {
    /// A handle on the distributed semaphore called `name`, with `permits`
    /// permits; see [`Semaphore`].
    ///
    /// This does no I/O and never fails: an invalid name, or zero permits,
    /// is reported by the first call that uses it ([`Error::InvalidName`],
    /// [`Error::InvalidPermits`]); a count that differs from the one stored
    /// in Redis by the acquire that finds it ([`Error::PermitsMismatch`]).
    /// One name is one kind of lock: a name a [`Mutex`](crate::Mutex),
    /// [`FairMutex`](crate::FairMutex), [`RwLock`](crate::RwLock) (its
    /// writer, or readers only) or [`Election`](crate::Election) holds is
    /// refused with [`Error::KindConflict`] (the lock key is read by the
    /// command that reads the count; live readers cost one ZCOUNT), and
    /// those refuse a name whose permits are held.
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore(Acquirer::new(self.clone(), name, Kind::Semaphore).with_permits(permits))
    }
}

impl Semaphore {
    /// Sets a fixed lease for every permit taken through this handle, with
    /// no renewal; see [`Mutex::with_lease`](crate::Mutex::with_lease).
    pub fn with_lease(self, lease: Duration) -> Semaphore {
        Semaphore(self.0.with_lease(lease))
    }

    /// Stops renewing a permit's lease once it has been held for `hold`;
    /// see [`Mutex::max_hold`](crate::Mutex::max_hold).
    pub fn max_hold(self, hold: Duration) -> Semaphore {
        Semaphore(self.0.with_max_hold(hold))
    }

    /// Waits after each acquire, extend and renewal until `replicas`
    /// replicas acknowledged it; see
    /// [`Mutex::min_replica_acks`](crate::Mutex::min_replica_acks).
    pub fn min_replica_acks(self, replicas: u32, timeout: Duration) -> Semaphore {
        Semaphore(self.0.with_replication(Replication::new(replicas, timeout)))
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// The permit count this handle was made with.
    pub fn permits(&self) -> u32 {
        self.0.permits()
    }

    /// Takes a permit, waiting in line as long as it takes.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let downloads = client.semaphore("downloads", 4);
    /// let permit = downloads.acquire().await?;
    /// // ... at most 4 of these run at once, across all clients ...
    /// permit.unlock().await?; // the next waiter in line is woken
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`](crate::Mutex::lock) (bad input, a name in use as
    /// another kind, foreign data, too few replicas, Redis failing; its
    /// "While Redis is unreachable" holds here too), and:
    ///
    /// - [`Error::InvalidPermits`] for zero permits.
    /// - [`Error::PermitsMismatch`] when the semaphore exists with another
    ///   permit count.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit
    /// behind. If an acquire script was in flight its token is released in
    /// the background, and the waiter leaves the queue, passing a permit
    /// owed to it on to the next waiter in line (in any client).
    /// `tokio::time::timeout(d, semaphore.acquire())` is safe.
    pub async fn acquire(&self) -> Result<Permit, Error> {
        self.0.lock().await.map(Permit)
    }

    /// Takes a permit, giving up with [`Error::Timeout`] once `timeout` has
    /// passed; the waiter then leaves the queue at once. A zero timeout
    /// makes exactly one attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; otherwise as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Permit, Error> {
        self.0.lock_timeout(timeout).await.map(Permit)
    }

    /// Makes one attempt: `Some(permit)` if a permit is free and not owed
    /// to a queued waiter, `None` otherwise. Never waits and never
    /// subscribes.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an attempt in flight when the future is dropped is
    /// released in the background.
    pub async fn try_acquire(&self) -> Result<Option<Permit>, Error> {
        Ok(self.0.try_lock().await?.map(Permit))
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .field("permits", &self.permits())
            .field("lease", &self.0.lease())
            .finish()
    }
}

guard_api!(
    /// One permit of a [`Semaphore`].
    ///
    /// Give it back with [`unlock`](Permit::unlock) (as every guard) to
    /// learn whether it was still ours; the next waiter in line is woken. Dropping the permit releases it in the background (see
    /// [Shutting down](crate::Client#shutting-down)). Its lease is renewed
    /// by the client's renewal task unless the semaphore has a fixed lease;
    /// [`lost`](Permit::lost) resolves when it is lost.
    Permit,
    "The fencing token of this acquisition: strictly greater than every fence \
     handed out before for this semaphore's name, by any client (holders at \
     the same time have distinct fences). Pass it to the storage you protect.",
    "let guard = client.semaphore(\"uploads\", 4).acquire().await?;"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Semaphore>();
        assert_send_sync::<Permit>();
    }
}
