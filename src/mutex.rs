//! The distributed [`Mutex`] and its [`MutexGuard`].
//!
//! The plain mutex is not fair: a newcomer's first attempt can take the lock
//! ahead of a waiter that was just woken (throughput first). The woken waiter
//! then parks again until the next release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::client::{Client, Kind, LockKeys, lease_ms};
use crate::lease::{Lease, Renewal};
use crate::scripts::{self, Acquire, Owned, Queue};

/// A handle on one distributed mutex, identified by its name.
///
/// Cheap to clone; clones name the same lock. Holding a `Mutex` holds
/// nothing in Redis: [`lock`](Mutex::lock) and friends return a
/// [`MutexGuard`] that owns one acquisition.
#[derive(Clone)]
pub struct Mutex {
    client: Client,
    /// The lock's keys, or the reason its name is invalid (reported by the
    /// first call that needs the keys).
    keys: Result<Arc<LockKeys>, (String, &'static str)>,
    /// The fixed lease of each acquisition; `None` (the default): the
    /// client's lease, renewed while the guard lives.
    lease: Option<Duration>,
}

impl Mutex {
    pub(crate) fn new(client: Client, name: &str, kind: Kind) -> Mutex {
        let keys = match client.keys(name, kind) {
            Ok(keys) => Ok(Arc::new(keys)),
            Err(Error::InvalidName { name, reason }) => Err((name, reason)),
            Err(_) => Err((name.chars().take(64).collect(), "invalid name")),
        };
        Mutex {
            client,
            keys,
            lease: None,
        }
    }

    /// Sets a fixed lease for every acquisition through this handle: the key
    /// expires `lease` after it was taken unless it is released (or
    /// [extended](MutexGuard::extend)) first. There is no renewal; the
    /// guard's [`lost`](MutexGuard::lost) resolves when the lease runs out.
    ///
    /// Without a fixed lease, a lock gets the client's lease (default 30 s),
    /// renewed (default every 10 s) while its guard lives.
    ///
    /// Sub-millisecond parts round up to the next millisecond. A zero lease,
    /// or one over [`MAX_LEASE`](crate::MAX_LEASE), makes every later call
    /// fail with [`Error::InvalidLease`].
    pub fn with_lease(mut self, lease: Duration) -> Mutex {
        self.lease = Some(lease);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        match &self.keys {
            Ok(keys) => &keys.name,
            Err((name, _)) => name,
        }
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
    /// - [`Error::Redis`] when Redis fails or cannot be reached; nothing is
    ///   held (a possibly applied attempt is released in the background).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no lock behind.
    /// If an acquire script was in flight its token is released in the
    /// background, and a wake-up this waiter received is passed on to the
    /// next local waiter. `tokio::time::timeout(d, mutex.lock())` is safe.
    pub async fn lock(&self) -> Result<MutexGuard, Error> {
        let keys = self.keys()?;
        let lease_ms = self.lease_ms()?;
        let config = &self.client.0.config;
        let hub = &self.client.0.hub;
        // Joining the hub is local; the first attempt is the whole cost of an
        // uncontended lock: one round trip, no SUBSCRIBE.
        let token = new_token();
        let (mut registration, mut subscribed) = hub.join(&keys, &token);
        let notify = registration.notify();
        let member = registration.member().to_owned();
        let queue = Queue {
            member: &member,
            grace_ms: QUEUE_GRACE_MS,
            park_ms: lease_ms_or_max(config.max_park),
        };
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // armed before the attempt
            registration.queued();
            let pttl = match self.attempt(&keys, &token, lease_ms, Some(queue)).await? {
                Ok(guard) => {
                    registration.acquired();
                    return Ok(guard);
                }
                Err(pttl) => pttl,
            };
            if !subscribed {
                // A release before the SUBSCRIBE was confirmed reached no
                // one here: subscribe, then attempt again before parking.
                hub.subscribe(&registration).await?;
                subscribed = true;
                continue;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(pttl.unwrap_or(config.max_park)) => {}
            }
        }
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
        if timeout.is_zero() {
            return self.try_lock().await?.ok_or(Error::Timeout);
        }
        match Instant::now().checked_add(timeout) {
            Some(deadline) => tokio::time::timeout_at(deadline, self.lock())
                .await
                .unwrap_or(Err(Error::Timeout)),
            None => self.lock().await, // a deadline past the end of time
        }
    }

