//! The hub's pub/sub connection, on one server (SUBSCRIBE) or on a cluster
//! (sharded SSUBSCRIBE), behind one small interface.
//!
//! On a cluster, subscriptions live on a dedicated cluster connection (one
//! socket per node, RESP3, pushes delivered to a channel of ours) that also
//! carries the hub's per-shard checks ([`slot_owners`], [`client_id`],
//! [`check_owner`], [`socket_of`]), so they ask the very sockets that hold the
//! subscriptions. redis-rs resubscribes after a node reconnect, but not
//! reliably after a failover or a slot migration (the server then drops the
//! subscription with an `sunsubscribe` push). The stream reports such a
//! drop, and any lost node connection, as events of their own; the
//! [control task](super::connection) handles them per shard.

use std::time::Duration;

use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use crate::Error;
use crate::conn::Conn;

/// Subscribes and unsubscribes.
pub(crate) enum Sink {
    Single(PubSubSink),
    Cluster(ClusterConnection),
}

/// What the connection delivers.
pub(crate) enum Stream {
    Single(PubSubStream),
    Cluster(mpsc::UnboundedReceiver<PushInfo>),
}

/// One thing the stream says.
pub(crate) enum Event {
    /// A message published on `channel`.
    Message { channel: String, payload: Vec<u8> },
    /// The server dropped our subscription to `channel` (cluster: the slot
    /// moved).
    Unsubscribed { channel: String },
    /// Cluster: redis-rs lost its connection to one node (which one, it
    /// does not say) and reconnects it by itself.
    NodeLost,
}

/// Opens a pub/sub connection to where `conn` points.
pub(crate) async fn connect(conn: &Conn, timeout: Duration) -> Result<(Sink, Stream), Error> {
    let connecting = async {
        if let Some(client) = conn.cluster_pubsub() {
            let (tx, rx) = mpsc::unbounded_channel();
            let config = ClusterConfig::new()
                .set_push_sender(tx)
                .set_connection_timeout(timeout);
            let connection = client.get_async_connection_with_config(config).await?;
            Ok((Sink::Cluster(connection), Stream::Cluster(rx)))
        } else {
            let client = conn.client().ok_or(Error::Closed)?;
            let (sink, stream) = client.get_async_pubsub().await?.split();
            Ok((Sink::Single(sink), Stream::Single(stream)))
        }
    };
    match tokio::time::timeout(timeout, connecting).await {
        Ok(result) => result,
        Err(_) => Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out connecting the pub/sub connection",
        )))),
    }
}

impl Sink {
    /// Subscribes to every channel in `channels`, confirmed by the server.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.subscribe(channels).await,
            // Sharded channels of different slots cannot share a command.
            Sink::Cluster(connection) => {
                for channel in channels {
                    connection.ssubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }

    /// Unsubscribes from every channel in `channels`.
    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.unsubscribe(channels).await,
            Sink::Cluster(connection) => {
                for channel in channels {
                    connection.sunsubscribe(channel).await?;
                }
                Ok(())
            }
        }
    }
}

impl Sink {
    /// Proves a single-node connection alive: `PING` on it. A cluster
    /// connection is probed per shard instead (see [`client_id`]), so this
    /// does nothing there.
    pub(crate) async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.ping::<redis::Value>().await.map(drop),
            Sink::Cluster(_) => Ok(()),
        }
    }

    /// The cluster connection (a clone sharing its sockets), for the
    /// per-shard work; `None` on a single node.
    pub(crate) fn cluster(&self) -> Option<ClusterConnection> {
        match self {
            Sink::Single(_) => None,
            Sink::Cluster(connection) => Some(connection.clone()),
        }
    }
}

/// Routes to the primary that serves `slot`, as the connection's slot map
/// has it.
fn to_primary(slot: u16) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
        slot,
        SlotAddr::Master,
    )))
}

/// `CLUSTER SLOTS`, answered by the first primary that can: each slot range
/// with the node id of the primary serving it.
pub(crate) async fn slot_owners(
    connection: &mut ClusterConnection,
) -> redis::RedisResult<Vec<(u16, u16, String)>> {
    let routing = RoutingInfo::MultiNode((
        MultipleNodeRoutingInfo::AllMasters,
        Some(ResponsePolicy::OneSucceeded),
    ));
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let reply = connection.route_command(cmd, routing).await?;
    let Value::Array(ranges) = reply else {
        return Ok(Vec::new());
    };
    let mut owners = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        // [host, port, id, ...]; the id names the node whatever its address.
        let node = match (primary.first(), primary.get(1), primary.get(2)) {
            (_, _, Some(id)) => text(id),
            (Some(host), Some(Value::Int(port)), None) => format!("{}:{port}", text(host)),
            _ => continue,
        };
        if let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) {
            owners.push((start, end, node));
        }
    }
    Ok(owners)
}

