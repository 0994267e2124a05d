//! Plain connections: to a URL, and one command to a node by port.

use std::time::Duration;

use redis::FromRedisValue;
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

use crate::{Error, Result, node_url};

/// A multiplexed connection to `url`, with a 2 s connection timeout and a
/// 5 s response timeout (a server behind a fault never hangs the caller).
///
/// # Errors
///
/// When the URL is bad or the server cannot be reached.
pub async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client =
        redis::Client::open(url).map_err(|e| Error::new(format!("bad Redis URL {url}: {e}")))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| Error::new(format!("cannot connect to {url}: {e}")))
}

/// `cmd` to 127.0.0.1:`port` on a fresh connection ([`connect`]).
///
/// # Errors
///
/// When the node cannot be reached or answers with an error.
pub async fn command<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T> {
    let mut conn = connect(&node_url(port)).await?;
    cmd.query_async(&mut conn)
        .await
        .map_err(|e| Error::new(format!("node {port}: {e}")))
}

/// [`command`] that tolerates the node being down: `None` when it cannot be
/// reached, answers with an error, or takes over 2 s.
pub async fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    timeout(Duration::from_secs(2), command(port, cmd))
        .await
        .ok()
        .and_then(Result::ok)
}

/// One field of a `field:value` listing (`INFO`, `CLUSTER INFO`).
pub fn info_field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (n, v) = line.trim_end().split_once(':')?;
        (n == name).then(|| v.to_owned())
    })
}

/// One field of `INFO replication` on 127.0.0.1:`port` (`role`,
/// `master_link_status`, ...); `None` when it cannot be read.
pub async fn replication_field(port: u16, name: &str) -> Option<String> {
    let text: String = query(port, redis::cmd("INFO").arg("replication")).await?;
    info_field(&text, name)
}

/// Polls `check` every `every` until it holds or `within` has passed;
/// whether it held.
pub async fn poll_until<F, Fut>(within: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}
