//! The acquisition engine every lock type shares: the wait loop.
//! [`Mutex`](crate::Mutex), [`FairMutex`](crate::FairMutex),
//! [`RwLock`](crate::RwLock) and [`Semaphore`](crate::Semaphore) are thin
//! handles over an [`Acquirer`]; the lock's [`Kind`] picks the scripts
//! (`scripts/layout.rs`). The wire protocol (keys, scripts, messages, the
//! client's duties, what bounds each stall) is `PROTOCOL.md`'s; each kind's
//! rules are on its type. This is what the Rust engine adds.
//!
//! ```text
//! join the hub (local)          an uncontended lock costs one attempt, no SUBSCRIBE
//! loop {
//!     arm Notified              a message from here on is kept
//!     attempt -> acquired? done (only the client's queuer passes its member)
//!     not subscribed yet? subscribe (confirmed), then attempt again
//!     park: notified | sleep(park) | standby or backup window | deadline
//! }
//! ```
//!
//! # Implementation details
//!
//! The parts: the loop ([`Acquirer::wait`]); the [hub](crate::hub), which
//! keeps one subscription per lock per client (lingering after its last
//! waiter) and routes each message to the one waiter it names; the
//! [background worker](crate::background), which runs the pass-ons of
//! waiters that left and of messages for waiters that are gone.
//!
//! **Lost wake-ups** (PROTOCOL.md, "Client duties", items 3 and 4). The
//! `Notified` is `enable`d before each attempt, so a message that lands
//! while the reply is on the wire is kept by the armed future (or as its
//! [`Notify`](tokio::sync::Notify)'s permit). A waiter whose attempt failed
//! before its channel was subscribed calls
//! [`Hub::subscribe`](crate::hub::Hub::subscribe), which returns once the
//! server confirmed, and attempts again before it parks. A reconnect wakes
//! every waiter (the hub).
//!
//! ## One place per client
//!
//! PROTOCOL.md, "Client duties", item 6: a client queues one waiter per
//! lock (Mutex, FairMutex, Semaphore), so a release's two standbys reach
//! two *other* processes however many tasks of a frozen process wait. The
//! hub keeps the place (its entry's `queuer`): the oldest waiter; the others
//! attempt with no member and park in the client, bounded as every park is;
//! when the queuer leaves, with the lock or without, the oldest remaining
//! waiter takes the turn and is notified, and its attempt queues it, by the
//! `arrival_us` its first failed attempt learnt (the FIFO kinds). The price:
//! one more attempt per acquisition, in a client with several waiters of
//! one lock.
//!
//! **A queuer kept but not polled.** What the queuer's member is sent
//! reaches only it, but its `lock()` future may be alive and not polled (a
//! `select!` arm left pending, a starved task): its process is live, so the
//! standbys went elsewhere. So whenever the hub hands the queuer something
//! to attempt for, it gives the oldest other local waiter a **backup**
//! window, the kind's standby window (plus the standby's own, if the queuer
//! was given one): 2 x [`HANDOFF_MS`](crate::keys::HANDOFF_MS),
//! [`CLAIM_MS`](crate::keys::CLAIM_MS) + 100 ms, or 2 x
//! [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS); by then what the queuer
//! was given has lapsed. The queuer clears its mark just before each
//! attempt; at the window's end the sibling reads it
//! ([`Registration::take_over`](crate::hub::Registration::take_over)):
//! cleared, it parks on and sends nothing; still set, it takes the turn,
//! attempts and queues, and the old queuer's member is passed on
//! (`pool_edges.rs`, `queuer_backup.rs`).
//!
//! **Fair grants.** A grant ends the park but is no guard: the waiter
//! attempts, which confirms it (PROTOCOL.md, "Client duties", item 8), and
//! its lease counts from that attempt's send, as for every acquisition; one
//! read after a `lock_timeout` deadline is answered with [`Error::Timeout`]
//! and the registration's pass-on moves the grant on. Returning the guard
//! on the message saved a round trip but held only the claim: a holder
//! stalled right after `lock()` lost the lock mid-section (see the
//! [`FairMutex`](crate::FairMutex) docs).
//!
//! **Parks** last the reply's park or PTTL (`config.max_park` for a key
//! without expiry), capped at [`MAX_PARK`], cut by a standby or backup
//! window. A failed attempt of a waiting caller queues it with
//! [`QUEUE_GRACE_MS`] of slack past that park; its next attempt refreshes
//! the entry.
//!
//! **Cancel safety and re-sends.** An attempt in flight owns an `InFlight`
//! that releases its token in the background if the future is dropped or
//! the outcome is unknown; an attempt that timed out on a silent connection
//! is sent once more on the fresh one (argued in `attempt`).

