//! The client's background worker: releases of dropped guards and of
//! acquires cancelled in flight, resignations of dropped leaderships, and
//! wake-ups passed on by waiters that left.
//! `Drop` impls cannot await, so they hand the work to this worker.
//!
//! # Implementation details
//!
//! Work goes into a queue shared with the worker, never through a channel
//! that could fill up: [`Sender::send`] takes a short lock and never blocks
//! or awaits, so it is safe in any `Drop`.
//!
//! - **Coalesced.** Each item is known by what it does (release, pass-on or
//!   resignation, the lock, the token or queue member). An item equal to one already
//!   queued, waiting to retry or in flight is dropped: a release queued
//!   twice for one token runs once.
//! - **Bounded.** At most [`CAPACITY`] items are known at once. Beyond
//!   that Redis has been failing for long enough to pile up that many, and
//!   a new item is dropped with a warning: its lease (or, for a pass-on,
//!   the queue entry's expiry) still ends the hold by itself.
//! - **A backlog never delays later work.** Items run concurrently, each
//!   on a task of its own (one multiplexed connection pipelines them all).
//!   A failed attempt does not sleep in line: the item is put aside with
//!   the time of its next try ([`RETRY_AFTER`]: 50 ms, 250 ms, 1 s, 2 s,
//!   then it is given up), or sooner: when the client follows a failover
//!   to a new primary, every retry is due at once. First attempts and
//!   retries have separate budgets: up to [`MAX_FRESH`] first attempts in
//!   flight, and up to [`MAX_RETRYING`] retries, so work that keeps failing
//!   (a shard that does not answer, each attempt timing out) can never take
//!   the place of a new release. A new item waits only behind `MAX_FRESH`
//!   *first* attempts still in flight: when Redis is slower than guards
//!   are dropped, and then it would be as slow itself.
//! - **Lifetime.** The worker runs until every [`Sender`] is gone (the
//!   client and everything made from it) *and* the queue is empty, so the
//!   release queued by the last guard's `Drop` still runs, as long as the
//!   runtime does. A runtime that shuts down drops the worker with its
//!   queue: [`Sender::drain`] (behind `Client::shutdown`) waits for it
//!   first.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard as StdMutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;

use crate::Error;
use crate::conn::Conn;
use crate::keys::LockKeys;
use crate::scripts;
use crate::scripts::Owned;
use crate::stats::Counters;

/// Most items known (queued, waiting to retry or in flight) at once.
const CAPACITY: usize = 65_536;

/// Most first attempts in flight at once.
const MAX_FRESH: usize = 1024;

/// Most retries in flight at once (not counted in [`MAX_FRESH`]).
const MAX_RETRYING: usize = 8;

/// The wait before each retry of an item whose attempt failed with a
/// retryable error; after the last one it is given up.
const RETRY_AFTER: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// Work for the background worker.
#[derive(Clone)]
pub(crate) enum Work {
    /// Release `token` (a dropped guard, or an acquire cancelled in flight).
    Release { keys: Arc<LockKeys>, token: String },
    /// Take `member` out of the lock's queue and pass any wake-up on (a
    /// waiter left without the lock, or a wake-up reached a gone waiter).
    PassOn { keys: Arc<LockKeys>, member: String },
    /// Clear an election's leader key `leader` while it names `token`, and
    /// publish the change on `channel` (a dropped `Leadership`).
    Resign {
        keys: Arc<LockKeys>,
        leader: String,
        channel: String,
        token: String,
    },
}

/// What an item does: equal items are coalesced.
type Identity = (u8, String, String);

impl Work {
    fn identity(&self) -> Identity {
        match self {
            Work::Release { keys, token } => (0, keys.token_key().to_owned(), token.clone()),
            Work::PassOn { keys, member } => (1, keys.token_key().to_owned(), member.clone()),
            Work::Resign { leader, token, .. } => (2, leader.clone(), token.clone()),
        }
    }

    fn lock_name(&self) -> &str {
        match self {
            Work::Release { keys, .. } | Work::PassOn { keys, .. } | Work::Resign { keys, .. } => {
                keys.name()
            }
        }
    }
}

/// One item of work and its failed attempts so far.
struct Item {
    work: Work,
    failed: usize,
}

/// Where work is sent. Cloning counts a sender; the worker ends once every
/// sender is gone and the queue is empty.
pub(crate) struct Sender(Arc<WorkQueue>);

/// The queue the [`Sender`]s and the worker share.
struct WorkQueue {
    state: StdMutex<State>,
    /// Woken on new work, and when the last sender is gone.
    wake: Notify,
    /// Woken (all waiters) when the last known item is done.
    idle: Notify,
    /// Most items known at once ([`CAPACITY`], smaller in tests).
    capacity: usize,
}

