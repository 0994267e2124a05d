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
/// Waiters are served in order of arrival at the server. A client keeps
/// one place in the queue per lock: its waiters take turns, each queuing
/// (by its arrival) when the one before it is served or leaves, so a
/// frozen process holds one place, not one per waiting task (see "One
/// place per client" in the wait protocol). A release does not
/// just wake the head waiter: inside the release script it makes the lock
/// the head's (its token, a fresh fence, a short *claim* lease of 500 ms),
/// takes it out of the queue and publishes the grant, with the fence and
/// the claim's end, to that waiter's client. The woken waiter returns its
/// guard on that message alone, with no round trip: the guard's lease is
/// the claim until its first renewal, 100 ms later, confirms the grant and
/// sets the full lease (a guard released sooner never sends it). If the
/// confirm finds the lock gone or taken, or cannot reach Redis before the
/// claim ends, the guard's [`lost`](MutexGuard::lost) fires. Nobody can
/// barge in between: [`FairMutex::try_lock`] succeeds only when the lock is
/// free **and** no one is queued.
///
/// Faults:
/// - A grant whose client is gone (PUBLISH reached nobody) is undone and
///   the next waiter is granted, in the same script.
/// - A grant that reached its client but is never used (the client froze
///   or died on receipt) lapses after the claim lease. When a waiter behind
///   may be parked for longer (it queued behind a long hold), the grant also
///   tells the next two in line to attempt after the claim: the queue
///   stalls for about the claim, not a whole lease.
/// - A grant read when too little of its claim is left (the waiter's
///   client was paused) is not taken on the message: the waiter attempts,
///   which confirms it if it is still its own and queues it again if not.
/// - A waiter that is cancelled or times out leaves the queue at once, and
///   a grant already made to it moves on to the next waiter.
/// - A waiter whose client crashed leaves the queue when a grant to it
///   meets no receiver; the queue expires by itself once all its members
///   stopped attempting.
///
/// # Which one to choose
///
/// The plain [`Mutex`] gives throughput when workers re-take the lock: a
/// newcomer may take a free lock ahead of queued waiters. Choose the
/// [`FairMutex`] when every contender must get its turn in order, with
/// bounded waiting for all (job schedulers, leader rotation, fair sharing
/// of a scarce resource). Its hand-off costs one round trip less than the
/// plain mutex's (the woken waiter acts on the grant itself), and fewer
/// Redis commands. With
/// [`min_replica_acks`](crate::ClientBuilder::min_replica_acks) the woken
/// waiter attempts instead, so that `WAIT` follows its acquisition.
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