use std::num::NonZeroU64;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::client::Client;
use crate::guard::Acquisition;
use crate::keys::{Kind, LockKeys, Replication, lease_ms, millis};
use crate::lease::Lease;
use crate::renewer::Renewal;
use crate::scripts::{self, Attempt, Queue};
use crate::stats::Outcome;

mod tally;

use tally::{InFlight, Parked, Tally};

/// How long a waiter's queue entry outlives the PTTL it parks on: a parked
/// waiter retries (and refreshes its entry) when that PTTL ends, so this
/// only has to cover its wake-up and round trip on a slow machine.
const QUEUE_GRACE_MS: u64 = 2_000;

/// The longest single park, whatever PTTL a foreign key reports.
const MAX_PARK: Duration = Duration::from_secs(24 * 3600);

/// Acquires one lock of one kind.
#[derive(Clone, Debug)]
pub(crate) struct Acquirer {
    client: Client,
    /// The lock's keys, or the reason its name is invalid (reported by the
    /// first call that needs the keys; boxed, so that every handle is
    /// smaller by what only a bad name needs).
    keys: Result<Arc<LockKeys>, Box<(String, &'static str)>>,
    /// The fixed lease of each acquisition; `None` (the default): the
    /// client's lease, renewed while the guard lives. Kept as given: the
    /// lease rule (`keys::lease_ms`) judges it, and `max_hold`, at every
    /// call that acquires, so a bad one is reported there.
    lease: Option<Duration>,
    /// `WAIT` after acquires, extends and renewals. Default: the client's.
    replication: Option<Replication>,
    /// Renewal stops once a guard has been held this long. Default: the
    /// client's (none unless set).
    max_hold: Option<Duration>,
    /// The protocol (also the `kind` of the figures).
    kind: Kind,
}

impl Acquirer {
    pub(crate) fn new(client: Client, name: &str, kind: Kind) -> Acquirer {
        let keys = match client.shared_keys(name, kind) {
            Ok(keys) => Ok(keys),
            Err(Error::InvalidName { name, reason }) => Err(Box::new((name, reason))),
            Err(_) => Err(Box::new((name.chars().take(64).collect(), "invalid name"))),
        };
        let replication = client.0.config.replication;
        let max_hold = client.0.config.max_hold;
        Acquirer {
            client,
            keys,
            lease: None,
            replication,
            max_hold,
            kind,
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

    /// Sets a semaphore's permit count (checked by the first call that
    /// needs the keys).
    pub(crate) fn with_permits(mut self, permits: u32) -> Acquirer {
        if let Ok(keys) = &mut self.keys {
            Arc::make_mut(keys).permits = permits;
        }
        self
    }

    pub(crate) fn with_lease(mut self, lease: Duration) -> Acquirer {
        self.lease = Some(lease);
        self
    }

    pub(crate) fn with_max_hold(mut self, hold: Duration) -> Acquirer {
        self.max_hold = Some(hold);
        self
    }

    /// A semaphore's permit count (0 for the other kinds).
    pub(crate) fn permits(&self) -> u32 {
        self.keys.as_ref().map_or(0, |keys| keys.permits)
    }

    pub(crate) fn lease(&self) -> Option<Duration> {
        self.lease
    }

    pub(crate) fn name(&self) -> &str {
        match &self.keys {
            Ok(keys) => keys.name(),
            Err(bad) => &bad.0,
        }
    }

    /// Waits until acquired: the loop of the module docs.
    pub(crate) async fn lock(&self) -> Result<Acquisition, Error> {
        let mut tally = Tally::new(self, self.span());
        // `wait()` is built where it is awaited, not handed to a helper: a
        // future passed to an `async fn` is kept twice in the helper's
        // state (the argument, and the value being awaited), which made
        // every parked `lock()` twice the wait loop's size. Polled in the
        // span by hand: `Instrument` would keep a second handle on it.
        let mut wait = std::pin::pin!(self.wait(None));
        let result = std::future::poll_fn(|cx| tally.in_span(|| wait.as_mut().poll(cx))).await;
        tally.end_with(&result);
        result
    }

    /// The span of one acquisition (`lock` or `lock_timeout`), at debug
    /// level: lock, kind, outcome, fence, wait in µs. Its [`Tally`] counts
    /// how the acquisition ended (a drop before the end counts as
    /// cancelled) and records it there.
    fn span(&self) -> tracing::Span {
        tracing::debug_span!(
            "redbell.acquire",
            lock = %self.name(),
            kind = ?self.kind,
            outcome = tracing::field::Empty,
            fence = tracing::field::Empty,
            waited_us = tracing::field::Empty,
        )
    }

    /// The wait loop itself; `deadline` is `lock_timeout`'s (a fair grant
    /// read after it is not taken).
    ///
    /// A parked waiter keeps this future for as long as it waits, and a
    /// future is as big as the state it keeps across its biggest await
    /// point: what lives across the park is kept to what the park needs
    /// (the registration, whose waiter holds the token; the `Notified`,
    /// the sleep and its bounds), and the rest (the slot, the member, the
    /// call) is built per attempt, boxed for the call.
    ///
    /// Not an `async fn`: one keeps a copy of each argument beside the one
    /// its body uses; the `async move` block uses its captures in place.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    fn wait(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Acquisition, Error>> + '_ {
        async move {
            // In a block: from here on the keys are the registration's (one
            // copy kept while parked).
            let (registration, mut subscribed, kind) = {
                let keys = self.keys()?;
                self.max_hold.map(lease_ms).transpose()?; // zero or over-long
                self.lease_ms()?;
                // Joining the hub is local; the first attempt is the whole cost of an
                // uncontended lock: one round trip, no SUBSCRIBE.
                let token = self.client.0.tokens.next(keys.kind);
                let (registration, subscribed) = self.client.0.hub.join(&keys, token);
                (registration, subscribed, keys.kind)
            };
            let waiter = registration.waiter();
            // FairMutex and Semaphore: when this waiter first reached the
            // server, from a failed attempt made before its turn to queue
            // came; its turn queues it by this arrival (see `Queue`).
            let mut arrival_us: Option<NonZeroU64> = None;
            // Counts this waiter in the `waiters` gauge from its first park on.
            let mut parked = None;
            loop {
                let notified = waiter.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable(); // armed before the attempt
                // A fair waiter joins the queue only once it can be told of its
                // grant: a grant published before its SUBSCRIBE was confirmed
                // would reach nobody and cost it its place.
                // The same for a semaphore waiter, whose place is FIFO too.
                // And a client queues one waiter per lock at a time (see "One
                // place per client"): the others attempt without queuing, and
                // park until their turn comes (the hub notifies them).
                //
                // Whatever it was asked to attempt for, it does now. The mark is
                // cleared first, then `may_queue` takes the registry's lock,
                // which a sibling's `take_over` holds while it reads the mark
                // and moves the turn. So either the sibling sees the mark cleared
                // (and parks on), or this waiter sees the turn gone (and does
                // not queue): never both queuing, never neither attempting.
                waiter.attempting();
                let turn = registration.may_queue();
                let queuing = turn && (subscribed || !matches!(kind, Kind::Fair | Kind::Semaphore));
                if queuing {
                    registration.queued();
                }
                // One of the client's slots first (`ATTEMPTS_IN_FLIGHT`): a
                // burst of waiters queues here, in order, not on the
                // connection, and allocates no call state while it does.
                let slot = self.client.0.attempts.acquire().await.ok();
                // Boxed, as the SUBSCRIBE below: the script call's state
                // (redis-rs, the recovery of a lost reply) is ~4 KB, which every
                // parked waiter would carry while it waits for nothing but a
                // Notify. Boxed, it lives only during the call, and so does the
                // member built for it (`tests/parked_memory.rs`).
                let outcome = Box::pin(async {
                    let member = queuing.then(|| registration.member());
                    let queue = member.as_deref().map(|member| Queue {
                        member,
                        grace_ms: QUEUE_GRACE_MS,
                        park_ms: millis(self.client.0.config.max_park),
                        arrival_us: arrival_us.map(NonZeroU64::get),
                    });
                    let lease_ms = self.lease_ms()?; // checked above
                    let keys = registration.keys();
                    self.attempt(keys, waiter.token(), lease_ms, queue).await
                })
                .await;
                drop(slot);
                let pttl = match outcome? {
                    Ok(held) => {
                        registration.acquired(&held.lease);
                        return Ok(held);
                    }
                    Err((pttl, server_us)) => {
                        if !turn && arrival_us.is_none() {
                            // Its arrival at the server (the FIFO kinds answer
                            // with their time): its turn queues it by this.
                            arrival_us = server_us.and_then(NonZeroU64::new);
                        }
                        pttl
                    }
                };
                if !subscribed {
                    // A release before the SUBSCRIBE was confirmed reached no
                    // one here: subscribe, then attempt again before parking.
                    Box::pin(self.client.0.hub.subscribe(&registration)).await?;
                    subscribed = true;
                    continue;
                }
                if parked.is_none() {
                    parked = Some(Parked::new(&self.client.0.counters));
                }
                // Capped so a foreign key with an absurd expiry cannot overflow
                // the clock; a day-long park still costs nothing.
                let park = pttl.unwrap_or(self.client.0.config.max_park).min(MAX_PARK);
                let bound = Instant::now() + park;
                // One sleep for the whole park, moved by the windows below
                // (it keeps its deadline: no copy of it here).
                let sleep = tokio::time::sleep_until(bound);
                tokio::pin!(sleep);
                // A backup window runs: the client's queuer was asked to
                // attempt (see "One place per client").
                let mut backup = false;
                loop {
                    // Notified, or the sleep's end (not `select!`, whose
                    // state is bigger, in every parked future).
                    let notice = std::future::poll_fn(|cx| {
                        if notified.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(true);
                        }
                        sleep.as_mut().poll(cx).map(|()| false)
                    })
                    .await;
                    if !notice {
                        if backup && !registration.take_over() {
                            // The queuer attempted: it is live, and this
                            // waiter parks on as before, no call sent.
                            backup = false;
                            sleep.as_mut().reset(bound);
                            continue;
                        }
                        break;
                    }
                    if waiter.take_grant() {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            // Too late for the caller: the registration's
                            // pass-on hands the grant to the next waiter.
                            return Err(Error::Timeout);
                        }
                        // Not a guard yet: the grant holds only the claim. The
                        // attempt finds our token and sets our lease (the
                        // confirm), or queues us again if the claim lapsed.
                        break;
                    }
                    if let Some(window) = waiter.take_backup() {
                        backup = true;
                        let until = sleep.deadline().min(Instant::now() + window);
                        sleep.as_mut().reset(until);
                        notified.set(waiter.notify.notified());
                        notified.as_mut().enable();
                        continue;
                    }
                    let Some(window) = waiter.take_standby() else {
                        break;
                    };
                    // The waiter ahead was just woken (or granted the lock): if
                    // it is frozen, this waiter must notice.
                    let until = sleep.deadline().min(Instant::now() + window);
                    sleep.as_mut().reset(until);
                    notified.set(waiter.notify.notified());
                    notified.as_mut().enable();
                }
            }
        }
    }