#[derive(Default)]
struct State {
    /// Live [`Sender`]s.
    senders: usize,
    /// The identity of every item in `fresh`, in `retry` or in flight; an
    /// item leaves it when it succeeded or was given up. At most `capacity`.
    known: HashSet<Identity>,
    /// Items not tried yet, oldest first: each runs before any retry.
    fresh: VecDeque<Item>,
    /// Failed items, by the time they may be tried again (and a sequence
    /// number, so equal times stay distinct).
    retry: BTreeMap<(Instant, u64), Item>,
    next_seq: u64,
    /// Set while new items are being dropped for want of room (so the
    /// warning is logged once per episode, not once per item).
    full: bool,
}

impl WorkQueue {
    fn lock(&self) -> StdMutexGuard<'_, State> {
        // Every update leaves `State` consistent before anything that
        // could panic, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clone for Sender {
    fn clone(&self) -> Sender {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let last = {
            let mut state = self.0.lock();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.0.wake.notify_one();
        }
    }
}

impl Sender {
    /// Queues `work` unless an equal item is already known or the queue is
    /// full. Never blocks.
    pub(crate) fn send(&self, work: Work) {
        {
            let mut state = self.0.lock();
            let identity = work.identity();
            if state.known.contains(&identity) {
                return; // coalesced with the item already known
            }
            if state.known.len() >= self.0.capacity {
                if !state.full {
                    state.full = true;
                    tracing::warn!(lock = %work.lock_name(), queued = state.known.len(),
                        "background queue full: dropping releases and pass-ons until it drains; leases and queue expiry bound the damage");
                }
                return;
            }
            state.known.insert(identity);
            state.fresh.push_back(Item { work, failed: 0 });
        }
        self.0.wake.notify_one();
    }

    /// Resolves once no work is known: everything queued so far has
    /// succeeded or been given up.
    pub(crate) async fn drain(&self) {
        loop {
            let idle = self.0.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.0.lock().known.is_empty() {
                return;
            }
            idle.await;
        }
    }
}

/// Told of each release that found the lock ours, with its lock (the hub
/// notes it for the hand-off gap); set once the hub exists.
pub(crate) type OnReleased = Arc<OnceLock<Box<dyn Fn(&LockKeys) + Send + Sync>>>;

/// One release, as a guard's `unlock` and the worker run it: the release
/// script, counted (`held`: the hold time, `None` when the drop timed it),
/// and traced as a `redbell.release` span at debug level (lock, kind,
/// outcome `ours`, `gone` or `theirs`). Nothing is logged at `info` or
/// above.
pub(crate) async fn release(
    conn: &Conn,
    keys: &LockKeys,
    token: &str,
    counters: &Counters,
    held: Option<Duration>,
) -> Result<Owned, Error> {
    let span = tracing::debug_span!(
        "redbell.release",
        lock = %keys.name(),
        kind = ?keys.kind,
        outcome = tracing::field::Empty,
    );
    let result =
        tracing::Instrument::instrument(scripts::release(conn, keys, token), span.clone()).await;
    match &result {
        Ok(owned) => {
            span.record(
                "outcome",
                match owned {
                    Owned::Ours => "ours",
                    Owned::Gone => "gone",
                    Owned::Theirs => "theirs",
                },
            );
            counters.release((*owned).into(), held, keys.name());
        }
        Err(e) => {
            span.record("outcome", "error");
            counters.failed(e, keys.name());
        }
    }
    result
}

/// Starts the worker for the client whose command connection is `conn`.
pub(crate) fn start(conn: Conn, counters: Arc<Counters>, on_released: OnReleased) -> Sender {
    let switches = Some(conn.switches());
    start_with(CAPACITY, switches, move |work| {
        let conn = conn.clone();
        let counters = counters.clone();
        let on_released = on_released.clone();
        async move {
            match work {
                Work::Release { keys, token } => {
                    let owned = release(&conn, &keys, &token, &counters, None).await?;
                    if owned == Owned::Ours
                        && let Some(note) = on_released.get()
                    {
                        note(&keys);
                    }
                    Ok(())
                }
                Work::PassOn { keys, member } => {
                    scripts::pass(&conn, &keys, &member).await.map(drop)
                }
                Work::Resign {
                    leader,
                    channel,
                    token,
                    ..
                } => scripts::resign(&conn, &leader, &channel, &token)
                    .await
                    .map(drop),
            }
        }
    })
}

/// Starts a worker that runs each attempt with `attempt`; a notification
/// on `switches` (the connection moved to a new primary) makes every retry
/// due at once.
fn start_with<F, Fut>(capacity: usize, switches: Option<Arc<Notify>>, attempt: F) -> Sender
where
    F: Fn(Work) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let shared = Arc::new(WorkQueue {
        state: StdMutex::new(State {
            senders: 1,
            ..State::default()
        }),
        wake: Notify::new(),
        idle: Notify::new(),
        capacity,
    });
    tokio::spawn(run(shared.clone(), switches, attempt));
    Sender(shared)
}

