//! Operator tools: inspect a lock, break a lock.

use std::time::Duration;

use crate::keys::Kind;
use crate::{Client, Error, scripts};

/// A snapshot of one lock, taken atomically on the server by
/// [`Client::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name.
    pub name: String,
    /// The current holder's owner token; `None` when the lock is free.
    pub holder: Option<String>,
    /// The holder's remaining lease; `None` when the lock is free or its key
    /// has no expiry.
    pub ttl: Option<Duration>,
    /// The last fence handed out for this name; `None` if none is
    /// remembered (never locked, or idle longer than the fence's expiry).
    pub fence: Option<u64>,
    /// Waiters queued for the lock, across all clients (entries not yet
    /// expired).
    pub waiters: u64,
}

/// A snapshot of one [`Semaphore`](crate::Semaphore), taken atomically on
/// the server by [`Client::semaphore_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The semaphore's name.
    pub name: String,
    /// The permit count stored in Redis; `None` when none is (nobody held
    /// or waited for it lately).
    pub permits: Option<u32>,
    /// Each live holder's permit token and remaining lease, the earliest to
    /// expire first.
    pub holders: Vec<(String, Duration)>,
    /// Waiters queued for a permit, across all clients (entries not yet
    /// expired).
    pub waiters: u64,
    /// The last fence handed out for this name; `None` if none is
    /// remembered.
    pub fence: Option<u64>,
}

impl Client {
    /// Reads the state of the semaphore `name`: permit count, live holders
    /// with their remaining leases, queued waiters and last fence, in one
    /// atomic script call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// semaphore's keys hold foreign data, [`Error::Redis`] when Redis
    /// fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn semaphore_status(&self, name: &str) -> Result<SemaphoreStatus, Error> {
        let keys = self.keys(name, Kind::Semaphore)?;
        let (permits, fence, waiters, holders) =
            scripts::semaphore_status(&self.0.conn, &keys).await?;
        Ok(SemaphoreStatus {
            name: keys.name,
            permits: permits.parse().ok(),
            holders: holders
                .into_iter()
                .map(|(token, ms)| (token, Duration::from_millis(ms)))
                .collect(),
            waiters,
            fence: fence.parse().ok(),
        })
    }

    /// Reads the state of the lock `name`: holder, remaining lease, last
    /// fence and queued waiters, in one atomic script call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// lock's keys hold foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn status(&self, name: &str) -> Result<LockStatus, Error> {
        let keys = self.keys(name, Kind::Plain)?;
        let (holder, pttl, fence, waiters) = scripts::status(&self.0.conn, &keys).await?;
        Ok(LockStatus {
            name: keys.name,
            holder: (!holder.is_empty()).then_some(holder),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            fence: fence.parse().ok(),
            waiters,
        })
    }

    /// Breaks the [`Mutex`](crate::Mutex) lock `name` whoever holds it, as
    /// an operator would, and wakes the next waiter. (For a
    /// [`FairMutex`](crate::FairMutex) the queued waiters notice when their
    /// parks end; read-write locks are not covered.) Returns the removed holder's token, or `None`
    /// if the lock was free. The former holder learns of it at its next
    /// renewal ([`MutexGuard::lost`](crate::MutexGuard::lost)) or unlock
    /// ([`Error::NotHeld`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad name, [`Error::WrongType`] when the
    /// lock key holds foreign data, [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not break the lock.
    pub async fn force_unlock(&self, name: &str) -> Result<Option<String>, Error> {
        let keys = self.keys(name, Kind::Plain)?;
        let holder = scripts::force_release(&self.0.conn, &keys).await?;
        Ok((!holder.is_empty()).then_some(holder))
    }
}
