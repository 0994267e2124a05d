//! [`Observer`]: the stream of an election's leader changes.
//!
//! # Implementation details
//!
//! Each observer has a pub/sub connection of its own (observers are few;
//! the hub's channels route wake-ups to single waiters, which is not what
//! a broadcast wants), subscribed to `P:{N}:leader:events` (SSUBSCRIBE on a
//! cluster, where the scripts SPUBLISH). Its task:
//!
//! ```text
//! loop {
//!     connect, SUBSCRIBE (confirmed)        a change from here on is not missed
//!     read the leader (elect_leader)        then yield it if it differs
//!     loop {
//!         event        -> apply it (newer than what was seen?) and yield
//!         leader PTTL  -> read again         a lapsed lease publishes nothing
//!         probe        -> PING; no answer in time: start over
//!         disconnected -> start over         whatever was missed, the read catches up
//!     }
//! }
//! ```
//!
//! - **Events carry the new state.** `elected` and `proclaimed` carry the
//!   term, the value's revision, the lease's PTTL and the value; `resigned`
//!   the term that ended. One server publishes in the order the scripts
//!   ran, so applying them needs no read.
//! - **Never a stale leader.** What was applied last is remembered as
//!   `(term, revision)`, and the highest term known to have ended; an
//!   event not newer than both (one queued before the read that already
//!   reflected it) is ignored. A read is the truth of its instant and is
//!   always applied; a read finding no leader also says which terms have
//!   ended (the leader key keeps the last term).
//! - **No polling while a leader lives.** Between events the task parks
//!   until the leader's PTTL (plus a millisecond), then reads once: a
//!   renewed lease gives a new PTTL and the same leader (nothing yielded),
//!   an expired one is reported within milliseconds of its expiry. With no
//!   leader and a free lock there is nothing to time: the next leader's
//!   `elected` ends the park. A holder that is not yet a leader is timed
//!   like a leader, in case it crashed before proclaiming.
//! - **Reconnects.** A lost connection (`CLIENT KILL`, a failover, a
//!   failed probe) is reconnected 0 to 50 ms later, at random (a fleet that
//!   lost its connections together does not come back in lockstep), then
//!   with a jittered backoff (50 ms up to 1 s, `backoff.rs`); the read
//!   after the new SUBSCRIBE catches up on anything missed.
//!   An outage is yielded as one `Err` item, then the stream goes on.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::Stream;

use super::{Leader, Names};
use crate::Error;
use crate::backoff::Backoff;
use crate::client::Client;
use crate::hub::pubsub::{self, Event};
use crate::scripts::{self, Reading};
use crate::task::AbortOnDrop;

/// How often the observer's connection is proven alive by a PING; an
/// answer later than half of this counts as a lost connection.
const PROBE: Duration = Duration::from_secs(1);

/// The longest wait between two reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The shortest delay between two reconnect attempts.
const MIN_BACKOFF: Duration = Duration::from_millis(50);

/// The stream of an election's leader, from [`Election::observe`]: first
/// the current leader (`None`: nobody leads), then every change, as it
/// happens.
///
/// - A new leader, or a new [proclaimed](crate::Leadership::proclaim)
///   value, arrives within a round trip of the change (it is published by
///   the script that made it); so does a resignation.
/// - A leader whose lease ran out (it crashed, or was cut off) publishes
///   nothing: the observer parks until the leader's remaining lease ends and
///   reads again, so the loss is reported within milliseconds of the
///   expiry. It does not poll while the leader lives.
/// - It may skip intermediate values when changes come faster than it is
///   read, but never yields a stale leader once the change is known, and
///   terms only grow.
/// - After its pub/sub connection was lost it reconnects and reads the
///   current leader again, so a change missed meanwhile is caught up on
///   within the reconnect. Redis being unreachable is yielded as one
///   `Err(`[`Error::Redis`]`)` per outage; the stream goes on.
///
/// The stream ends only for an invalid name ([`Error::InvalidName`], then
/// the end) or outside a Tokio runtime ([`Error::Closed`]). Dropping it
/// closes its connection.
///
/// ```no_run
/// use tokio_stream::StreamExt;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redbell::Error> {
/// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
/// let mut leaders = client.election("scheduler").observe();
/// while let Some(leader) = leaders.next().await {
///     match leader? {
///         Some(leader) => println!("term {}: {}", leader.term, leader.value),
///         None => println!("no leader"),
///     }
/// }
/// # Ok(())
/// # }
/// ```
///
/// [`Election::observe`]: crate::Election::observe
#[derive(Debug)]
pub struct Observer {
    rx: mpsc::Receiver<Item>,
    /// The task reading the election; `None` when it never started.
    _task: Option<AbortOnDrop>,
}

type Item = Result<Option<Leader>, Error>;