    /// Makes one attempt: `Some(guard)` if the lock was free, `None` if it
    /// is held. Never waits and never subscribes.
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
        let keys = self.keys()?;
        let lease_ms = self.lease_ms()?;
        Ok(self
            .attempt(&keys, &new_token(), lease_ms, None)
            .await?
            .ok())
    }

    /// One acquire script call. `Ok(guard)` when acquired, `Err(pttl)` when
    /// held by someone else (`None`: the key has no expiry).
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        token: &str,
        lease_ms: u64,
        queue: Option<Queue<'_>>,
    ) -> Result<Result<MutexGuard, Option<Duration>>, Error> {
        let inner = &self.client.0;
        let sent = Instant::now();
        let mut in_flight = InFlight {
            client: &self.client,
            keys,
            token: Some(token),
        };
        let mut conn = inner.conn.clone();
        let result = scripts::acquire(&mut conn, keys, token, lease_ms, queue).await;
        match result {
            Ok(Acquire::Acquired { fence }) => {
                in_flight.token = None;
                drop(in_flight);
                let lease = Lease::new(sent, Duration::from_millis(lease_ms));
                let renewal = self.lease.is_none().then(|| {
                    inner
                        .renewer
                        .register(keys.clone(), token.to_owned(), lease.clone(), sent)
                });
                Ok(Ok(MutexGuard {
                    client: self.client.clone(),
                    keys: keys.clone(),
                    token: token.to_owned(),
                    fence,
                    lease,
                    renewal,
                    released: false,
                }))
            }
            Ok(Acquire::Held { pttl_ms }) => {
                in_flight.token = None;
                Ok(Err(pttl_ms.map(Duration::from_millis)))
            }
            Err(e @ Error::WrongType { .. }) => {
                in_flight.token = None; // the script wrote nothing
                Err(e)
            }
            // The script may have run before the connection failed: the
            // in-flight guard releases the token in the background.
            Err(e) => Err(e),
        }
    }

    /// The lease of one acquisition, in whole milliseconds.
    fn lease_ms(&self) -> Result<u64, Error> {
        lease_ms(self.lease.unwrap_or_else(|| self.client.0.renewer.lease()))
    }

    fn keys(&self) -> Result<Arc<LockKeys>, Error> {
        self.keys
            .clone()
            .map_err(|(name, reason)| Error::InvalidName { name, reason })
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.name())
            .field("lease", &self.lease)
            .finish()
    }
}

/// How long a waiter's queue entry outlives the holder's PTTL: a parked
/// waiter retries (and refreshes its entry) when that PTTL ends, so this
/// only has to cover its wake-up and round trip on a slow machine.
const QUEUE_GRACE_MS: u64 = 2_000;

fn lease_ms_or_max(d: Duration) -> u64 {
    lease_ms(d).unwrap_or(u64::from(u32::MAX))
}

/// A fresh random owner token: 32 hex digits.
fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Releases an acquire attempt's token in the background if the attempt's
/// future is dropped (or fails) before its outcome is known.
struct InFlight<'a> {
    client: &'a Client,
    keys: &'a Arc<LockKeys>,
    /// `Some` while the outcome is unknown.
    token: Option<&'a str>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            self.client
                .0
                .release_in_background(self.keys.clone(), token.to_owned());
        }
    }
}

