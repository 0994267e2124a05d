//! The distributed [`Mutex`] and its [`MutexGuard`].
//!
//! The plain mutex is not fair: a newcomer's first attempt can take the lock
//! ahead of a waiter that was just woken (throughput first). The woken waiter
//! then parks again until the next release.
//!
//! # Implementation details
//!
//! The wire protocol is `PROTOCOL.md`, "Mutex and Election" (`acquire.lua`,
//! `release.lua`, `pass.lua`, `wake_next.lua`); the wait loop is
//! `acquire.rs`. The kind's own rules:
//!
//! - **A queue in Redis, one wake-up per release.** A waiting caller's
//!   failed attempt puts its member `"<client id>:<waiter id>"` in
//!   `P:{N}:waiters`, scored by its expiry; the release publishes the waiter
//!   id on the head's client's own channel `P:{N}:wake:<client id>`, drops
//!   a head whose client receives nothing and tries the next, and publishes
//!   nothing when nobody waits. So one waiter in the whole fleet attempts
//!   per release, at O(1) Redis work.
//! - **The hand-off reservation.** While the wake-up travels the lock key
//!   holds `m:<member>@<end>` for [`HANDOFF_MS`](crate::keys::HANDOFF_MS):
//!   other attempts fail and queue on it, the woken waiter's attempt
//!   overwrites it with its token. An attempt that finds another's
//!   reservation learns its end from the value and queues behind the
//!   waiters of the last hold, not ahead of them.
//! - **A frozen woken waiter** still counts as a receiver: the release takes
//!   it out of the queue and tells the next seven members of *other* clients
//!   to stand by, the n-th for n × 2 x `HANDOFF_MS`, so it costs the others
//!   2 x `HANDOFF_MS`, and k frozen clients in a row k times that, not a
//!   lease.

use std::fmt;
use std::time::Duration;

use crate::Error;
use crate::acquire::Acquirer;
use crate::client::Client;
use crate::guard::guard_api;
use crate::keys::{Kind, Replication};

/// A handle on one distributed mutex, identified by its name.
///
/// Cheap to clone; clones name the same lock. Holding a `Mutex` holds
/// nothing in Redis: [`lock`](Mutex::lock) and friends return a
/// [`MutexGuard`] that owns one acquisition.
#[derive(Clone)]
pub struct Mutex(pub(crate) Acquirer);

impl Client {
    /// A handle on the distributed mutex called `name`.
    ///
    /// This does no I/O and never fails: an invalid name is reported by the
    /// first call that uses it ([`Error::InvalidName`]).
    pub fn mutex(&self, name: &str) -> Mutex {
        Mutex::new(self.clone(), name, Kind::Plain)
    }
}

impl Mutex {
    pub(crate) fn new(client: Client, name: &str, kind: Kind) -> Mutex {
        Mutex(Acquirer::new(client, name, kind))
    }

    /// Sets a fixed lease for every acquisition through this handle: the key
    /// expires `lease` after it was taken unless it is released (or
    /// [extended](MutexGuard::extend)) first. There is no renewal; the
    /// guard's [`lost`](MutexGuard::lost) resolves when the lease runs out.
    ///
    /// Without a fixed lease, a lock gets the client's lease (default 30 s),
    /// renewed (default every 10 s) while its guard lives.
    ///
    /// The lease rule is the same for every lease the crate takes: from
    /// [`MIN_LEASE`](crate::MIN_LEASE) (1 ms) to
    /// [`MAX_LEASE`](crate::MAX_LEASE), a fractional millisecond rounded
    /// up. A lease outside it makes every later call through this handle
    /// fail with [`Error::InvalidLease`] (building the handle never fails).
    pub fn with_lease(self, lease: Duration) -> Mutex {
        Mutex(self.0.with_lease(lease))
    }

    /// For this lock, stops renewing a guard's lease once the guard has
    /// been held for `hold`: the lease then runs out (at most one lease
    /// later) and [`lost`](MutexGuard::lost) resolves. Overrides the
    /// client's [`ClientBuilder::max_hold`](crate::ClientBuilder::max_hold),
    /// which explains when to use it. No effect with a fixed lease.
    ///
    /// A `hold` the lease rule refuses (see [`with_lease`](Mutex::with_lease))
    /// makes every later call fail with [`Error::InvalidLease`].
    pub fn max_hold(self, hold: Duration) -> Mutex {
        Mutex(self.0.with_max_hold(hold))
    }