/// `CLIENT ID` on the primary serving `slot`: the id of our socket to it,
/// which changes whenever redis-rs reconnected that node.
pub(crate) async fn client_id(
    connection: &mut ClusterConnection,
    slot: u16,
) -> redis::RedisResult<i64> {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("ID");
    match connection.route_command(cmd, to_primary(slot)).await? {
        Value::Int(id) => Ok(id),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "CLIENT ID answered a non-integer",
            format!("{other:?}"),
        ))),
    }
}

/// A keyed read of `channel`'s slot on its primary: a node that no longer
/// serves the slot (a demoted primary) answers `MOVED`, which makes redis-rs
/// refresh its slot map (and move its own resubscriptions) before a
/// following SSUBSCRIBE is routed.
pub(crate) async fn check_owner(
    connection: &mut ClusterConnection,
    channel: &str,
) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("EXISTS");
    cmd.arg(channel);
    connection
        .route_command(cmd, to_primary(crate::keys::hash_slot(channel)))
        .await
        .map(drop)
}

/// Which connection of ours serves `channel`'s slot, as the route of an
/// SSUBSCRIBE sees it: `CLIENT INFO` routed to the slot's primary by the
/// connection's slot map. Names the TCP connection by the server's id for
/// it and the addresses of both its ends, so a reconnected socket (a new id,
/// a new local port) or another node (another address) never compares
/// equal. An error when the server does not answer, refuses (`CLIENT INFO`
/// is Redis 6.2 or later, and an ACL may deny it) or answers something
/// else: the caller then cannot tell.
pub(crate) async fn socket_of(
    connection: &mut ClusterConnection,
    channel: &str,
) -> redis::RedisResult<Socket> {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("INFO");
    let reply = connection
        .route_command(cmd, to_primary(crate::keys::hash_slot(channel)))
        .await?;
    let info = match &reply {
        Value::VerbatimString { text, .. } => text.clone(),
        other => text(other),
    };
    socket_in(&info).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Parse,
            "CLIENT INFO without id, addr and laddr",
            info,
        ))
    })
}

/// The [`Socket`] a `CLIENT INFO` line describes; `None` without its
/// `id`, `addr` and `laddr` fields.
fn socket_in(info: &str) -> Option<Socket> {
    let field = |name: &str| {
        info.split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .filter(|v| !v.is_empty())
    };
    Some(Socket(format!(
        "{} {} {}",
        field("id")?,
        field("addr")?,
        field("laddr")?
    )))
}

/// One TCP connection of ours to a node, as [`socket_of`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Socket(String);

impl Stream {
    /// The next event; `None` once the connection is gone.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        match self {
            Stream::Single(stream) => stream.next().await.map(|msg| Event::Message {
                channel: msg.get_channel_name().to_owned(),
                payload: msg.get_payload_bytes().to_vec(),
            }),
            Stream::Cluster(rx) => loop {
                let push = rx.recv().await?;
                match push.kind {
                    PushKind::SMessage | PushKind::Message => {
                        if let [channel, payload, ..] = push.data.as_slice() {
                            return Some(Event::Message {
                                channel: text(channel),
                                payload: bytes(payload),
                            });
                        }
                    }
                    PushKind::SUnsubscribe => {
                        if let Some(channel) = push.data.first() {
                            return Some(Event::Unsubscribed {
                                channel: text(channel),
                            });
                        }
                    }
                    PushKind::Disconnection => return Some(Event::NodeLost),
                    _ => {}
                }
            },
        }
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> String {
    String::from_utf8_lossy(&bytes(value)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_named_by_its_id_and_both_ends() {
        let line = "id=7 addr=127.0.0.1:50123 laddr=127.0.0.1:7001 fd=9 name= age=3 ssub=2";
        let socket = socket_in(line).expect("a socket");
        assert_eq!(
            socket,
            Socket("7 127.0.0.1:50123 127.0.0.1:7001".to_owned())
        );
        // Another node, another local port, another id: never the same.
        for other in [
            "id=7 addr=127.0.0.1:50123 laddr=127.0.0.1:7002",
            "id=7 addr=127.0.0.1:50124 laddr=127.0.0.1:7001",
            "id=8 addr=127.0.0.1:50123 laddr=127.0.0.1:7001",
        ] {
            assert_ne!(socket_in(other), Some(socket.clone()), "{other}");
        }
    }

    #[test]
    fn a_line_without_the_three_fields_names_no_socket() {
        for line in [
            "",
            "id=7 addr=127.0.0.1:50123",
            "id=7 addr=127.0.0.1:50123 laddr=",
            "ERR unknown subcommand",
            "xid=7 xaddr=a xladdr=b",
        ] {
            assert_eq!(socket_in(line), None, "{line:?}");
        }
    }
}
