//! The fair mutex: FIFO order and direct hand-off.

use std::time::Duration;

use crate::keys::Kind;
use crate::{Client, Error, Mutex, MutexGuard};

/// A distributed mutex that serves waiters in arrival order and hands the
/// lock to the next waiter inside the release.
///
/// Cheap to clone. Its guards are ordinary [`MutexGuard`]s: fence, unlock,
/// extend, lost and renewal work as for the plain mutex.
///
/// # Policy
///
/// Waiters are served in order of arrival at the server. A release does not
/// just wake the head waiter: inside the release script it makes the lock
/// the head's (its token, a fresh fence, a short *claim* lease of 500 ms)
/// and publishes the grant to that waiter's client. The woken waiter
/// confirms with one round trip (its acquire finds its own token and resets
/// the full lease) and returns the guard. Nobody can barge in between:
/// [`FairMutex::try_lock`] succeeds only when the lock is free **and** no
/// one is queued.
///
/// Faults:
/// - A grant whose client is gone (PUBLISH reached nobody) is undone and
///   the next waiter is granted, in the same script.
/// - A grant that reached its client but is never confirmed (the client died
///   on receipt) lapses after the claim lease. The next waiter in line parks
///   no longer than the holder's PTTL, so it notices and takes over: the
///   queue stalls for the claim lease at most, not a whole lease.
/// - A waiter that is cancelled or times out leaves the queue at once, and
///   a grant already made to it moves on to the next waiter.
/// - A waiter whose client crashed leaves the queue when its entry expires
///   (its park plus a grace period), or at once when a grant meets no
///   receiver.
///
/// # Which one to choose
///
/// The plain [`Mutex`] gives throughput: a newcomer may take a free lock
/// ahead of queued waiters, so a busy worker can re-take it. Choose the
/// [`FairMutex`] when every contender must get its turn in order, with
/// bounded waiting for all (job schedulers, leader rotation, fair sharing
/// of a scarce resource). Each hand-off costs the same number of round
/// trips as with the plain mutex; the price is that the lock stays idle
/// while the grant travels to the next waiter, even if another caller is
/// ready at once.
#[derive(Clone, Debug)]
pub struct FairMutex(Mutex);

impl Client {
    /// A handle on the fair (FIFO, direct hand-off) mutex called `name`;
    /// see [`FairMutex`].
    ///
    /// This does no I/O and never fails: an invalid name is reported by the
    /// first call that uses it ([`Error::InvalidName`]). A name in use as a
    /// plain [`Mutex`] or an [`RwLock`](crate::RwLock) is refused with
    /// [`Error::KindConflict`].
    pub fn fair_mutex(&self, name: &str) -> FairMutex {
        FairMutex(Mutex::new(self.clone(), name, Kind::Fair))
    }
}

impl FairMutex {
    /// Sets a fixed lease for every acquisition; see [`Mutex::with_lease`].
    pub fn with_lease(self, lease: Duration) -> FairMutex {
        FairMutex(self.0.with_lease(lease))
    }

    /// Stops renewing a guard's lease once it has been held for `hold`;
    /// see [`Mutex::max_hold`].
    pub fn max_hold(self, hold: Duration) -> FairMutex {
        FairMutex(self.0.max_hold(hold))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Acquires the lock, waiting in line as long as it takes.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.fair_mutex("print-queue").lock().await?;
    /// guard.unlock().await?; // the next waiter in line is granted the lock
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves no lock behind and takes the
    /// waiter out of the queue at once; a grant already made to it passes
    /// to the next waiter.
    pub async fn lock(&self) -> Result<MutexGuard, Error> {
        self.0.lock().await
    }

    /// Acquires the lock, giving up with [`Error::Timeout`] once `timeout`
    /// has passed; the waiter then leaves the queue at once.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] at the deadline; otherwise as [`Mutex::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FairMutex::lock`].
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<MutexGuard, Error> {
        self.0.lock_timeout(timeout).await
    }

    /// Takes the lock only if it is free and nobody is queued for it.
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
        self.0.try_lock().await
    }
}