    /// As [`lock`](Self::lock), with [`Error::Timeout`] at the deadline; a
    /// zero timeout makes exactly one attempt.
    pub(crate) async fn lock_timeout(&self, timeout: Duration) -> Result<Acquisition, Error> {
        if timeout.is_zero() {
            // Boxed, as `wait`'s attempts: unboxed, the call's state would
            // make every parked `lock_timeout` future ~4 KB.
            return Box::pin(self.try_lock()).await?.ok_or(Error::Timeout);
        }
        let Some(deadline) = Instant::now().checked_add(timeout) else {
            return Box::pin(self.lock()).await; // a deadline past the end of time
        };
        let mut tally = Tally::new(self, self.span());
        let mut wait = std::pin::pin!(tokio::time::timeout_at(deadline, self.wait(Some(deadline))));
        let result = std::future::poll_fn(|cx| tally.in_span(|| wait.as_mut().poll(cx)))
            .await
            .unwrap_or(Err(Error::Timeout));
        tally.end_with(&result);
        result
    }

    /// One attempt that never waits, queues or subscribes.
    pub(crate) async fn try_lock(&self) -> Result<Option<Acquisition>, Error> {
        let mut tally = Tally::new(self, tracing::Span::none());
        let result = self.try_once().await;
        match &result {
            Ok(Some(_)) => tally.end(Outcome::Acquired),
            Ok(None) => tally.end(Outcome::Busy),
            Err(e) => tally.failed(e),
        }
        result
    }

