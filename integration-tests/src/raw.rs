//! One-line shortcuts for raw Redis commands, to set up and inspect what a
//! lock left behind: keys, `INFO commandstats`, `CLIENT LIST`/`KILL`,
//! Pub/Sub subscribers.

use std::collections::{HashMap, HashSet};

use redis::ToRedisArgs;
use redis::aio::MultiplexedConnection;

use crate::hash_tag;

/// A plain redis-rs connection to `url`, for setting up and inspecting keys.
///
/// # Panics
///
/// When the server cannot be reached.
pub async fn raw(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("bad redis url {url}: {e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

/// `GET key` as an optional string.
pub async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

/// `PTTL key`: remaining ms, -1 without expiry, -2 when the key is gone.
pub async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// `EXISTS key`.
pub async fn exists(conn: &mut MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .expect("EXISTS");
    n == 1
}

/// `SET key value`.
pub async fn set(conn: &mut MultiplexedConnection, key: &str, value: impl ToRedisArgs) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .expect("SET");
}

/// `SET key value PX ms`: a value that expires like a lock's.
pub async fn set_px(conn: &mut MultiplexedConnection, key: &str, value: &str, ms: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ms)
        .query_async(conn)
        .await
        .expect("SET PX");
}

/// `INCR key`: the value after the increment.
pub async fn incr(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("INCR")
        .arg(key)
        .query_async(conn)
        .await
        .expect("INCR")
}

/// `DEL keys...`.
pub async fn del(conn: &mut MultiplexedConnection, keys: &[&str]) {
    let _: () = redis::cmd("DEL")
        .arg(keys)
        .query_async(conn)
        .await
        .expect("DEL");
}

/// `HSET key field value`: foreign data of the wrong type under a lock's key.
pub async fn hset(conn: &mut MultiplexedConnection, key: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg(field)
        .arg(value)
        .query_async(conn)
        .await
        .expect("HSET");
}

/// `HGETALL key` as a flat list: field, value, field, value, ...
pub async fn hgetall(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL")
}

/// `ZCARD key`: how many members a sorted set (a queue) holds.
pub async fn zcard(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

/// `ZRANGE key 0 -1`: the members of a sorted set, lowest score first.
pub async fn zrange(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .expect("ZRANGE")
}

/// The waiters queued for fair mutex `name`, first in line first: the
/// members of its queue scored by arrival (the queue's long-park marker,
/// scored below 0, left out).
pub async fn fair_queue(conn: &mut MultiplexedConnection, name: &str) -> Vec<String> {
    redis::cmd("ZRANGEBYSCORE")
        .arg(crate::fifo_key(name))
        .arg(0)
        .arg("+inf")
        .query_async(conn)
        .await
        .expect("ZRANGEBYSCORE")
}

/// The server's clock in ms (`TIME`).
pub async fn server_ms(conn: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    s * 1000 + us / 1000
}

/// `CONFIG SET parameter value` (e.g. `maxclients`, to refuse reconnects).
pub async fn config_set(
    conn: &mut MultiplexedConnection,
    parameter: &str,
    value: impl ToRedisArgs,
) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(parameter)
        .arg(value)
        .query_async(conn)
        .await
        .expect("CONFIG SET");
}

/// `CONFIG RESETSTAT`: zeroes the counts [`commandstats`] reads.
pub async fn reset_stats(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .expect("CONFIG RESETSTAT");
}

/// `INFO commandstats` as command (lower case) -> calls since the last
/// [`reset_stats`].
pub async fn commandstats(conn: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// The server's connections (`CLIENT LIST`): `(id, the connection's line)`.
pub async fn client_list(conn: &mut MultiplexedConnection) -> Vec<(u64, String)> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter_map(|line| {
            let id = line.strip_prefix("id=")?.split(' ').next()?.parse().ok()?;
            Some((id, line.to_owned()))
        })
        .collect()
}

/// The ids in a [`client_list`].
pub fn client_ids(list: &[(u64, String)]) -> HashSet<u64> {
    list.iter().map(|(id, _)| *id).collect()
}

/// How many channels the connection of a [`client_list`] line is
/// subscribed to (its `sub=` field).
pub fn subscriptions(line: &str) -> usize {
    line.split(' ')
        .find_map(|f| f.strip_prefix("sub="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `CLIENT KILL ID id`.
///
/// # Panics
///
/// When no connection was killed.
pub async fn kill_client(conn: &mut MultiplexedConnection, id: u64) {
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(conn)
        .await
        .expect("CLIENT KILL ID");
    assert_eq!(killed, 1, "connection {id} was not killed");
}

/// `CLIENT KILL TYPE kind` (`normal`, `pubsub`, ...): how many connections
/// were killed. Killing `normal` connections kills `conn` too: pass a fresh
/// one.
pub async fn kill_clients_of_type(conn: &mut MultiplexedConnection, kind: &str) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(conn)
        .await
        .expect("CLIENT KILL TYPE")
}

/// How many subscriptions exist to channels of lock `name` (any channel
/// whose name contains its hash tag): `PUBSUB CHANNELS *{name}*`, then the
/// sum of their `PUBSUB NUMSUB`.
pub async fn subscribers(conn: &mut MultiplexedConnection, name: &str) -> i64 {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("*{}*", hash_tag(name)))
        .query_async(conn)
        .await
        .expect("PUBSUB CHANNELS");
    if channels.is_empty() {
        return 0;
    }
    let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channels)
        .query_async(conn)
        .await
        .expect("PUBSUB NUMSUB");
    counts
        .iter()
        .skip(1)
        .step_by(2)
        .map(|v| match v {
            redis::Value::Int(n) => *n,
            other => panic!("NUMSUB count {other:?}"),
        })
        .sum()
}

/// Every key matching `pattern` (`SCAN ... MATCH pattern`).
pub async fn scan(conn: &mut MultiplexedConnection, pattern: &str) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            keys.sort();
            keys.dedup();
            return keys;
        }
        cursor = next;
    }
}

/// Connections the server accepted so far (`INFO stats`,
/// `total_connections_received`).
pub async fn connections_received(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("INFO stats");
    info.lines()
        .find_map(|l| l.trim().strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received")
}
