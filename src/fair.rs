//! The fair mutex: FIFO order and direct hand-off.
//!
//! # Implementation details
//!
//! The wire protocol is `PROTOCOL.md`, "FairMutex" (`fair_acquire.lua`,
//! `fair_release.lua`, `fair_pass.lua`, `fair_common.lua`); the wait loop
//! is `acquire.rs`. The kind's own rules:
//!
//! - **The queue** `P:{N}:fifo` holds `"<client id>:<waiter id>:<token>"`
//!   scored by arrival (server µs), kept when the waiter attempts again. A
//!   waiter queues only once its wake channel is subscribed: a grant
//!   published before would reach nobody and cost it its place.
//! - **A grant, then the grantee's own attempt.** The release pops the
//!   head, probes its client's channel (a client with no subscriber is
//!   dropped and the next one tried), sets the lock to the head's token for
//!   a claim of [`CLAIM_MS`](crate::keys::CLAIM_MS) with a fresh fence,
//!   and publishes the grant. The grantee's attempt finds its token and
//!   sets its full lease: the confirm (see "A guard holds its full lease
//!   from the start" on [`FairMutex`]).
//! - **Long parks and standbys.** A waiter that parks longer than a claim
//!   marks the queue (`~`); a grant to a waiter that arrived no later
//!   tells the next seven to stand by for about a claim and records the first
//!   in `P:{N}:handoff`, so a frozen grantee or standby costs the queue
//!   about a claim, not a lease; an attempt on the free lock drops a
//!   standby that missed its deadline. With short holds, nobody parks long
//!   and a grant sends no standby.

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
/// takes it out of the queue and publishes the grant to that waiter's
/// client. Nobody can barge in between: [`FairMutex::try_lock`] succeeds
/// only when the lock is free **and** no one is queued.
///
/// # A guard holds its full lease from the start
///
/// The granted waiter does not return its guard on the message: its own
/// attempt finds its token, sets its full lease and reads the fence (the
/// confirm, `fair_acquire.lua`), and `lock()` returns after that reply,
/// with the lease counted from when the attempt was sent, as for any
/// acquisition. A holder whose runtime stalls right after `lock()` (CPU
/// work on its thread, a page-in, a debugger) thus keeps the lock for its
/// whole lease, as with the plain [`Mutex`].
///
/// Why not a round-trip-free grant that carries the full lease? The server
/// cannot tell a grantee that froze before reading its grant (SIGSTOP with
/// its socket open: PUBLISH still counts it) from one that froze right
/// after `lock()` returned. A grant that gave the full lease would stall
/// the queue for a whole lease behind every frozen waiter, breaking the
/// bound that a live waiter gets a free lock within about a claim of the
/// release, however many of one frozen client's tasks queue ahead of it;
/// a guard returned on a claim breaks the lease instead. Only a message
/// *from* the grantee can tell the two apart, so the grant stays a claim
/// that only its grantee's attempt turns into a lease: a frozen grantee
/// costs the queue the claim (its attempt never comes), a live one holds
/// exactly what a successful attempt gives. The price is the round trip
/// the grant had saved.
///
/// Faults:
/// - A grant whose client is gone (PUBLISH reached nobody) is undone and
///   the next waiter is granted, in the same script.
/// - A grant that reached its client but is never confirmed (the client
///   froze or died on receipt) lapses after the claim lease. When a waiter behind
///   may be parked for longer (it queued behind a long hold), the grant also
///   tells the next seven in line to attempt after the claim: the queue
///   stalls for about the claim, not a whole lease.
/// - A grant read late (the waiter's client was paused) costs nothing
///   special: the attempt confirms it if it is still the waiter's, and
///   queues the waiter again (at the back) if the claim lapsed meanwhile.
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
/// of a scarce resource). Its hand-off takes as many round trips as the
/// plain mutex's (the release, then the woken waiter's attempt), in more
/// Redis commands (about 27 against 19 between busy workers: mostly the
/// standbys that keep a frozen grantee from holding up the queue). With
/// [`min_replica_acks`](crate::ClientBuilder::min_replica_acks), `WAIT`
/// follows the granted waiter's attempt like any other.
#[derive(Clone, Debug)]
pub struct FairMutex(Mutex);

impl Client {
    /// A handle on the fair (FIFO, direct hand-off) mutex called `name`;
    /// see [`FairMutex`].
    ///
    /// This does no I/O and never fails: an invalid name is reported by the
    /// first call that uses it ([`Error::InvalidName`]). A name in use as a
    /// plain [`Mutex`], an [`RwLock`](crate::RwLock), a
    /// [`Semaphore`](crate::Semaphore) or an [`Election`](crate::Election)
    /// is refused with [`Error::KindConflict`].
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
