//! The work of one subscription task of [`Shards`](super::Shards).

use std::time::Duration;

use redis::cluster_async::ClusterConnection;

use super::Why;
use crate::hub::pubsub::{self, Socket};

/// The work of one subscription task: SSUBSCRIBE `channel`, with the checks
/// that `why` asks for (see the [`shards`](super) docs), each bounded by
/// `timeout`; its keyed read holding `keyed`.
/// Once subscribed, the connection that holds the subscription, when it
/// can tell. A recovery's checks are not needed for its subscription: one
/// that fails or is late only leaves the connection unknown.
pub(super) async fn subscribe(
    conn: &ClusterConnection,
    channel: &str,
    why: &Why,
    timeout: Duration,
    keyed: &tokio::sync::Mutex<()>,
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
                let one = keyed.lock().await;
                pubsub::check_owner(&mut before_conn, channel).await?;
                drop(one);
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
                let one = keyed.lock().await;
                pubsub::check_owner(&mut checked, channel).await?;
                drop(one);
                checked.ssubscribe(channel).await
            })
            .await?;
            Ok(socket_within(conn.clone(), channel, timeout / 2).await)
        }
    }
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