impl Observer {
    pub(super) fn start(client: Client, names: Arc<Names>) -> Observer {
        let (tx, rx) = mpsc::channel(64);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(run(client, names, tx));
                Observer {
                    rx,
                    _task: Some(AbortOnDrop(task)),
                }
            }
            Err(_) => {
                let _ = tx.try_send(Err(Error::Closed));
                Observer { rx, _task: None }
            }
        }
    }

    pub(super) fn failed(error: Error) -> Observer {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(Err(error));
        Observer { rx, _task: None }
    }
}

impl Stream for Observer {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        self.rx.poll_recv(cx)
    }
}

/// What the observer has seen and yielded.
#[derive(Debug, Default)]
struct View {
    /// The leader last yielded; `None` before the first item too.
    yielded: Option<Option<Leader>>,
    /// The current leader as applied.
    current: Option<Leader>,
    /// `(term, revision)` of the newest leader state applied.
    seen: (u64, u64),
    /// The highest term known to have ended.
    ended: u64,
    /// When to read again: the current leader's (or holder's) lease end.
    recheck: Option<Instant>,
}

impl View {
    /// Applies a read: the truth of its instant.
    fn read(&mut self, reading: Reading, max_park: Duration) {
        match reading {
            Reading::Leader {
                term,
                rev,
                pttl_ms,
                value,
            } => {
                self.seen = self.seen.max((term, rev));
                self.current = Some(Leader { term, value });
                self.recheck = Some(recheck(pttl_ms, max_park));
            }
            Reading::Vacant {
                holder_pttl_ms,
                ended,
            } => {
                self.ended = self.ended.max(ended);
                self.current = None;
                self.recheck = holder_pttl_ms.map(|p| recheck(Some(p), max_park));
            }
        }
    }

    /// Applies a published event; returns `false` for one it cannot read
    /// (then the caller reads instead).
    fn event(&mut self, payload: &[u8], max_park: Duration) -> bool {
        let text = String::from_utf8_lossy(payload);
        let mut parts = text.splitn(5, ':');
        let kind = parts.next().unwrap_or("");
        let term = parts.next().and_then(|t| t.parse::<u64>().ok());
        match (kind, term) {
            ("elected" | "proclaimed", Some(term)) => {
                let rev = parts.next().and_then(|r| r.parse::<u64>().ok());
                let pttl = parts.next().and_then(|p| p.parse::<i64>().ok());
                let (Some(rev), Some(pttl), Some(value)) = (rev, pttl, parts.next()) else {
                    return false;
                };
                if term <= self.ended || (term, rev) <= self.seen {
                    return true; // older than what was applied
                }
                self.seen = (term, rev);
                self.current = Some(Leader {
                    term,
                    value: value.to_owned(),
                });
                self.recheck = Some(recheck(u64::try_from(pttl).ok(), max_park));
                true
            }
            ("resigned", Some(term)) => {
                self.ended = self.ended.max(term);
                if self.current.as_ref().is_some_and(|c| c.term <= term) {
                    self.current = None;
                    // The resigner still holds the lock for a moment; its
                    // release wakes the next campaigner, whose `elected`
                    // ends the park.
                    self.recheck = None;
                }
                true
            }
            _ => false,
        }
    }

    /// The item to yield, if the current leader differs from the last one
    /// yielded.
    fn change(&mut self) -> Option<Option<Leader>> {
        if self.yielded.as_ref() == Some(&self.current) {
            return None;
        }
        self.yielded = Some(self.current.clone());
        Some(self.current.clone())
    }
}

/// When to read again for a lease with `pttl_ms` left (`None`: no expiry).
fn recheck(pttl_ms: Option<u64>, max_park: Duration) -> Instant {
    let park = pttl_ms.map_or(max_park, |ms| Duration::from_millis(ms.saturating_add(1)));
    Instant::now() + park.min(Duration::from_secs(24 * 3600))
}

