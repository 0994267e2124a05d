//! Following a failover as the sentinels announce it.
//!
//! Errors are not enough: after a failover the old primary still answers as
//! a primary until the sentinels convert it to a replica, 8 s or more
//! later, and a client that stays on it grants locks the new primary never
//! hears of. So the client also subscribes to every sentinel's
//! `+switch-master` and re-resolves the moment one announces a new primary
//! ([`follow_switches`]). An announcement made while the client was not
//! listening is missed, so the first subscriptions are made before the
//! client first asks for the primary, and every later one (after a lost
//! connection to a sentinel) is followed by a re-resolution. Sentinels tell
//! each other of a failover only every 2 s, so a re-resolution asks them
//! all at once and takes the answer with the newest configuration epoch,
//! never going back to an older one; it does not wait for a sentinel that
//! is slow to answer once the answers in hand decide it (`sentinel.rs`).

use std::pin::Pin;
use std::sync::Weak;
use std::time::Duration;

use redis::RedisResult;
use tokio_stream::{Stream, StreamExt};

use super::{Conn, Inner, Source};
use crate::backoff::Backoff;

/// One sentinel's `+switch-master` announcements, from a subscription.
pub(super) type Switches = Pin<Box<dyn Stream<Item = redis::Msg> + Send>>;

/// How long a subscription to a sentinel may take.
pub(super) fn subscribe_timeout(connect_timeout: Duration) -> Duration {
    connect_timeout.max(Duration::from_secs(1))
}

/// Subscribes to `sentinel`'s `+switch-master`; `None` when it cannot be
/// reached in `timeout`.
pub(super) async fn subscribe_switches(
    sentinel: &redis::Client,
    timeout: Duration,
) -> Option<Switches> {
    let subscribed = async {
        let mut pubsub = sentinel.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        RedisResult::Ok(Box::pin(pubsub.into_on_message()) as Switches)
    };
    tokio::time::timeout(timeout, subscribed).await.ok()?.ok()
}

/// Follows one sentinel's `+switch-master` announcements, so the client
/// moves to a new primary as soon as a sentinel announces it rather than on
/// its next command error. After a failover the old primary still answers
/// as a primary until the sentinels convert it to a replica (seconds
/// later); a client left on it would keep granting locks that the new
/// primary knows nothing of. `first` is the subscription made before the
/// client first asked for the primary. Reconnects with a backoff while the
/// sentinel is unreachable (100 ms to 5 s, jittered), and after each new subscription re-resolves
/// once (what was announced while nobody listened is missed); ends when the
/// `Conn` is gone.
pub(super) async fn follow_switches(
    conn: Weak<Inner>,
    sentinel: redis::Client,
    mut first: Option<Switches>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let (switches, fresh) = match first.take() {
            Some(switches) => (Some(switches), false),
            None => {
                let timeout = match conn.upgrade() {
                    Some(inner) => subscribe_timeout(inner.connect_timeout),
                    None => return,
                };
                (subscribe_switches(&sentinel, timeout).await, true)
            }
        };
        if let Some(mut messages) = switches {
            backoff.reset();
            if fresh {
                let Some(inner) = conn.upgrade() else { return };
                if let Err(e) = Conn(inner).resolve().await {
                    tracing::debug!(error = %e, "could not re-resolve the primary after re-subscribing");
                }
            }
            while let Some(message) = messages.next().await {
                let Some(inner) = conn.upgrade() else { return };
                let payload: String = message.get_payload().unwrap_or_default();
                let Source::Sentinel(sentinels) = &inner.source else {
                    return;
                };
                if sentinels.announces_ours(&payload) {
                    tracing::info!(announced = %payload, "a sentinel announced a new primary");
                    let conn = Conn(inner);
                    // The announcing sentinel has the newest configuration;
                    // the others may not have heard yet, so ask again for a
                    // while if they still name the old primary.
                    for _ in 0..20 {
                        match conn.resolve().await {
                            Ok(true) => break,
                            _ => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                }
            }
        }
        if conn.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}