    async fn try_once(&self) -> Result<Option<Acquisition>, Error> {
        let keys = self.keys()?;
        self.max_hold.map(lease_ms).transpose()?; // zero or over-long
        let lease_ms = self.lease_ms()?;
        let token = self.client.0.tokens.next(keys.kind);
        Ok(self.attempt(&keys, &token, lease_ms, None).await?.ok())
    }

    /// One acquire script call. `Ok(held)` when acquired, `Err((pttl,
    /// server_us))` when held by someone else (pttl `None`: the key has no
    /// expiry; `server_us`: the server time of the attempt, from the FIFO
    /// kinds).
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        token: &str,
        lease_ms: u64,
        queue: Option<Queue<'_>>,
    ) -> Result<Result<Acquisition, (Option<Duration>, Option<u64>)>, Error> {
        let inner = &self.client.0;
        let sent = Instant::now();
        let mut in_flight = InFlight {
            client: &self.client,
            keys,
            token: Some(token),
        };
        let mut result =
            scripts::acquire(&inner.conn, keys, token, lease_ms, queue, self.replication).await;
        // Refused at connect: the call never left this process (on one
        // server or the sentinels' primary, a call written to a connection
        // that then failed reports that failure, never a refusal; redis-rs's
        // cluster connection retries a sent call on a new connection, whose
        // refusal would hide the first). Every send refused: nothing ran.
        let mut never_sent = !inner.conn.is_cluster() && refused(&result);
        if let Err(Error::Redis(e)) = &result
            && (e.is_timeout() || e.is_connection_dropped())
            && inner.conn.recover(sent).await
        {
            // The connection stopped answering or was dropped under the
            // call (a `CLIENT KILL`, a reset; a parked waiter's next
            // attempt is the first to meet it), and a fresh one replaced
            // it: send the same call once more there. Safe if the first one
            // ran: an acquire that finds its own token reports the
            // acquisition again (the fair and read ones renew its lease), a
            // failed one refreshes the same queue entry. The lease still
            // counts from `sent`, the first send: its key may have been set
            // then. A second timeout is returned (Redis unreachable), and
            // the caller's deadline still bounds this, a drop of the
            // future being the same as for one call.
            result =
                scripts::acquire(&inner.conn, keys, token, lease_ms, queue, self.replication).await;
            never_sent &= refused(&result);
        }
        match result {
            Ok((Attempt::Acquired { .. }, Some(acked)))
                if self.replication.is_some_and(|r| acked < r.replicas()) =>
            {
                // Not known to survive a failover: give it back, and say so.
                // Should the release fail, the in-flight guard retries it.
                scripts::release(&inner.conn, keys, token).await?;
                in_flight.token = None;
                Err(Error::NotReplicated {
                    acked,
                    wanted: self.replication.map_or(0, Replication::replicas),
                })
            }
            Ok((Attempt::Acquired { fence }, _)) => {
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
                        self.max_hold,
                    )
                });
                Ok(Ok(self.held(keys, token, fence, lease, renewal)))
            }
            Ok((Attempt::Held { pttl_ms, server_us }, _)) => {
                in_flight.token = None;
                Ok(Err((pttl_ms.map(Duration::from_millis), server_us)))
            }
            Err(
                e @ (Error::WrongType { .. }
                | Error::KindConflict { .. }
                | Error::PermitsMismatch { .. }
                | Error::Protocol { .. }),
            ) => {
                in_flight.token = None; // the script wrote nothing
                Err(e)
            }
            // Nothing to release: no attempt reached a server. (`redbell
            // run` waits for the background work before it exits, and a
            // release retried against a dead primary held it there for
            // seconds after a failover.)
            Err(e) if never_sent => {
                in_flight.token = None;
                Err(e)
            }
            // The script may have run before the connection failed: the
            // in-flight guard releases the token in the background.
            Err(e) => Err(e),
        }
    }

    /// The guard of an acquisition whose lease is `lease`.
    fn held(
        &self,
        keys: &Arc<LockKeys>,
        token: &str,
        fence: u64,
        lease: Arc<Lease>,
        renewal: Option<Renewal>,
    ) -> Acquisition {
        let counters = &self.client.0.counters;
        lease.observe(counters.clone(), keys.clone());
        counters.guards(1);
        Acquisition {
            client: self.client.clone(),
            keys: keys.clone(),
            token: token.to_owned(),
            fence,
            lease,
            renewal,
            released: false,
            replication: self.replication,
            acquired_at: Instant::now(),
        }
    }

    /// The lease of one acquisition, in whole milliseconds.
    fn lease_ms(&self) -> Result<u64, Error> {
        lease_ms(self.lease.unwrap_or_else(|| self.client.0.renewer.lease()))
    }

    fn keys(&self) -> Result<Arc<LockKeys>, Error> {
        let keys = self.keys.clone().map_err(|bad| {
            let (name, reason) = *bad;
            Error::InvalidName { name, reason }
        })?;
        if keys.kind == Kind::Semaphore && keys.permits == 0 {
            return Err(Error::InvalidPermits {
                name: keys.name().chars().take(64).collect(),
                permits: 0,
                reason: "a semaphore needs at least one permit",
            });
        }
        Ok(keys)
    }
}

/// Whether an acquire call failed at connect (refused): it was never sent.
fn refused<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::Redis(e)) if e.is_connection_refusal())
}