/// One acquisition of a [`Mutex`].
///
/// Release it with [`unlock`](MutexGuard::unlock) to learn whether the lock
/// was still ours. Dropping the guard releases the lock in the background.
#[must_use = "dropping the guard releases the lock at once (in the background)"]
pub struct MutexGuard {
    client: Client,
    keys: Arc<LockKeys>,
    token: String,
    fence: u64,
    /// The local view of the lease: deadline and lost flag.
    lease: Arc<Lease>,
    /// Our entry in the client's renewal queue; `None` for a fixed lease,
    /// and taken (stopping renewal at once) before any release.
    renewal: Option<Renewal>,
    /// Set once a release has completed; `Drop` releases otherwise.
    released: bool,
}

impl MutexGuard {
    /// The fencing token of this acquisition: strictly greater than every
    /// fence handed out before for this lock name, by any client. Pass it to
    /// the storage you protect, which should reject writes carrying a fence
    /// lower than the highest it has seen.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The random owner token of this acquisition (the lock key's value).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Releases the lock and wakes a waiter.
    ///
    /// # Errors
    ///
    /// - [`Error::NotHeld`] when the lock was no longer ours: the lease
    ///   expired, and another client may have held it since. Nothing was
    ///   deleted.
    /// - [`Error::Redis`] when Redis could not be reached; the release is
    ///   retried in the background, and the lease bounds the damage.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before Redis answered, the
    /// release is completed in the background.
    pub async fn unlock(mut self) -> Result<(), Error> {
        self.renewal = None; // no renewal from here on
        let mut conn = self.client.0.conn.clone();
        let owned = scripts::release(&mut conn, &self.keys, &self.token).await?;
        self.released = true;
        owned.into_result()
    }

    /// Resets the lease to `lease` from now, if the lock is still ours.
    ///
    /// For a renewed lease this is a one-off: the next renewal sets the
    /// client's lease again.
    ///
    /// # Errors
    ///
    /// - [`Error::NotHeld`] when the lock was no longer ours; the lease is
    ///   then reported [lost](MutexGuard::lost).
    /// - [`Error::InvalidLease`] for a zero or over-long lease.
    /// - [`Error::Redis`] when Redis could not be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the lock held; the extension
    /// may or may not have been applied (the local deadline only moves once
    /// Redis confirmed it).
    pub async fn extend(&self, lease: Duration) -> Result<(), Error> {
        let lease_ms = lease_ms(lease)?;
        let mut conn = self.client.0.conn.clone();
        let sent = Instant::now();
        let owned = scripts::extend(&mut conn, &[(&self.keys, &self.token)], lease_ms).await?;
        match owned.first().copied().unwrap_or(Owned::Gone) {
            Owned::Ours => {
                self.lease.renewed(sent, Duration::from_millis(lease_ms));
                Ok(())
            }
            Owned::Theirs | Owned::Gone => {
                self.lease.set_lost();
                Err(Error::NotHeld)
            }
        }
    }

    /// Resolves when the lease is lost: a renewal found the key gone or
    /// taken by another token, Redis stayed unreachable past the lease's
    /// local deadline, or a fixed lease ran out. Select on it to abort a
    /// critical section that is no longer protected:
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.mutex("ledger").lock().await?;
    /// tokio::select! {
    ///     _ = work() => guard.unlock().await?,
    ///     _ = guard.lost() => eprintln!("lease lost: stopped before doing damage"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes; dropping it changes nothing.
    pub async fn lost(&self) {
        self.lease.lost().await
    }

    /// Whether the lease is known lost (see [`lost`](MutexGuard::lost)).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        self.renewal = None; // stop renewing before the release is queued
        if !self.released {
            self.client
                .0
                .release_in_background(self.keys.clone(), std::mem::take(&mut self.token));
        }
    }
}

impl fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &self.keys.name)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Mutex>();
        assert_send_sync::<MutexGuard>();
    }

    #[test]
    fn tokens_are_unique_hex() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
