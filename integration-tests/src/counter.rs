//! The non-atomic counter that proves mutual exclusion: any overlap of two
//! holders loses an increment.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::{get, test_key};

/// The scratch counter of lock `name` ([`non_atomic_increment`]):
/// `redbell-test:{name}:counter`.
pub fn counter_key(name: &str) -> String {
    test_key(name, "counter")
}

/// One increment of the counter at `counter`, deliberately not atomic:
/// `GET`, yield (and sleep `pause` unless it is zero), then `SET` the value
/// read plus one. Done inside a critical section, any overlap of two
/// holders loses an increment, which [`counter_value`] then shows.
pub async fn non_atomic_increment(
    conn: &mut MultiplexedConnection,
    counter: &str,
    pause: Duration,
) {
    let n: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query_async(conn)
        .await
        .expect("GET counter");
    tokio::task::yield_now().await;
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
    let _: () = redis::cmd("SET")
        .arg(counter)
        .arg(n.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .expect("SET counter");
}

/// The value of the counter at `counter`; 0 when it was never incremented.
pub async fn counter_value(conn: &mut MultiplexedConnection, counter: &str) -> i64 {
    get(conn, counter)
        .await
        .map_or(0, |v| v.parse().expect("the counter is a number"))
}
