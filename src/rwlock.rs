//! The distributed read-write lock.
//!
//! # Implementation details
//!
//! The wire protocol is `PROTOCOL.md`, "RwLock" (`rw_*.lua`); the wait loop
//! is `acquire.rs`. The kind's own rules:
//!
//! - **No queue, a broadcast.** Readers never queue; a waiting writer
//!   registers an intent in `P:{N}:writers`. The writer's release, the last
//!   reader's, a waiting writer that gives up, and a writer that got in
//!   past its intent publish on the one channel `P:{N}:rw`, and each client
//!   wakes all its waiting readers and one waiting writer (the hub).
//! - **Writer preference.** A live intent makes new readers park until it
//!   lapses; readers already in keep their holds.
//! - **A frozen waiting writer** would hold readers back until its intent
//!   expires: every release that wakes writers cuts their intents to
//!   [`INTENT_WINDOW_MS`](crate::keys::INTENT_WINDOW_MS); a live writer
//!   attempts at once and renews its own.

use std::fmt;
use std::time::Duration;

use crate::Error;
use crate::acquire::Acquirer;
use crate::client::Client;
use crate::guard::guard_api;
use crate::keys::Kind;

/// A distributed read-write lock: many readers, or one writer.
///
/// Cheap to clone. Every hold has its own token and its own lease, renewed
/// by the client's renewal task unless a fixed lease is set with
/// [`with_lease`](RwLock::with_lease).
///
/// # What the naive recipe gets wrong, and what this one does
///
/// The common recipe keeps one key whose value is `read` or `write` and
/// releases with a plain `DEL`. So one reader's release deletes the hold of
/// every other reader, all readers share one TTL that each newcomer resets,
/// anyone can release anyone's lock, and a steady stream of readers keeps a
/// writer out forever. Here:
///
/// - the writer's token is the key `P:{N}`, with its own lease;
/// - each reader's token is a member of the sorted set `P:{N}:readers`,
///   scored by its own expiry (server time), so a reader's unlock or crash
///   never releases another; expired readers are pruned inside the scripts;
/// - every release and extend checks the owner token;
/// - **writer preference**: a writer that has to wait registers its intent
///   in `P:{N}:writers` (with an expiry of its own, so a crashed waiting
///   writer holds readers back only until its entry lapses), and new
///   readers wait while any writer waits. Readers already in keep their
///   hold; the writer gets in when the last of them leaves. A writer that
///   gives up withdraws its intent at once.
///
/// # Wake-ups
///
/// The writer's release and the last reader's release publish on the lock's
/// channel `P:{N}:rw`; each client then wakes all of its waiting readers and
/// one of its waiting writers. Every park is bounded by the relevant expiry
/// (the writer's lease, the last reader's lease, the earliest writer
/// intent), so a crashed holder delays the others by its lease at most.
///
/// # Fences
///
/// Writers advance the lock's fencing counter; a reader's
/// [`fence`](ReadGuard::fence) is the counter's value when it got in, i.e.
/// the fence of the last writer whose writes it may see.
///
/// # One name, one kind
///
/// A [`Mutex`], [`FairMutex`](crate::FairMutex),
/// [`Semaphore`](crate::Semaphore) or [`Election`](crate::Election) on the
/// same name would not wake this lock's waiters, nor exclude its readers:
/// such an attempt fails with [`Error::KindConflict`] instead, whether this
/// lock is held by its writer or by readers only (each owner token opens
/// with its kind's letter, which the scripts check). In turn a read or
/// write attempt on a name whose Semaphore permits are live is refused:
/// the acquire scripts read the semaphore's count key with the fence, and
/// count its live permits only when it exists.
///
/// [`Mutex`]: crate::Mutex
#[derive(Clone)]
pub struct RwLock {
    read: Acquirer,
    write: Acquirer,
}

impl Client {
    /// A handle on the distributed read-write lock called `name`; see
    /// [`RwLock`].
    ///
    /// This does no I/O and never fails: an invalid name is reported by the
    /// first call that uses it ([`Error::InvalidName`]).
    pub fn rwlock(&self, name: &str) -> RwLock {
        RwLock {
            read: Acquirer::new(self.clone(), name, Kind::Read),
            write: Acquirer::new(self.clone(), name, Kind::Write),
        }
    }
}

