//! The acquisition engine every lock type shares, and the wait protocol.
//! [`Mutex`](crate::Mutex), [`FairMutex`](crate::FairMutex),
//! [`RwLock`](crate::RwLock) and [`Semaphore`](crate::Semaphore) are thin
//! handles over an [`Acquirer`]; the
//! lock's [`Kind`] picks the scripts (`scripts/layout.rs`). The parts: the
//! waiter's loop here; its registration and wake-ups in the [hub](crate::hub)
//! (one subscription per lock per client, the client's wake channel for that
//! lock); the scripts that queue, wake and hand over on the server; the
//! [background worker](crate::background) that passes wake-ups on.
//!
//! # Implementation details
//!
//! ## The lost wake-up race, and why the notification is armed first
//!
//! A waiter that failed to acquire must park until the holder releases. The
//! release script deletes the key and publishes the wake-up in one atomic
//! step, so the only way to miss a release is to not be listening when it
//! happens. There are two windows:
//!
//! 1. **Before the subscription exists.** A waiter that attempts, fails, and
//!    only then subscribes misses a release published between its attempt
//!    and the server's SUBSCRIBE confirmation, and sleeps for a whole lease.
//!    So a waiter whose first attempt failed while its client was not yet
//!    subscribed calls [`Hub::subscribe`](crate::hub::Hub::subscribe), which returns only once the
//!    server confirmed the SUBSCRIBE, and attempts *again* before it parks.
//! 2. **Between the failed attempt and the park.** A release can arrive while
//!    the attempt's reply is on the wire. The waiter therefore creates and
//!    `enable`s its [`Notified`](tokio::sync::futures::Notified) *before*
//!    each attempt: a wake-up that lands during the attempt is kept by the
//!    armed future (or as its [`Notify`](tokio::sync::Notify)'s permit) and the park returns at
//!    once.
//!
//! ```text
//! join the hub (local)          an uncontended lock costs one attempt, no SUBSCRIBE
//! loop {
//!     arm Notified              a release from here on is not lost
//!     attempt -> acquired? done (a failed attempt queues the waiter)
//!     not subscribed yet? subscribe (confirmed), then attempt again
//!     park: notified | sleep(pttl) | deadline
//! }
//! ```
//!
//! The second attempt after subscribing costs one extra script call, once per
//! client and lock while the subscription lasts (it lingers after the last
//! waiter leaves, so a busy lock pays it once); in steady state a contended
//! acquisition costs two attempts: the one that queued the waiter and the
//! one after its wake-up.
//!
//! Correctness never depends on a message arriving: every park is bounded by
//! the holder's remaining lease (its PTTL), so a holder that crashed without
//! releasing hands over when its lease expires.
//!
//! ## One waiter woken per release, across all processes
//!
//! A plain PUBLISH on one shared channel would wake every subscribed client,
//! and each would send an attempt of which all but one fail. Instead each
//! lock has a **waiter queue** in Redis, `P:{N}:waiters`: a sorted set of
//! members `"<client id>:<waiter id>"`, each scored by its expiry in server
//! time. A waiting caller's failed attempt adds (or refreshes) its member in
//! the same script call, with an expiry of the holder's PTTL plus a grace
//! period, since a parked waiter retries by then at the latest; a successful
//! attempt removes it. The release script deletes the key and publishes the
//! waiter id on the **head's client's own channel** `P:{N}:wake:<client id>`;
//! when PUBLISH counts no receiver (that client is gone) the member is
//! dropped and the next one is tried, in the same script. Nothing is
//! published when nobody waits. Redis work per hand-off is therefore O(1)
//! whatever the number of waiting clients, and within a client exactly one
//! waiter (the one named) attempts: local single flight comes for free.
//!
//! ## One place per client
//!
//! A client puts **one waiter per lock** in the queue at a time (Mutex,
//! FairMutex, Semaphore; the hub's `queuer`): its oldest waiter. Its other
//! waiters attempt without queuing (a free lock is theirs as anyone's) and
//! park in the client, bounded as every park is; when the queuing waiter
//! leaves, with the lock or without, the oldest of them takes its turn and
//! is notified, and its attempt queues it at once. So a client's waiters
//! take turns in the queue, one after the other in the order they
//! joined, and each is placed among the other clients' waiters as
//! before: for the FIFO kinds by its arrival at the server, which a
//! waiter that attempted before its turn learns from that attempt's
//! answer and hands to the script that queues it (`arrival_us`), so a
//! client's waiters keep their FIFO places (give or take the round trip
//! between one being served and the next queuing).
//!
//! Why: a release's standbys (below) go to the next two members in line,
//! and must reach two *other* processes, since the process of the woken
//! waiter may be the one that froze. When every waiter had a member, a
//! frozen process whose tasks held places 1 to 3 hid a live waiter in 4th
//! place, which slept out the holder's lease (12 s measured); looking past
//! any number of one client's members would have cost the release a scan
//! that grows with the queue. With one place per client, a frozen
//! process holds one place whatever its task count, the next two members
//! are two other clients, and the release still reads three members (flat
//! Redis cost per hand-off). The price: the next waiter of a client that
//! was just served attempts once more, to queue (one script call per
//! acquisition, only in a client with several waiters of one lock).
//!
//! **A queuer kept but not polled.** The place is the queuing waiter's,
//! and what its member is sent (a wake-up, a fair grant, a standby; its
//! turn) reaches only it. Its `lock()` future may be alive but not polled
//! (a `select!` arm left pending, a task starved on a busy thread): its
//! process is live, so the standbys of the release went elsewhere, and its
//! polled siblings would sleep out the holder's PTTL. So whenever the hub
//! hands the queuer something to attempt for, it also gives the oldest
//! other local waiter a **backup** window, the kind's standby window (plus
//! the standby's own, if the queuer was given one): 2 x
//! [`HANDOFF_MS`](crate::keys::HANDOFF_MS) for the Mutex,
//! [`CLAIM_MS`](crate::keys::CLAIM_MS) + 100 ms for the FairMutex, 2 x
//! [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS) for the Semaphore; by
//! then what the queuer was given (a reservation, a claim, a reserved
//! place) has lapsed. The queuer clears its mark (`owed`) just before each
//! attempt. When the window ends, the sibling reads the mark under the
//! registry's lock
//! ([`Registration::take_over`](crate::hub::Registration::take_over)):
//! cleared, the queuer is live and the sibling parks on, no call sent (a
//! live queuer costs no Redis command); still set, the sibling takes over
//! the turn, attempts (a free lock is anyone's) and queues, and the old
//! queuer's member is passed on. The old queuer, if ever polled, attempts
//! without queuing and waits for its turn like any sibling, so the client
//! still holds one place, and a frozen process still holds one (its
//! siblings are frozen too). Measured, one release with the queuer
//! unpolled: the sibling has the lock after the window plus a round trip
//! (0.20 s, 0.60 s, 0.50 s; `pool_edges.rs`), instead of the holder's
//! PTTL (7.4 s); a live queuer's sibling sends nothing
//! (`queuer_backup.rs`).
//!
//! ## The hand-off reservation, and the lean paths
//!
//! While a plain release's wake-up travels, the lock key itself holds the
//! reservation `m:<member>@<end>` with the reservation's expiry
//! ([`HANDOFF_MS`](crate::keys::HANDOFF_MS); `<end>` is that expiry in
//! server ms): every other attempt's `SET NX` fails on it (and queues), the
//! woken waiter's attempt finds its own member there and overwrites it with
//! its token and lease. `status` reports a reserved lock as free.
//!
//! An attempt that finds another waiter's reservation (typically the
//! releaser, locking again at once) learns from the value alone when the
//! reservation ends, so it queues with no `PTTL` and no `TIME`: its
//! entry's score is the reservation's end plus its own lease and the
//! grace, which puts it behind the waiters that queued while the last
//! holder held (their scores are that holder's expiry plus the grace), not
//! ahead of them as the reservation's short expiry would. Among the first
//! two in the queue it parks no longer than the reservation (the woken
//! waiter may be frozen, or take the lock with a short lease and crash:
//! the next attempt learns its PTTL), and its score's fraction `.5` tells
//! a later release that it needs no standby message (below); further
//! back it parks for the lease it assumed, and releases standby it once it
//! is among the next two in line. So the acquire's first command, `SET
//! NX GET`, both takes a free lock and reads a held one's value; one
//! `EXISTS` of the readers and the queue rules out, on a free lock, live
//! RwLock readers (a Mutex must not be taken beside them) and a queue entry
//! to remove. The release reads the queue's head (`ZRANGE 0 2 WITHSCORES`)
//! in the same script as its `DEL`: empty means nobody waits, so no `TIME`,
//! no pruning and no PUBLISH; scripts run atomically, so an attempt that
//! queued before the release is seen by it, and one after it finds the
//! lock free. An uncontended lock+unlock is 9 commands in all (two script
//! calls); each script's header says what its commands buy.
//!
//! ## Passing a wake-up on
//!
//! A waiter can be gone by the time its wake-up arrives, or leave right
//! after it arrived (cancelled, timed out). Either way nobody would attempt
//! and the others would sleep until the lease ran out. So:
//!
//! - a message naming a waiter this client no longer has is passed on
//!   (not a fair grant: see below);
//! - a waiter that leaves without the lock (its [`Registration`](crate::hub::Registration) is dropped
//!   without [`Registration::acquired`](crate::hub::Registration::acquired)) passes on.
//!
//! Passing on is the `pass` script, run by the client's [background
//! worker](crate::background):
//! remove the member from the queue and, if the lock is free, wake the next
//! head. A spurious wake-up only costs the woken waiter one attempt.
//!
//! ## The fair hand-off: a grant, then the grantee's own attempt
//!
//! A fair release makes the lock the head's (its token, a fresh fence, a
//! claim lease of [`CLAIM_MS`](crate::keys::CLAIM_MS)) and publishes
//! `"<waiter id>:<token>:g<fence>:<claim end, server µs>"`. The claim only
//! keeps everyone else out while the message travels: the waiter does not
//! return a guard on it, but attempts at once, like a woken plain waiter.
//! The attempt finds its own token, sets its lease (`PEXPIRE`) and reads
//! the fence: the confirm. Its guard's lease counts from when that attempt
//! was sent, as for every acquisition, so from the moment `lock()` returns
//! the server holds the full lease for it and the argument of "When can
//! two holders coexist?" in `lease.rs` applies unchanged. A grantee whose
//! attempt comes after the claim lapsed (its client was paused) finds the
//! lock free or another's, and takes it or queues again like any attempt.
//!
//! A guard returned on the message alone (an earlier version did, with
//! the claim as its lease until a confirm 100 ms later) would save a round
//! trip, but hold a lease of the claim's length: a holder whose runtime
//! stalled right after `lock()` lost the lock mid-section. Giving the
//! grant the full lease instead would let a grantee frozen before it read
//! the message hold the queue for a lease (see the
//! [`FairMutex`](crate::FairMutex) docs, "A guard holds its full lease from
//! the start").
//!
//! A grant read once a `lock_timeout` deadline has passed is not
//! confirmed: the waiter returns [`Error::Timeout`] and its pass-on moves
//! the grant on.
//!
//! A grant message for a waiter its client no longer has is not passed on:
//! either the waiter left without the lock, and its registration's pass-on
//! frees the grant (`fair_pass` deletes a lock holding the leaver's token),
//! or it has the lock (its attempt found the grant first and the message
//! came late), which a pass-on must not touch.
//!
//! Each waiter parks for the holder's PTTL. That is at most a claim only
//! while a grant waits for its grantee's attempt; a waiter that queued
//! behind a confirmed hold (its full lease, however short the hold turns
//! out to be) parks longer, so it marks the queue (`fair_common.lua`), and
//! grants to waiters that arrived no later send the standbys: a frozen
//! grantee is noticed by them. A hand-off between busy workers, each
//! queuing again right after its release, is then about 27 commands in
//! all (measured): the release's `GET`, `ZPOPMIN` (twice: the long-park
//! marker first), `TIME`, the probe's `PUBLISH`, the fence's `SET` (with
//! `GET`), the lock's `SET`, the grant's `PUBLISH`, and for the standbys
//! `ZADD` (the marker back), `ZCARD`, `ZRANGEBYSCORE`, the hand-off
//! marker's `SET` and two `PUBLISH`es; the grantee's attempt (the
//! confirm): `GET`, `PEXPIRE`, `ZREM`, the fence's `GET`; the releaser's
//! next attempt, which queues it: `GET`, `PTTL`, `TIME`, `ZADD`, the
//! queue's `PTTL`, and for its long park `ZSCORE` and the marker's `GET`
//! (and a `PEXPIRE` every couple of seconds); three `EVALSHA`s.
//!
//! ## What bounds each stall
//!
//! Every park ends by what it waits for, never by the longest lease in
//! sight; the holder's PTTL is only the bound while the holder lives.
//!
//! - **A holder that crashed** never releases: the park ends at its PTTL,
//!   and the waiter takes the lock within milliseconds of the expiry.
//! - **A woken waiter that is gone** (its client disconnected): PUBLISH
//!   counts 0 receivers, and the release drops it and wakes the next one, in
//!   the same script.
//! - **A woken waiter that freezes** (SIGSTOP, a GC or VM pause, a dead host
//!   whose socket stays open) still counts as a receiver. So the plain
//!   release also takes the woken member out of the queue (a live one's
//!   attempt takes the reservation, or queues it again if it came too
//!   late; the fair one pops the head it grants), and sends the **next two
//!   in line a standby** message (the fair one only while a waiter behind
//!   may park past the claim, see below)
//!   naming a window (twice the reservation for the plain mutex; the claim
//!   plus a little for the fair one): they park no longer than that, then
//!   attempt. (The plain release skips the standby of a member that parks
//!   no longer than a reservation already, its score's fraction `.5`, of
//!   a member of the woken one's own client (rare with one place per
//!   client: a member whose pass-on is still on its way), and of a member
//!   it told already: to them it would change
//!   nothing, since a standby only ever shortens a park. A member told
//!   gets the fraction `.5` too, until its next attempt queues it again.
//!   In a steady stream of hand-offs, where every releaser queues again
//!   during the reservation its release made, a hand-off thus publishes
//!   one message, or two with more than two waiting: the wake-up and the
//!   standby of the member that just became third in line.) A live woken
//!   waiter has attempted by then (they find the lock held and park
//!   again); a frozen one has not, the lock is free, and the first live
//!   standby waiter takes it. The frozen member is out of the queue (plain,
//!   and a fair grantee), or dropped by the next attempt that finds the
//!   lock free (a fair standby that missed its window), so it does not take
//!   later wake-ups either. One frozen waiter, or two in a row, at the
//!   head of the queue cost the others one window, not a lease (the
//!   Semaphore's second one a reservation more: the standby's attempt
//!   prunes the first, the permit is then owed to the second, which is
//!   woken and cut to [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS), and
//!   the standby parks until that lapses: 0.76 s measured, pool_edges.rs);
//!   a longer run of frozen waiters falls back to the parks' own bounds.
//! - **A frozen process with a pool of waiters** holds one place in the
//!   queue, whatever its number of waiting tasks (one place per client,
//!   above): the standbys of the release that woke it reach the next two
//!   *other* clients. This is where the bound of 1 s comes from, for a
//!   live waiter of another process to get the free lock after the
//!   release: the woken waiter's reservation, and the standby window that
//!   outlasts it: 2 x [`HANDOFF_MS`](crate::keys::HANDOFF_MS) = 200 ms for
//!   the Mutex; [`CLAIM_MS`] + 100 ms = 600 ms for the FairMutex (its
//!   grant's claim lapses, then the standby attempts); 2 x
//!   [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS) = 500 ms for the
//!   Semaphore (the woken member's entry lapses and the standby's attempt
//!   prunes it); plus a round trip. Measured behind a SIGSTOPped process
//!   with 32 waiting tasks: 0.20 s, 0.61 s and 0.51 s
//!   (`integration-tests/tests/pool_freeze.rs`). RwLock writers never
//!   depended on it: a writer's release is broadcast to every client.
//! - **A live process whose queuing waiter is not polled** (its future
//!   kept, not dropped) holds its place with nobody attempting for it: its
//!   oldest sibling's backup window (the same window as the standby's)
//!   ends, and the sibling takes over the turn and attempts ("One place
//!   per client", above).
//! - **A waiting writer of a read-write lock that froze** keeps its intent,
//!   which holds new readers back: the release that woke it (a writer's, or
//!   the last reader's) cuts every waiting writer's intent to
//!   [`INTENT_WINDOW_MS`](crate::keys::INTENT_WINDOW_MS); a live writer
//!   attempts at once and renews its own, a frozen one's lapses, and the
//!   readers get in.
//! - **An attempt during a hand-off reservation** parks until the
//!   reservation ends (the acquire script answers its PTTL), not for a
//!   lease.
//! - **A re-sent attempt** (a cluster client re-sends a request whose reply
//!   was lost) finds its own token and reports the acquisition again,
//!   instead of "held": the acquire scripts are idempotent.
//! - **A half-open pub/sub connection** (NAT timeout, a dead primary host)
//!   delivers nothing while releases count it as a receiver or as gone: the
//!   hub proves the connection alive with a PING every
//!   [`probe_interval`](crate::ClientBuilder::probe_interval) and treats a
//!   late answer as a lost connection (below).
//! - **A silent command connection** (the same faults): an attempt times
//!   out after the [response
//!   timeout](crate::ClientBuilder::response_timeout) `T`, `conn`
//!   replaces the socket, and the attempt is sent once more on the fresh
//!   one (`attempt`, below). With the pub/sub probe, a waiter parked
//!   through such a fault attempts again within about `T` plus 1.5 probe
//!   periods, and the client works again within 2 × `T` + 1 s (one `T` to
//!   notice, in sentinel mode one more to ask the silent node its role, a
//!   second for the fresh connection; `conn` says why a cluster takes
//!   longer).
//!
//! ## Lost messages
//!
//! Pub/sub is at-most-once. When the pub/sub connection drops (or fails its
//! liveness probe, or the primary moved), the hub reconnects with backoff,
//! resubscribes every channel that still has local waiters, and only then
//! wakes **every** waiter (a stored permit on each waiter's own
//! [`Notify`](tokio::sync::Notify), so one between two parks is not
//! missed): whatever was published while we were away, they all retry.
//! While we are away, releases find no receiver on our channels and skip
//! our members.
//!
//! ## Semaphores: several permits, the same wake-ups
//!
//! A [`Semaphore`](crate::Semaphore) runs the same loop over other scripts
//! (`sem_*.lua`; the data model is in `sem_common.lua`). Its holders are a
//! sorted set of permit tokens scored by their lease expiry in server time;
//! its queue is FIFO by arrival (a second sorted set holds each entry's
//! expiry, as for the fair mutex). With `free` permits not held, the first
//! `free` queued waiters are *owed* one: a caller at rank `r` takes a permit
//! iff `r < free`, and a newcomer counts as the back of the queue, so it
//! never takes a permit a waiter is owed. Whatever frees permits (a
//! release, expired holders reclaimed by any script, an owed waiter that
//! left or lapsed) wakes the waiters newly owed, one PUBLISH each, on their
//! clients' channels, with the same standby to the next two in line as the
//! plain mutex: a woken member's entry is cut to
//! [`SEM_RESERVE_MS`](crate::keys::SEM_RESERVE_MS), the standbys attempt
//! after twice that, and their attempt prunes a frozen woken member. As for
//! the fair mutex a waiter queues only once its wake channel is subscribed
//! (a wake-up published before would reach nobody and cost it its place).
//! A parked waiter parks until the earliest holder's lease ends at the
//! latest: that is when a crashed holder's permit comes back, and the first
//! attempt after it reclaims the permit and wakes whoever it is owed to.
//! While permits are free but owed to members ahead, it parks no longer
//! than the earliest owed entry: a frozen owed member's lapses a
//! reservation after its wake-up, and nobody else would tell the waiter
//! (a newcomer gets no standby); its attempt then prunes the member and
//! takes the permit.
//!
//! ## The timings
//!
//! Beside the loop: [`QUEUE_GRACE_MS`] (how long a queue entry outlives the
//! PTTL it parks on) and [`MAX_PARK`] (the cap on any single park). Shared
//! with the scripts' callers, in [`keys`](crate::keys):
//! [`HANDOFF_MS`](crate::keys::HANDOFF_MS) (the plain release's reservation
//! for the woken waiter) and [`CLAIM_MS`](crate::keys::CLAIM_MS) (a fair
//! grant's claim lease, until its grantee's attempt confirms it). The
//! standby windows are the scripts' own
//! (`wake_next.lua`, `fair_common.lua`), carried in the message.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::Error;
use crate::client::Client;
use crate::guard::Held;
use crate::keys::{Kind, LockKeys, Replication, lease_ms, millis};
use crate::lease::{Lease, Renewal};
use crate::scripts::{self, Acquire, Queue};
use crate::stats::{Counters, Outcome};

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
    /// first call that needs the keys).
    keys: Result<Arc<LockKeys>, (String, &'static str)>,
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
        let keys = match client.keys(name, kind) {
            Ok(keys) => Ok(Arc::new(keys)),
            Err(Error::InvalidName { name, reason }) => Err((name, reason)),
            Err(_) => Err((name.chars().take(64).collect(), "invalid name")),
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
            Ok(keys) => &keys.name,
            Err((name, _)) => name,
        }
    }

    /// Waits until acquired: the loop of the module docs.
    pub(crate) async fn lock(&self) -> Result<Held, Error> {
        self.observed(self.wait(None)).await
    }

    /// Runs one acquisition (`lock` or `lock_timeout`), counting how it
    /// ended (a drop before the end counts as cancelled) and tracing it as
    /// a `redbell.acquire` span at debug level (lock, kind, outcome, fence,
    /// wait in µs).
    async fn observed(
        &self,
        acquisition: impl Future<Output = Result<Held, Error>>,
    ) -> Result<Held, Error> {
        let span = tracing::debug_span!(
            "redbell.acquire",
            lock = %self.name(),
            kind = ?self.kind,
            outcome = tracing::field::Empty,
            fence = tracing::field::Empty,
            waited_us = tracing::field::Empty,
        );
        let mut tally = Tally::new(self, span.clone());
        let result = acquisition.instrument(span).await;
        tally.end(match &result {
            Ok(held) => {
                tally.span.record("fence", held.fence);
                Outcome::Acquired
            }
            Err(Error::Timeout) => Outcome::Timeout,
            Err(e) => {
                tally.counters.failed(e, self.name());
                Outcome::Error
            }
        });
        result
    }

    /// The wait loop itself; `deadline` is `lock_timeout`'s (a fair grant
    /// read after it is not taken).
    async fn wait(&self, deadline: Option<Instant>) -> Result<Held, Error> {
        let keys = self.keys()?;
        self.max_hold.map(lease_ms).transpose()?; // zero or over-long
        let lease_ms = self.lease_ms()?;
        let config = &self.client.0.config;
        let hub = &self.client.0.hub;
        // Joining the hub is local; the first attempt is the whole cost of an
        // uncontended lock: one round trip, no SUBSCRIBE.
        let token = self.client.0.tokens.next(keys.kind);
        let (mut registration, mut subscribed) = hub.join(&keys, &token);
        let waiter = registration.waiter();
        let member = registration.member().to_owned();
        let mut queue = Queue {
            member: &member,
            grace_ms: QUEUE_GRACE_MS,
            park_ms: millis(config.max_park),
            arrival_us: None,
        };
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
            let queuing = (turn
                && (subscribed || !matches!(keys.kind, Kind::Fair | Kind::Semaphore)))
            .then_some(queue);
            if queuing.is_some() {
                registration.queued();
            }
            // Boxed, as the SUBSCRIBE below: a future is as big as its
            // biggest await point, and the script call's (redis-rs, the
            // recovery of a lost reply) is ~10 KB, which every parked
            // waiter would carry while it waits for nothing but a Notify.
            // Boxed, it lives only during the call; a parked waiter costs
            // ~1 KB instead of ~15 KB (`redbell-bench scale`,
            // `tests/parked_memory.rs`).
            let attempt = Box::pin(self.attempt(&keys, &token, lease_ms, queuing));
            let pttl = match attempt.await? {
                Ok(held) => {
                    registration.acquired();
                    return Ok(held);
                }
                Err((pttl, server_us)) => {
                    if !turn && queue.arrival_us.is_none() {
                        // Its arrival at the server (the FIFO kinds answer
                        // with their time): its turn queues it by this.
                        queue.arrival_us = server_us;
                    }
                    pttl
                }
            };
            if !subscribed {
                // A release before the SUBSCRIBE was confirmed reached no
                // one here: subscribe, then attempt again before parking.
                Box::pin(hub.subscribe(&registration)).await?;
                subscribed = true;
                continue;
            }
            if parked.is_none() {
                parked = Some(Parked::new(&self.client.0.counters));
            }
            // Capped so a foreign key with an absurd expiry cannot overflow
            // the clock; a day-long park still costs nothing.
            let park = pttl.unwrap_or(config.max_park).min(MAX_PARK);
            let bound = Instant::now() + park;
            let mut until = bound;
            // A backup window runs: the client's queuer was asked to
            // attempt (see "One place per client").
            let mut backup = false;
            loop {
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep_until(until) => {
                        if backup && !registration.take_over() {
                            // The queuer attempted: it is live, and this
                            // waiter parks on as before, no call sent.
                            backup = false;
                            until = bound;
                            continue;
                        }
                        break;
                    }
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
                    until = until.min(Instant::now() + window);
                    notified.set(waiter.notify.notified());
                    notified.as_mut().enable();
                    continue;
                }
                let Some(window) = waiter.take_standby() else {
                    break;
                };
                // The waiter ahead was just woken (or granted the lock): if
                // it is frozen, this waiter must notice.
                until = until.min(Instant::now() + window);
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
            Some(deadline) => {
                self.observed(async {
                    tokio::time::timeout_at(deadline, self.wait(Some(deadline)))
                        .await
                        .unwrap_or(Err(Error::Timeout))
                })
                .await
            }
            None => self.lock().await, // a deadline past the end of time
        }
    }

    /// One attempt that never waits, queues or subscribes.
    pub(crate) async fn try_lock(&self) -> Result<Option<Held>, Error> {
        let mut tally = Tally::new(self, tracing::Span::none());
        let result = self.try_once().await;
        tally.end(match &result {
            Ok(Some(_)) => Outcome::Acquired,
            Ok(None) => Outcome::Busy,
            Err(e) => {
                tally.counters.failed(e, self.name());
                Outcome::Error
            }
        });
        result
    }

    async fn try_once(&self) -> Result<Option<Held>, Error> {
        let keys = self.keys()?;
        self.max_hold.map(lease_ms).transpose()?; // zero or over-long
        let lease_ms = self.lease_ms()?;
        Ok(self
            .attempt(&keys, &self.client.0.tokens.next(keys.kind), lease_ms, None)
            .await?
            .ok())
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
    ) -> Result<Result<Held, (Option<Duration>, Option<u64>)>, Error> {
        let inner = &self.client.0;
        let sent = Instant::now();
        let mut in_flight = InFlight {
            client: &self.client,
            keys,
            token: Some(token),
        };
        let mut result =
            scripts::acquire(&inner.conn, keys, token, lease_ms, queue, self.replication).await;
        if let Err(Error::Redis(e)) = &result
            && e.is_timeout()
            && inner.conn.recover(sent).await
        {
            // The connection stopped answering, and a fresh one replaced
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
        }
        match result {
            Ok((Acquire::Acquired { .. }, Some(acked)))
                if self.replication.is_some_and(|r| acked < r.replicas) =>
            {
                // Not known to survive a failover: give it back, and say so.
                // Should the release fail, the in-flight guard retries it.
                scripts::release(&inner.conn, keys, token).await?;
                in_flight.token = None;
                Err(Error::NotReplicated {
                    acked,
                    wanted: self.replication.map_or(0, |r| r.replicas),
                })
            }
            Ok((Acquire::Acquired { fence }, _)) => {
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
            Ok((Acquire::Held { pttl_ms, server_us }, _)) => {
                in_flight.token = None;
                Ok(Err((pttl_ms.map(Duration::from_millis), server_us)))
            }
            Err(
                e @ (Error::WrongType { .. }
                | Error::KindConflict { .. }
                | Error::PermitsMismatch { .. }),
            ) => {
                in_flight.token = None; // the script wrote nothing
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
    ) -> Held {
        let counters = &self.client.0.counters;
        lease.observe(counters.clone(), keys.clone());
        counters.guards(1);
        Held {
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
        let keys = self
            .keys
            .clone()
            .map_err(|(name, reason)| Error::InvalidName { name, reason })?;
        if keys.kind == Kind::Semaphore && keys.permits == 0 {
            return Err(Error::InvalidPermits {
                name: keys.name.chars().take(64).collect(),
                permits: 0,
                reason: "a semaphore needs at least one permit",
            });
        }
        Ok(keys)
    }
}

/// Counts one acquisition's outcome when it ends, or as cancelled when its
/// future is dropped first.
struct Tally<'a> {
    counters: &'a Counters,
    /// The lock's name (a label of the metrics, when asked for).
    name: &'a str,
    kind: Kind,
    started: Instant,
    span: tracing::Span,
    ended: bool,
}

impl<'a> Tally<'a> {
    fn new(acquirer: &'a Acquirer, span: tracing::Span) -> Tally<'a> {
        Tally {
            counters: &acquirer.client.0.counters,
            kind: acquirer.kind,
            name: match &acquirer.keys {
                Ok(keys) => &keys.name,
                Err((name, _)) => name,
            },
            started: Instant::now(),
            span,
            ended: false,
        }
    }

    fn end(&mut self, outcome: Outcome) {
        self.ended = true;
        let waited = self.started.elapsed();
        self.counters
            .acquisition(self.kind, outcome, waited, self.name);
        self.span.record("outcome", format_args!("{outcome:?}"));
        self.span.record(
            "waited_us",
            u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
        );
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.end(Outcome::Cancelled);
        }
    }
}

/// Counts a waiter in the client's `waiters` gauge while it lives.
struct Parked<'a>(&'a Counters);

impl<'a> Parked<'a> {
    fn new(counters: &'a Counters) -> Parked<'a> {
        counters.waiters(1);
        Parked(counters)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.waiters(-1);
    }
}

/// Where a client's owner tokens come from: the kind's tag letter (see
/// [`Kind::token_tag`]), then 32 hex digits, unique across processes and
/// clients.
///
/// The first 16 digits are random, drawn once per client; the last 16 are
/// the client's counter through a bijection (so two distinct counts never
/// give the same digits). A forked child cannot go on using its parent's
/// client (its runtime and connections stay with the parent), so a client
/// it builds draws a seed of its own. A token only has to be unique, not
/// secret (`status` shows it to anyone who can read the key), and this
/// costs no system call per acquisition: a random UUID each time did
/// (`getrandom`), and so did mixing in the process id (`getpid`).
#[derive(Debug)]
pub(crate) struct Tokens {
    seed: u64,
    count: AtomicU64,
}

impl Tokens {
    pub(crate) fn new() -> Tokens {
        Tokens {
            seed: uuid::Uuid::new_v4().as_u64_pair().0,
            count: AtomicU64::new(0),
        }
    }

    /// A fresh owner token for a lock of this kind.
    pub(crate) fn next(&self, kind: Kind) -> String {
        let count = self.count.fetch_add(1, Ordering::Relaxed);
        format!("{}{:016x}{:016x}", kind.token_tag(), self.seed, mix(count))
    }
}

/// The splitmix64 finalizer: a bijection on `u64` that scatters nearby
/// inputs.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
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
    fn tokens_are_unique_and_tagged_with_their_kind() {
        let tokens = Tokens::new();
        let (a, b) = (tokens.next(Kind::Plain), tokens.next(Kind::Plain));
        assert_ne!(a, b);
        assert_eq!(a.len(), 33);
        assert!(a.starts_with('m'));
        assert!(a[1..].chars().all(|c| c.is_ascii_hexdigit()));
        for kind in [Kind::Fair, Kind::Read, Kind::Write] {
            assert!(tokens.next(kind).starts_with(kind.token_tag()));
        }
        let many: std::collections::HashSet<String> =
            (0..10_000).map(|_| tokens.next(Kind::Plain)).collect();
        assert_eq!(many.len(), 10_000);
        // Another client draws another seed (the 16 digits after the tag).
        let other = Tokens::new().next(Kind::Plain);
        assert_ne!(other[..17], a[..17]);
    }
}
