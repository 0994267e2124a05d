//! The hub's pub/sub connection, on one server (SUBSCRIBE) or on a cluster
//! (sharded SSUBSCRIBE), behind one small interface.
//!
//! On a cluster, subscriptions live on a dedicated cluster connection that
//! sends no other command (RESP3, pushes delivered to a channel of ours).
//! redis-rs resubscribes after a node reconnect, but not reliably after a
//! failover or a slot migration (the server then drops the subscription with
//! an `sunsubscribe` push). So any `sunsubscribe` for a channel the hub still
//! wants, and any disconnection, ends the stream: the hub then connects
//! afresh, resubscribes everything and wakes every waiter, exactly as after
//! a lost single-node connection.

use std::time::Duration;

use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
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
    /// Proves the connection alive: `PING` on the pub/sub connection (on a
    /// cluster, to every primary, the nodes that hold its subscriptions).
    pub(crate) async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Sink::Single(sink) => sink.ping::<redis::Value>().await.map(drop),
            Sink::Cluster(connection) => {
                use redis::cluster_routing::{
                    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo,
                };
                let routing = RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::AllSucceeded),
                ));
                connection
                    .route_command(redis::cmd("PING"), routing)
                    .await
                    .map(drop)
            }
        }
    }
}

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
                    PushKind::Disconnection => return None,
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
