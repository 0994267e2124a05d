//! Commands to one node of a cluster, by port: on a fresh connection, and
//! a read may go to a replica.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Value};

use crate::{Monitor, POLL, eventually_every, hash_tag, node_url, query};

/// A plain connection to one node.
///
/// # Panics
///
/// When the node cannot be reached.
pub async fn conn(port: u16) -> MultiplexedConnection {
    redis::Client::open(node_url(port))
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to node {port}: {e}"))
}

/// One command to node `port` that must succeed.
///
/// # Panics
///
/// When it fails.
pub async fn must<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut c = conn(port).await;
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("node {port}: {cmd:?}: {e}"))
}

/// A read on a node that may be a replica (`READONLY` first, on the same
/// connection).
///
/// # Panics
///
/// When it fails.
pub async fn read<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut c = conn(port).await;
    let _: () = redis::cmd("READONLY")
        .query_async(&mut c)
        .await
        .expect("READONLY");
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("node {port}: {cmd:?}: {e}"))
}

/// `GET key` on a node (replica or primary).
pub async fn get(port: u16, key: &str) -> Option<String> {
    read(port, redis::cmd("GET").arg(key)).await
}

/// `PTTL key` on a node.
pub async fn pttl(port: u16, key: &str) -> i64 {
    read(port, redis::cmd("PTTL").arg(key)).await
}

/// `ZCARD key` on a node: how many entries a waiter queue holds.
pub async fn zcard(port: u16, key: &str) -> i64 {
    read(port, redis::cmd("ZCARD").arg(key)).await
}

/// Whether the watchdog renews lock key `key` on node `port`: shortens the
/// key's TTL to 5 s behind the client's back, and waits (up to 5 s) for a
/// renewal to put it back above 20 s (for a lease of 30 s).
pub async fn renewed_on(port: u16, key: &str) -> bool {
    let _: i64 = must(port, redis::cmd("PEXPIRE").arg(key).arg(5000)).await;
    eventually_every(Duration::from_secs(5), POLL, || async move {
        pttl(port, key).await > 20_000
    })
    .await
}

/// How many subscriptions the nodes `ports` hold to sharded channels of
/// lock `name` (`PUBSUB SHARDCHANNELS *{name}*`, then `SHARDNUMSUB`); a
/// node that cannot be asked counts 0.
pub async fn shard_subscribers(ports: &[u16], name: &str) -> i64 {
    let mut total = 0;
    for &port in ports {
        let Some(channels): Option<Vec<String>> = query(
            port,
            redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .arg(format!("*{}*", hash_tag(name))),
        )
        .await
        else {
            continue;
        };
        if channels.is_empty() {
            continue;
        }
        let counts: Option<Vec<Value>> =
            query(port, redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channels)).await;
        total += counts
            .unwrap_or_default()
            .iter()
            .skip(1)
            .step_by(2)
            .map(|v| match v {
                Value::Int(n) => *n,
                _ => 0,
            })
            .sum::<i64>();
    }
    total
}

/// A [`Monitor`] on node `port`; once this returns, every command the node
/// executes is recorded.
pub async fn monitor_node(port: u16) -> Monitor {
    let monitor = Monitor::start(&node_url(port)).await;
    monitor.sync().await;
    monitor
}