    /// For this lock, waits after each acquire, extend and renewal until
    /// `replicas` replicas acknowledged the write (at most `timeout`); an
    /// acquisition fewer replicas acknowledged is given up and reported as
    /// [`Error::NotReplicated`]. See
    /// [`ClientBuilder::min_replica_acks`](crate::ClientBuilder::min_replica_acks)
    /// for the cost and the limits. `replicas` = 0 turns it off for this
    /// lock; a `timeout` not shorter than the client's response timeout is
    /// cut to 100 ms below it.
    pub fn min_replica_acks(self, replicas: u32, timeout: Duration) -> Mutex {
        Mutex(self.0.with_replication(Replication::new(replicas, timeout)))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// The waiter parks until the holder's release wakes it (no polling), or
    /// until the holder's lease runs out, whichever comes first.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.mutex("nightly-report").lock().await?;
    /// println!("fence {}", guard.fence());
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidName`], [`Error::InvalidLease`] for bad input.
    /// - [`Error::WrongType`] when the lock key holds a non-string value.
    /// - [`Error::KindConflict`] when the name is in use as another kind of
    ///   lock (a [`FairMutex`](crate::FairMutex), an
    ///   [`RwLock`](crate::RwLock), a [`Semaphore`](crate::Semaphore)'s
    ///   permits, an [`Election`](crate::Election)); nothing is held.
    /// - [`Error::NotReplicated`] with [`min_replica_acks`](Self::min_replica_acks),
    ///   when too few replicas acknowledged (the lock was given back).
    /// - [`Error::Redis`] when Redis fails or cannot be reached; nothing is
    ///   held (a possibly applied attempt is released in the background).
    ///
    /// # While Redis is unreachable
    ///
    /// `lock()` does not wait for Redis to come back: it fails with
    /// [`Error::Redis`]. A parked waiter sends nothing, so it notices at its
    /// next attempt (its wake-up, the holder's lease ending, or the
    /// pub/sub connection's reconnect). An attempt whose reply does not
    /// come within the [response
    /// timeout](crate::ClientBuilder::response_timeout) `T` (a connection
    /// silently dropped by a NAT, a load balancer or a firewall) is sent
    /// once more on a fresh connection, the acquire being idempotent, so a
    /// lock waited for rides over such a fault; only when that fails too,
    /// or no connection opens, is the error returned: about 2 × `T` (plus
    /// the [connect timeout](crate::ClientBuilder::connect_timeout) when
    /// the server does not even refuse) after the attempt was sent, at
    /// once when connections are refused. Many concurrent calls fail
    /// together, each within about that bound of its send: one failed
    /// connect attempt answers every call waiting on it. The client works
    /// again within 2 × `T` + 1 s of such a fault, also when its callers
    /// give up sooner than `T` (a `tokio::time::timeout` around any call):
    /// a command left unanswered for `T` replaces the connection whoever
    /// stopped waiting for it. To wait through an outage, retry the call;
    /// [`lock_timeout`](Self::lock_timeout) bounds the whole.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no lock behind.
    /// If an acquire script was in flight its token is released in the
    /// background, and the waiter leaves the lock's queue, passing on a
    /// wake-up it had received to the next waiter in the queue (in any
    /// client). `tokio::time::timeout(d, mutex.lock())` is safe.
    pub async fn lock(&self) -> Result<MutexGuard, Error> {
        self.0.lock().await.map(MutexGuard)
    }

    /// Acquires the lock, giving up with [`Error::Timeout`] once `timeout`
    /// has passed. A zero timeout makes exactly one attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Mutex::lock`].
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard, Error> {
        self.0.lock_timeout(timeout).await.map(MutexGuard)
    }

    /// Makes one attempt: `Some(guard)` if the lock was free, `None` if it
    /// is held. Never waits and never subscribes. (An attempt that times
    /// out is sent once more on a fresh connection, as for
    /// [`lock`](Self::lock).)
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an attempt in flight when the future is dropped is
    /// released in the background.
    pub async fn try_lock(&self) -> Result<Option<MutexGuard>, Error> {
        Ok(self.0.try_lock().await?.map(MutexGuard))
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.name())
            .field("lease", &self.0.lease())
            .finish()
    }
}

guard_api!(
    /// One acquisition of a [`Mutex`] (or [`FairMutex`](crate::FairMutex)).
    ///
    /// Release it with [`unlock`](MutexGuard::unlock) to learn whether the
    /// lock was still ours. Dropping the guard releases the lock in the
    /// background (see [Shutting down](crate::Client#shutting-down)).
    ///
    /// # When two holders can coexist
    ///
    /// While [`is_lost`](MutexGuard::is_lost) is false, no other client
    /// holds the lock: the guard's local deadline never trails the key's
    /// expiry on the server, whatever happened to a reply or a cancelled
    /// call. Two holders can coexist only when (1) a holder goes on working
    /// past its deadline without looking (it never checked, or was paused
    /// between its check and its write), (2) the server lost the write (a
    /// failover to a replica that did not have it, a restart, the key
    /// deleted from outside), or (3) the server's clock runs more than 1%
    /// faster than the client's, or jumps. What protects the resource then
    /// is the [fence](MutexGuard::fence): have the resource reject writes
    /// carrying a fence lower than the highest it has seen. The argument
    /// is written out once, in the section "When can two holders coexist?"
    /// of the `lease` module's docs (`src/lease.rs`).
    MutexGuard,
    "The fencing token of this acquisition: strictly greater than every fence \
     handed out before for this lock name, by any client. Pass it to the storage \
     you protect, which should reject writes carrying a fence lower than the \
     highest it has seen.",
    "let guard = client.mutex(\"ledger\").lock().await?;"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Mutex>();
        assert_send_sync::<MutexGuard>();
    }
}