impl RwLock {
    /// Sets a fixed lease for every read and write hold through this handle,
    /// with no renewal; see [`Mutex::with_lease`](crate::Mutex::with_lease).
    pub fn with_lease(self, lease: Duration) -> RwLock {
        RwLock {
            read: self.read.with_lease(lease),
            write: self.write.with_lease(lease),
        }
    }

    /// Stops renewing the lease of every read and write hold through this
    /// handle once it has been held for `hold`; see
    /// [`Mutex::max_hold`](crate::Mutex::max_hold).
    pub fn max_hold(self, hold: Duration) -> RwLock {
        RwLock {
            read: self.read.with_max_hold(hold),
            write: self.write.with_max_hold(hold),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// Takes a read hold, waiting while a writer holds or waits for the lock.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let config = client.rwlock("config");
    /// let reader = config.read().await?;
    /// // ... read, alongside other readers ...
    /// reader.unlock().await?;
    /// let writer = config.write().await?;
    /// // ... write, alone ...
    /// writer.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidName`], [`Error::InvalidLease`] for bad input.
    /// - [`Error::WrongType`] when the lock's keys hold foreign data.
    /// - [`Error::Redis`] when Redis fails or cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves no hold behind (one acquired
    /// while the future was being dropped is released in the background).
    pub async fn read(&self) -> Result<ReadGuard, Error> {
        self.read.lock().await.map(ReadGuard)
    }

    /// As [`read`](RwLock::read), giving up with [`Error::Timeout`] once
    /// `timeout` has passed. A zero timeout makes exactly one attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::read`].
    pub async fn read_timeout(&self, timeout: Duration) -> Result<ReadGuard, Error> {
        self.read.lock_timeout(timeout).await.map(ReadGuard)
    }

    /// One attempt at a read hold: `None` while a writer holds or waits.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an attempt in flight when the future is dropped is
    /// released in the background.
    pub async fn try_read(&self) -> Result<Option<ReadGuard>, Error> {
        Ok(self.read.try_lock().await?.map(ReadGuard))
    }

    /// Takes the write hold, waiting until no writer and no reader holds the
    /// lock. While it waits, new readers are held back.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves no hold behind and withdraws
    /// the writer's intent at once, so readers it held back move on.
    pub async fn write(&self) -> Result<WriteGuard, Error> {
        self.write.lock().await.map(WriteGuard)
    }

    /// As [`write`](RwLock::write), giving up with [`Error::Timeout`] once
    /// `timeout` has passed (and withdrawing the intent). A zero timeout
    /// makes exactly one attempt.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RwLock::write`].
    pub async fn write_timeout(&self, timeout: Duration) -> Result<WriteGuard, Error> {
        self.write.lock_timeout(timeout).await.map(WriteGuard)
    }

    /// One attempt at the write hold; registers no intent.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an attempt in flight when the future is dropped is
    /// released in the background.
    pub async fn try_write(&self) -> Result<Option<WriteGuard>, Error> {
        Ok(self.write.try_lock().await?.map(WriteGuard))
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name())
            .field("lease", &self.read.lease())
            .finish()
    }
}

guard_api!(
    /// A read hold on an [`RwLock`], shared with other readers. Dropping it
    /// releases the hold in the background.
    ReadGuard,
    "The lock's fencing counter when this reader got in: the fence of the last \
     writer whose writes it may see (0 if none is remembered).",
    "let guard = client.rwlock(\"catalog\").read().await?;"
);

guard_api!(
    /// The write hold on an [`RwLock`]: no reader and no other writer holds
    /// the lock meanwhile. Dropping it releases the hold in the background.
    WriteGuard,
    "The fencing token of this write hold: strictly greater than every fence \
     handed out before for this lock name, by any client. Pass it to the storage \
     you protect, which should reject writes carrying a fence lower than the \
     highest it has seen.",
    "let guard = client.rwlock(\"catalog\").write().await?;"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<RwLock>();
        assert_send_sync::<ReadGuard>();
        assert_send_sync::<WriteGuard>();
    }
}