/// The worker: start what may start, then wait for an attempt to finish,
/// new work, or the next retry time.
async fn run<F, Fut>(shared: Arc<WorkQueue>, switches: Option<Arc<Notify>>, attempt: F)
where
    F: Fn(Work) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let mut running: JoinSet<Result<(), Error>> = JoinSet::new();
    // What each running task works on, and whether it is a retry.
    let mut in_flight: HashMap<TaskId, (Item, bool)> = HashMap::new();
    let (mut fresh, mut retrying) = (0, 0);
    // One wait for the next switch, kept across the loop's turns (enabled:
    // it counts a switch from now on, polled or not). A wait made anew in
    // each `select!` would be dropped with it whenever another branch wins
    // the same wake-up (an attempt ending, new work), and the switch with
    // it: `notify_waiters` keeps nothing for later.
    let never = Notify::new(); // no switches to follow
    let switches = switches.as_deref().unwrap_or(&never);
    let switch = switches.notified();
    tokio::pin!(switch);
    switch.as_mut().enable();
    loop {
        let next_retry = {
            let mut state = shared.lock();
            let now = Instant::now();
            loop {
                // Fresh items first, each budget on its own.
                let next = if fresh < MAX_FRESH {
                    state.fresh.pop_front().map(|item| (item, false))
                } else {
                    None
                };
                let due = |state: &State| {
                    state
                        .retry
                        .first_key_value()
                        .is_some_and(|((at, _), _)| *at <= now)
                };
                let next = match next {
                    None if retrying < MAX_RETRYING && due(&state) => {
                        state.retry.pop_first().map(|(_, item)| (item, true))
                    }
                    next => next,
                };
                let Some((item, retry)) = next else {
                    break;
                };
                let task = running.spawn(attempt(item.work.clone()));
                if retry {
                    retrying += 1;
                } else {
                    fresh += 1;
                }
                in_flight.insert(task.id(), (item, retry));
            }
            if in_flight.is_empty() && state.known.is_empty() && state.senders == 0 {
                return; // nobody can send more, and all is done
            }
            // While the retry budget is spent, the next finished retry (not
            // a timer) is what frees it.
            state
                .retry
                .first_key_value()
                .map(|((at, _), _)| *at)
                .filter(|_| retrying < MAX_RETRYING)
        };
        tokio::select! {
            Some(done) = running.join_next_with_id(), if !running.is_empty() => {
                let (id, result) = match done {
                    Ok((id, result)) => (id, result),
                    Err(e) => (e.id(), Err(Error::Closed)), // panicked or cancelled
                };
                if let Some((item, retry)) = in_flight.remove(&id) {
                    if retry {
                        retrying -= 1;
                    } else {
                        fresh -= 1;
                    }
                    finished(&shared, item, result);
                }
            }
            _ = shared.wake.notified() => {}
            _ = sleep_until_some(next_retry) => {}
            () = switch.as_mut() => {
                // The next switch is counted from here on.
                switch.set(switches.notified());
                switch.as_mut().enable();
                retry_now(&shared);
            }
        }
    }
}

/// Makes every retry due now (in their order): the work that failed while
/// the primary was down or demoted runs as soon as the client has moved to
/// the new one, not up to [`RETRY_AFTER`]'s 2 s later (a `redbell run` that
/// failed during a failover waits for its background work before exiting).
fn retry_now(shared: &WorkQueue) {
    let mut state = shared.lock();
    let now = Instant::now();
    let retry = std::mem::take(&mut state.retry);
    state.retry = retry
        .into_iter()
        .map(|((at, seq), item)| ((at.min(now), seq), item))
        .collect();
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Records the outcome of one attempt at `item`: done, or put aside for a
/// retry.
fn finished(shared: &WorkQueue, mut item: Item, result: Result<(), Error>) {
    let mut state = shared.lock();
    match result {
        Err(e) if e.is_retryable() && item.failed < RETRY_AFTER.len() => {
            let at = Instant::now() + RETRY_AFTER[item.failed];
            item.failed += 1;
            let seq = state.next_seq;
            state.next_seq += 1;
            state.retry.insert((at, seq), item);
            return;
        }
        Err(e) => {
            tracing::warn!(lock = %item.work.lock_name(), error = %e, attempts = item.failed + 1,
                "background release or pass-on failed; leases and queue expiry bound the damage");
        }
        Ok(()) => {}
    }
    state.known.remove(&item.work.identity());
    state.full &= state.known.len() >= shared.capacity / 2;
    if state.known.is_empty() {
        shared.idle.notify_waiters();
    }
}

#[cfg(test)]
mod tests;
