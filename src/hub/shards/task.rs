//! The work of one subscription task of [`Shards`](super::Shards).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use tokio::time::Instant;

use super::Why;
use crate::hub::pubsub::{self, Socket};

/// Per primary: when the last keyed read to it that went through began
/// (see [`keyed_read`]).
pub(super) type Keyed = tokio::sync::Mutex<Option<Instant>>;

/// How many keyed reads go alongside one another at most, over all
/// primaries (see [`keyed_read`]). A failover that meets a wave's reads
/// answers each in flight with `MOVED`: 32 at once (one primary's) and
/// 16 (two primaries' together) were seen to leave redis-rs's connection
/// answering nothing, 8 never; fewer make a wave slower.
pub(super) const ALONGSIDE: usize = 8;

/// What a subscription task's keyed read is gated by (see [`keyed_read`]).
pub(super) struct Gate {
    /// The channel's primary's.
    pub(super) keyed: Arc<Keyed>,
    /// The connection's, shared by every primary: the reads that go
    /// alongside one another.
    pub(super) alongside: Arc<tokio::sync::Semaphore>,
    /// When the task was started.
    pub(super) started: Instant,
}

/// The work of one subscription task: SSUBSCRIBE `channel`, with the checks
/// that `why` asks for (see the [`shards`](super) docs), each bounded by
/// `timeout`; its keyed read passing `gate`.
/// Once subscribed, the connection that holds the subscription, when it
/// can tell. A recovery's checks are not needed for its subscription: one
/// that fails or is late only leaves the connection unknown.
pub(super) async fn subscribe(
    conn: &ClusterConnection,
    channel: &str,
    why: &Why,
    timeout: Duration,
    gate: &Gate,
) -> Result<Option<Socket>, String> {
    match why {
        Why::Asked => {
            within(timeout, conn.clone().ssubscribe(channel)).await?;
            Ok(None)
        }
        Why::Recover => {
            // The slot map checked first, so that a demoted primary does
            // not count as the slot's; then the connection just before and
            // just after: when they agree, the SSUBSCRIBE went to it.
            let mut before_conn = conn.clone();
            let before = within(timeout / 2, async move {
                keyed_read(&mut before_conn, channel, gate).await?;
                pubsub::socket_of(&mut before_conn, channel).await
            })
            .await
            .ok();
            within(timeout, conn.clone().ssubscribe(channel)).await?;
            let after = socket_within(conn.clone(), channel, timeout / 2).await;
            Ok(after.filter(|after| before.as_ref() == Some(after)))
        }
        Why::Recheck(_) => {
            let mut checked = conn.clone();
            within(timeout, async move {
                keyed_read(&mut checked, channel, gate).await?;
                checked.ssubscribe(channel).await
            })
            .await?;
            Ok(socket_within(conn.clone(), channel, timeout / 2).await)
        }
    }
}

/// [`pubsub::check_owner`] for `channel`, through `gate`: alone, until
/// one keyed read to the channel's primary begun since the task was
/// started has gone through; then alongside the others, at most
/// [`ALONGSIDE`] at a time over all primaries. So after a failover the
/// first read's `MOVED` refreshes the slot map and connects to the new
/// primary while the wave's other reads wait, and they then go straight
/// there, many at a time: a wave of thousands of channels costs hundreds
/// of round trips in a row, not thousands. The bound is for a failover
/// that comes after the first read went through: the reads then in flight
/// all meet it, and get `MOVED` at once.
async fn keyed_read(
    conn: &mut ClusterConnection,
    channel: &str,
    gate: &Gate,
) -> redis::RedisResult<()> {
    let mut last = gate.keyed.lock().await;
    if last.is_some_and(|began| began >= gate.started) {
        drop(last);
        // Never closed, so a permit always comes.
        let _permit = gate.alongside.acquire().await.ok();
        return pubsub::check_owner(conn, channel).await;
    }
    let began = Instant::now();
    pubsub::check_owner(conn, channel).await?;
    *last = Some(began);
    Ok(())
}

/// [`pubsub::socket_of`], `None` when it fails or takes longer than `timeout`.
async fn socket_within(
    mut conn: ClusterConnection,
    channel: &str,
    timeout: Duration,
) -> Option<Socket> {
    within(timeout, pubsub::socket_of(&mut conn, channel))
        .await
        .ok()
}

/// `work`, failed as "timed out" when it takes longer than `timeout`.
async fn within<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}
