//! The replication link: pointed through a [`Proxy`], and checked to be
//! caught up (`WAIT`).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::{POLL, Proxy, eventually_every, get, query, raw, replication_field, set, unique};

use super::Topology;

impl Topology {
    /// Points the replica at `proxy` (`REPLICAOF`), waits until its link
    /// through it is up, and checks that a write reaches the replica and is
    /// acknowledged (`WAIT 1` answers 1).
    ///
    /// # Panics
    ///
    /// When any of that fails (the link within 10 s).
    pub async fn replicate_through(&self, proxy: &Proxy) {
        let replica = self.replica_port();
        let ok: Option<String> = query(
            replica,
            redis::cmd("REPLICAOF").arg("127.0.0.1").arg(proxy.port()),
        )
        .await;
        assert_eq!(ok.as_deref(), Some("OK"), "REPLICAOF the proxy");
        let proxy_port = proxy.port().to_string();
        let linked = eventually_every(Duration::from_secs(10), POLL, || {
            let proxy_port = proxy_port.clone();
            async move {
                replication_field(replica, "master_port").await == Some(proxy_port)
                    && replication_field(replica, "master_link_status")
                        .await
                        .as_deref()
                        == Some("up")
            }
        })
        .await;
        assert!(linked, "the replica's link through the proxy never came up");
        let (key, value) = (unique("probe"), unique("v"));
        let mut primary = raw(&self.primary_url()).await;
        let acked = write_and_wait(&mut primary, &key, &value).await;
        assert_eq!(
            acked, 1,
            "the replica did not acknowledge a write through the proxy"
        );
        let mut replica = raw(&self.replica_url()).await;
        assert_eq!(get(&mut replica, &key).await, Some(value));
    }
}

/// A fresh connection's `WAIT 1 2000` after a write of its own: whether the
/// replica has everything the primary executed so far.
pub async fn replica_caught_up(primary_url: &str) -> bool {
    let mut conn = raw(primary_url).await;
    write_and_wait(&mut conn, &unique("sync"), "1").await == 1
}

/// `SET key value` on the primary, then `WAIT 1 2000` on the same
/// connection: how many replicas acknowledged everything up to the write.
pub async fn write_and_wait(primary: &mut MultiplexedConnection, key: &str, value: &str) -> i64 {
    set(primary, key, value).await;
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async(primary)
        .await
        .expect("WAIT")
}
