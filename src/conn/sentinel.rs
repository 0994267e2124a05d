//! Finding the primary through Redis Sentinel.
//!
//! The sentinels are asked in the order given; the first answer is used.
//! The named node is connected to with the primary's own settings
//! ([`Sentinels::primary`], of which only the address is taken from the
//! sentinel: a `rediss://` template keeps its TLS parameters).

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, RedisError};

use super::{Manager, manager};
use crate::Error;

/// The sentinels of one master, and how to connect to the primary they
/// name.
pub(crate) struct Sentinels {
    /// One client per sentinel, asked in this order.
    clients: Vec<redis::Client>,
    /// The master name the sentinels monitor.
    master: String,
    /// The primary's connection settings; its address is replaced by the one
    /// the sentinels name (a `TcpTls` address keeps its TLS parameters).
    primary: ConnectionInfo,
}

/// A primary found and connected to.
pub(crate) struct Found {
    /// `host:port`, as the sentinel named it.
    pub(crate) addr: String,
    pub(crate) client: redis::Client,
    pub(crate) manager: Manager,
}

impl Sentinels {
    pub(crate) fn new(
        clients: Vec<redis::Client>,
        master: String,
        primary: ConnectionInfo,
    ) -> Self {
        Sentinels {
            clients,
            master,
            primary,
        }
    }

    /// Finds the primary and connects to it.
    pub(crate) async fn find(&self, timeouts: (Duration, Duration)) -> Result<Found, Error> {
        match self.ask(None, timeouts).await? {
            Some(found) => Ok(found),
            None => Err(Error::Closed), // not reached: no current primary given
        }
    }

    /// Where the primary is now, when it is no longer `current` (its
    /// address and command connection); `None` when `current` still is.
    pub(crate) async fn moved(
        &self,
        current: (&str, &Manager),
        timeouts: (Duration, Duration),
    ) -> Result<Option<Found>, Error> {
        self.ask(Some(current), timeouts).await
    }

    async fn ask(
        &self,
        current: Option<(&str, &Manager)>,
        (connect, response): (Duration, Duration),
    ) -> Result<Option<Found>, Error> {
        let mut last = None;
        for sentinel in &self.clients {
            let (host, port) = match self.master_addr(sentinel, connect).await {
                Ok(addr) => addr,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let addr = format!("{host}:{port}");
            if current.is_some_and(|(current, _)| current == addr) {
                return Ok(None);
            }
            let client = redis::Client::open(self.primary_at(host, port))?;
            let manager = manager(&client, connect, response).await?;
            return Ok(Some(Found {
                addr,
                client,
                manager,
            }));
        }
        Err(last.map_or(Error::Closed, Error::Redis))
    }

    /// The primary's settings at `host:port`.
    fn primary_at(&self, host: String, port: u16) -> ConnectionInfo {
        let addr = match self.primary.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        self.primary.clone().set_addr(addr)
    }

    /// `SENTINEL get-master-addr-by-name` on one sentinel.
    async fn master_addr(
        &self,
        sentinel: &redis::Client,
        timeout: Duration,
    ) -> Result<(String, u16), RedisError> {
        let asked = tokio::time::timeout(timeout, async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        })
        .await;
        match asked {
            Ok(Ok(Some(addr))) => Ok(addr),
            Ok(Ok(None)) => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the sentinels do not know this master",
                self.master.clone(),
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "a sentinel did not answer in time",
            ))),
        }
    }
}
