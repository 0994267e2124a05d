//! `--cluster`: the Redis Cluster the `redbell cluster` hand-off rows run
//! on. Its nodes are checked once; for each scenario the primary that owns
//! the lock's slot is looked up (`CLUSTER KEYSLOT`, `CLUSTER NODES`), and
//! the scenario's counter and command counts go to that primary directly:
//! every key of a lock, and the bench's counter, share the lock's `{name}`
//! hash tag, so they all live in that one slot.

use redbell_testkit::{Node, parse_nodes};
use serde::Serialize;

use super::contend::bookkeeping;
use crate::fail::{EX_FAILURE, Failure, redact};

/// What the report says about the cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterInfo {
    /// The node URLs given (credentials redacted).
    pub nodes: Vec<String>,
    pub primaries: u32,
    pub replicas: u32,
    pub redis_version: String,
}

/// A plain connection to the first node of `nodes` that answers, and its URL.
async fn any_node(
    nodes: &[String],
) -> Result<(redis::aio::MultiplexedConnection, String), Failure> {
    let mut last = None;
    for url in nodes {
        match bookkeeping(url).await {
            Ok(conn) => return Ok((conn, url.clone())),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Failure::new(EX_FAILURE, "--cluster: no node URL given")))
}

fn err(url: &str) -> impl Fn(redis::RedisError) -> Failure + '_ {
    move |e| Failure::redis(url, "cluster bookkeeping", &e)
}

/// Checks that the cluster is up (`cluster_state:ok`) and describes it.
pub async fn check(nodes: &[String]) -> Result<ClusterInfo, Failure> {
    let (mut conn, url) = any_node(nodes).await?;
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .map_err(err(&url))?;
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        return Err(Failure::new(
            EX_FAILURE,
            format!("--cluster: {} reports no cluster_state:ok", redact(&url)),
        ));
    }
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(err(&url))?;
    let replicas = parse_nodes(&text)
        .iter()
        .filter(|n| n.flags.iter().any(|f| f == "slave"))
        .count() as u32;
    Ok(ClusterInfo {
        nodes: nodes.iter().map(|u| redact(u)).collect(),
        primaries: primaries(&text).len() as u32,
        replicas,
        redis_version: super::redis_version(&mut conn).await,
    })
}

/// The URL of the primary that owns `key`'s slot, and the slot.
pub async fn owner(nodes: &[String], key: &str) -> Result<(String, u16), Failure> {
    let (mut conn, url) = any_node(nodes).await?;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await
        .map_err(err(&url))?;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(err(&url))?;
    let primary = primaries(&text)
        .into_iter()
        .find(|p| p.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
        .ok_or_else(|| {
            Failure::new(
                EX_FAILURE,
                format!("--cluster: no primary owns slot {slot} (of {key})"),
            )
        })?;
    Ok((with_addr(&url, &primary.addr), slot))
}

/// The primaries in `CLUSTER NODES` output (those flagged `fail` left out),
/// with their stable slot ranges (migrating/importing entries skipped).
fn primaries(text: &str) -> Vec<Node> {
    parse_nodes(text)
        .into_iter()
        .filter(|n| n.is_primary() && !n.flags.iter().any(|f| f == "fail"))
        .collect()
}

/// `seed` (a node URL) with its `host:port` replaced by `addr`; scheme and
/// credentials kept.
fn with_addr(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let authority = rest.split('/').next().unwrap_or(rest);
    let userinfo = authority
        .rsplit_once('@')
        .map_or(String::new(), |(u, _)| format!("{u}@"));
    format!("{scheme}://{userinfo}{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
a1 127.0.0.1:7400@17400 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7401@17401 master - 0 1 2 connected 5461-10922 [10923->-c3]
c3 127.0.0.1:7402@17402,host master - 0 1 3 connected 10923-16383
d4 127.0.0.1:7403@17403 slave a1 0 1 1 connected
";

    #[test]
    fn finds_primaries_and_slots() {
        let p = primaries(NODES);
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].addr, "127.0.0.1:7401");
        assert_eq!(p[1].slots, vec![(5461, 10922)]);
        assert_eq!(p[2].addr, "127.0.0.1:7402");
    }

    #[test]
    fn keeps_scheme_and_credentials() {
        assert_eq!(
            with_addr("redis://u:pw@127.0.0.1:7400/0", "10.0.0.2:7401"),
            "redis://u:pw@10.0.0.2:7401"
        );
        assert_eq!(
            with_addr("redis://127.0.0.1:7400", "127.0.0.1:7402"),
            "redis://127.0.0.1:7402"
        );
    }
}
