//! One server of a topology, known by its loopback port: its URL, a command
//! on a fresh connection that tolerates the server being down, fields of
//! its `INFO`, and free base ports for the topologies themselves.

use std::net::TcpListener;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use rand::Rng;
use redis::FromRedisValue;
use tokio::time::timeout;

/// How often the topology harnesses poll the servers' state: 50 ms.
pub const POLL: Duration = Duration::from_millis(50);

/// The loopback URL of `port`: `redis://127.0.0.1:<port>`.
pub fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// One command to 127.0.0.1:`port` on a fresh connection; `None` when the
/// server cannot be reached, answers with an error, or takes over 2 s.
pub async fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    timeout(Duration::from_secs(2), async {
        let client = redis::Client::open(node_url(port)).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        cmd.query_async(&mut conn).await.ok()
    })
    .await
    .ok()
    .flatten()
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

/// A base port for a topology of the test's own, `20000 + step × k` for a
/// random `k`, below 32000 (so below the kernel's ephemeral range), such
/// that `base + o` is free for every `o` in `offsets` (probed by binding
/// each) and was never handed out before in this process.
///
/// # Panics
///
/// When no such base is found in 1000 tries; `what` names the topology.
pub fn free_base(step: u16, offsets: &[u16], what: &str) -> u16 {
    /// Every port handed out so far.
    static TAKEN: StdMutex<Vec<u16>> = StdMutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap();
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let base = 20_000 + step * rng.random_range(0..12_000 / step);
        let ports: Vec<u16> = offsets.iter().map(|o| base + o).collect();
        let free = ports
            .iter()
            .all(|&p| !taken.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            taken.extend(ports);
            return base;
        }
    }
    panic!("no free base port for {what} in 20000-32000");
}