/// The observer's task: the loop of the module docs. Ends when the
/// [`Observer`] is dropped (or an error is permanent).
async fn run(client: Client, names: Arc<Names>, tx: mpsc::Sender<Item>) {
    let conn = &client.0.conn;
    let timeout = client.0.config.response_timeout;
    let max_park = client.0.config.max_park;
    let mut view = View::default();
    // Zero: connect at once; else the delay before the next attempt.
    let mut delay = Duration::ZERO;
    let mut backoff = Backoff::new(MIN_BACKOFF, MAX_BACKOFF);
    let mut outage = false;
    let channel = vec![names.channel.clone()];
    loop {
        if !delay.is_zero() {
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            if let Err(e) = conn.resolve().await {
                tracing::debug!(error = %e, "could not resolve the primary");
            }
        }
        delay = backoff.next_delay();
        let connected = async {
            let (mut sink, stream) = pubsub::connect(conn, timeout).await?;
            match tokio::time::timeout(timeout, sink.subscribe(&channel)).await {
                Ok(subscribed) => subscribed?,
                Err(_) => return Err(timed_out("SUBSCRIBE")),
            }
            let reading = scripts::leader(conn, &names.lock, &names.leader).await?;
            Ok::<_, Error>((sink, stream, reading))
        };
        let (mut sink, mut stream, reading) = match connected.await {
            Ok(connected) => connected,
            Err(e @ Error::InvalidName { .. }) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(e) => {
                tracing::debug!(election = %names.name, error = %e, "observer: cannot read the election");
                if !outage && tx.send(Err(e)).await.is_err() {
                    return;
                }
                outage = true;
                continue;
            }
        };
        outage = false;
        backoff.reset();
        // After a loss: the first attempt 0 to MIN_BACKOFF later, at random,
        // so observers that lost their connections together come back spread.
        delay = backoff.first_delay();
        view.read(reading, max_park);
        if let Some(item) = view.change()
            && tx.send(Ok(item)).await.is_err()
        {
            return;
        }
        let mut probe = tokio::time::interval_at(Instant::now() + PROBE, PROBE);
        loop {
            let recheck = view.recheck;
            let read_again = tokio::select! {
                _ = tx.closed() => return,
                event = stream.next() => match event {
                    Some(Event::Message { payload, .. }) => !view.event(&payload, max_park),
                    // Disconnected, a cluster node's socket was lost, or the
                    // server dropped the subscription (a slot moved): start
                    // over.
                    Some(Event::Unsubscribed { .. } | Event::NodeLost) | None => break,
                },
                _ = sleep_until(recheck) => true,
                _ = probe.tick() => {
                    match tokio::time::timeout(PROBE / 2, sink.ping()).await {
                        Ok(Ok(())) => false,
                        _ => break,
                    }
                }
            };
            if read_again {
                match scripts::leader(conn, &names.lock, &names.leader).await {
                    Ok(reading) => view.read(reading, max_park),
                    Err(e) => {
                        tracing::debug!(election = %names.name, error = %e, "observer: read failed; reconnecting");
                        break;
                    }
                }
            }
            if let Some(item) = view.change()
                && tx.send(Ok(item)).await.is_err()
            {
                return;
            }
        }
        tracing::debug!(election = %names.name, "observer: pub/sub connection lost; reconnecting");
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn timed_out(what: &str) -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("timed out waiting for {what}"),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARK: Duration = Duration::from_secs(1);

    fn leader(term: u64, value: &str) -> Option<Leader> {
        Some(Leader {
            term,
            value: value.to_owned(),
        })
    }

    #[tokio::test]
    async fn events_apply_in_order_and_stale_ones_are_ignored() {
        let mut view = View::default();
        view.read(
            Reading::Vacant {
                holder_pttl_ms: None,
                ended: 3,
            },
            PARK,
        );
        assert_eq!(view.change(), Some(None));
        assert!(
            view.recheck.is_none(),
            "nothing to time while the lock is free"
        );
        // An event of an ended term is stale.
        assert!(view.event(b"proclaimed:3:2:900:old", PARK));
        assert_eq!(view.change(), None);
        assert!(view.event(b"elected:5:1:30000:a:b", PARK));
        assert_eq!(view.change(), Some(leader(5, "a:b")));
        assert!(view.recheck.is_some());
        assert!(view.event(b"proclaimed:5:2:29000:c", PARK));
        assert_eq!(view.change(), Some(leader(5, "c")));
        // Queued before a read that already reflected it.
        assert!(view.event(b"proclaimed:5:2:29000:c", PARK));
        assert!(view.event(b"elected:5:1:30000:a:b", PARK));
        assert_eq!(view.change(), None);
        assert!(view.event(b"resigned:5", PARK));
        assert_eq!(view.change(), Some(None));
        assert!(view.event(b"proclaimed:5:3:100:late", PARK));
        assert_eq!(view.change(), None);
        assert!(!view.event(b"garbage", PARK));
    }

    #[tokio::test]
    async fn a_read_is_the_truth() {
        let mut view = View::default();
        assert!(view.event(b"elected:7:1:30000:x", PARK));
        assert_eq!(view.change(), Some(leader(7, "x")));
        view.read(
            Reading::Vacant {
                holder_pttl_ms: Some(10),
                ended: 7,
            },
            PARK,
        );
        assert_eq!(view.change(), Some(None));
        assert!(
            view.recheck.is_some(),
            "a holder that is not a leader is timed"
        );
        view.read(
            Reading::Leader {
                term: 9,
                rev: 1,
                pttl_ms: Some(5000),
                value: "y".into(),
            },
            PARK,
        );
        assert_eq!(view.change(), Some(leader(9, "y")));
        view.read(
            Reading::Leader {
                term: 9,
                rev: 1,
                pttl_ms: Some(30000),
                value: "y".into(),
            },
            PARK,
        );
        assert_eq!(view.change(), None, "a renewed lease is no change");
    }
}
