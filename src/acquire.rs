//! The acquisition engine every lock type shares: the fast path, the wait
//! protocol of the [hub](crate::hub), cancel-safe attempts, and the leases
//! of what is acquired. [`Mutex`](crate::Mutex),
//! [`FairMutex`](crate::FairMutex) and [`RwLock`](crate::RwLock) are thin
//! handles over an [`Acquirer`]; the lock's [`Kind`] picks the scripts.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::client::{Client, Kind, LockKeys, lease_ms, millis};
use crate::guard::Held;
use crate::lease::Lease;
use crate::scripts::{self, Acquire, Queue, Replication};

/// How long a waiter's queue entry outlives the PTTL it parks on: a parked
/// waiter retries (and refreshes its entry) when that PTTL ends, so this
/// only has to cover its wake-up and round trip on a slow machine.
const QUEUE_GRACE_MS: u64 = 2_000;

/// How long a fair waiter next in line parks after the waiter ahead was
/// granted the lock: the grant's claim lease, plus a little slack.
const STANDBY: Duration = Duration::from_millis(scripts::CLAIM_MS + 50);

/// The longest single park, whatever PTTL a foreign key reports.
const MAX_PARK: Duration = Duration::from_secs(24 * 3600);

/// Acquires one lock of one kind.
#[derive(Clone, Debug)]
pub(crate) struct Acquirer {
    client: Client,
    /// The lock's keys, or the reason its name is invalid (reported by the
    /// first call that needs the keys).
    keys: Result<Arc<LockKeys>, (String, &'static str)>,
    /// The fixed lease of each acquisition; `None` (the default): the
    /// client's lease, renewed while the guard lives.
    lease: Option<Duration>,
    /// `WAIT` after acquires, extends and renewals. Default: the client's.
    replication: Option<Replication>,
}

impl Acquirer {
    pub(crate) fn new(client: Client, name: &str, kind: Kind) -> Acquirer {
        let keys = match client.keys(name, kind) {
            Ok(keys) => Ok(Arc::new(keys)),
            Err(Error::InvalidName { name, reason }) => Err((name, reason)),
            Err(_) => Err((name.chars().take(64).collect(), "invalid name")),
        };
        let replication = client.0.config.replication;
        Acquirer {
            client,
            keys,
            lease: None,
            replication,
        }
    }

    /// Sets `WAIT` for this lock; its timeout is cut below the client's
    /// response timeout, so a lagging replica yields `NotReplicated`
    /// rather than a timed-out command.
    pub(crate) fn with_replication(mut self, replication: Option<Replication>) -> Acquirer {
        let ceiling = millis(self.client.0.config.response_timeout)
            .saturating_sub(100)
            .max(1);
        self.replication = replication.map(|r| Replication {
            timeout_ms: r.timeout_ms.min(ceiling),
            ..r
        });
        self
    }

    pub(crate) fn with_lease(mut self, lease: Duration) -> Acquirer {
        self.lease = Some(lease);
        self
    }

    pub(crate) fn lease(&self) -> Option<Duration> {
        self.lease
    }

    pub(crate) fn name(&self) -> &str {
        match &self.keys {
            Ok(keys) => &keys.name,
            Err((name, _)) => name,
        }
    }

    /// Waits until acquired; see the hub's docs for the protocol.
    pub(crate) async fn lock(&self) -> Result<Held, Error> {
        let keys = self.keys()?;
        let lease_ms = self.lease_ms()?;
        let config = &self.client.0.config;
        let hub = &self.client.0.hub;
        // Joining the hub is local; the first attempt is the whole cost of an
        // uncontended lock: one round trip, no SUBSCRIBE.
        let token = new_token();
        let (mut registration, mut subscribed) = hub.join(&keys, &token);
        let waiter = registration.waiter();
        let member = registration.member().to_owned();
        let queue = Queue {
            member: &member,
            grace_ms: QUEUE_GRACE_MS,
            park_ms: millis(config.max_park),
        };
        loop {
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // armed before the attempt
            // A fair waiter joins the queue only once it can be told of its
            // grant: a grant published before its SUBSCRIBE was confirmed
            // would reach nobody and cost it its place.
            let queue = (subscribed || keys.kind != Kind::Fair).then_some(queue);
            registration.queued();
            let pttl = match self.attempt(&keys, &token, lease_ms, queue).await? {
                Ok(held) => {
                    registration.acquired();
                    return Ok(held);
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
            // Capped so a foreign key with an absurd expiry cannot overflow
            // the clock; a day-long park still costs nothing.
            let park = pttl.unwrap_or(config.max_park).min(MAX_PARK);
            let mut until = Instant::now() + park;
            loop {
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep_until(until) => break,
                }
                if !waiter.take_standby() {
                    break;
                }
                // A fair lock was granted to the waiter ahead: if it never
                // confirms, its claim lapses, and this waiter must notice.
                until = until.min(Instant::now() + STANDBY);
                notified.set(waiter.notify.notified());
                notified.as_mut().enable();
            }
        }
    }

    /// As [`lock`](Self::lock), with [`Error::Timeout`] at the deadline; a
    /// zero timeout makes exactly one attempt.
    pub(crate) async fn lock_timeout(&self, timeout: Duration) -> Result<Held, Error> {
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

    /// One attempt that never waits, queues or subscribes.
    pub(crate) async fn try_lock(&self) -> Result<Option<Held>, Error> {
        let keys = self.keys()?;
        let lease_ms = self.lease_ms()?;
        Ok(self
            .attempt(&keys, &new_token(), lease_ms, None)
            .await?
            .ok())
    }

    /// One acquire script call. `Ok(held)` when acquired, `Err(pttl)` when
    /// held by someone else (`None`: the key has no expiry).
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        token: &str,
        lease_ms: u64,
        queue: Option<Queue<'_>>,
    ) -> Result<Result<Held, Option<Duration>>, Error> {
        let inner = &self.client.0;
        let sent = Instant::now();
        let mut in_flight = InFlight {
            client: &self.client,
            keys,
            token: Some(token),
        };
        let result =
            scripts::acquire(&inner.conn, keys, token, lease_ms, queue, self.replication).await;
        match result {
            Ok(Acquire::Acquired { fence }) => {
                in_flight.token = None;
                drop(in_flight);
                let lease = Lease::new(sent, Duration::from_millis(lease_ms));
                let renewal = self.lease.is_none().then(|| {
                    inner.renewer.register(
                        keys.clone(),
                        token.to_owned(),
                        lease.clone(),
                        sent,
                        self.replication,
                    )
                });
                Ok(Ok(Held {
                    client: self.client.clone(),
                    keys: keys.clone(),
                    token: token.to_owned(),
                    fence,
                    lease,
                    renewal,
                    released: false,
                    replication: self.replication,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_hex() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
