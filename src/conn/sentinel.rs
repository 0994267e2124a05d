//! Finding the primary through Redis Sentinel.
//!
//! The sentinels are asked all at once, and a look acts as soon as the
//! answers in hand decide it (see [`Look`]): a frozen or black-holed
//! sentinel must not hold the client on an old primary while it times out.
//! A sentinel's answer is only
//! a claim: one that is partitioned away, just restarted, or not yet told of
//! a failover names a node that is now a replica. So the named node is
//! connected to, with the primary's own settings (credentials, database,
//! protocol, TLS: [`Sentinels::primary`], which only the address is taken
//! from the sentinel), and asked `ROLE`; a node that does not answer
//! `master` sends us on to the next sentinel. A user whose ACL denies
//! `ROLE` is asked `HELLO` instead (its `role` field); when neither can be
//! asked, the sentinel is trusted, as before this check existed.
//!
//! A client that connects while every named node refuses as not the
//! primary (a failover in progress: the old primary demoted, the new one
//! not yet announced) asks again, with backoff, for up to
//! [`FAILOVER_WAIT`], rather than failing at once.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionLike;
use redis::{ConnectionAddr, ConnectionInfo, RedisError, Value};
use tokio::task::JoinSet;

use super::{Manager, manager};
use crate::Error;
use crate::backoff::Backoff;

mod look;

use look::{Look, Named, Unwaited, master_addr};

/// How long a first connection keeps asking the sentinels while the nodes
/// they name are not (yet) the primary: a failover takes a second or two.
const FAILOVER_WAIT: Duration = Duration::from_secs(5);

/// The description of the error of a named node that is not the primary
/// (what the caller is told; `Refused::NotPrimary` is how the code tells).
const NOT_PRIMARY: &str = "the node a sentinel named is not the primary";

/// The sentinels of one master, and how to connect to the primary they
/// name.
pub(crate) struct Sentinels {
    /// One client per sentinel.
    clients: Vec<redis::Client>,
    /// Per sentinel: whether it timed out the last time it was asked (a
    /// look does not wait for it again while others have answered). Set
    /// when an ask ends, also one that the look did not wait for
    /// ([`Unwaited`]): a sentinel back from a partition loses its mark as
    /// soon as it answers again.
    silent: Arc<[AtomicBool]>,
    /// Per sentinel: how many asks were started; only the latest one's
    /// outcome sets its `silent` mark.
    asks: Arc<[AtomicU64]>,
    /// The asks looks did not wait for, running to their end (each bounded
    /// by the connect timeout); aborted when the sentinels are dropped
    /// (the client, or a connect future), so nothing outlives them.
    unwaited: StdMutex<JoinSet<()>>,
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
    /// The configuration epoch of the sentinel's answer (0 when unknown).
    pub(crate) config_epoch: u64,
    pub(crate) client: redis::Client,
    pub(crate) manager: Manager,
}

/// What one look found.
pub(crate) enum Looked {
    /// The primary is elsewhere now: found and connected to.
    Moved(Box<Found>),
    /// The current primary still is, named at configuration `epoch`: newer
    /// than the one it was found at when the client missed a failover and
    /// one back (a stale sentinel's answer of the configuration in between
    /// must then not be taken for news).
    Stays { epoch: u64 },
}

/// What a node says it is.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    Master,
    /// `slave`, `sentinel`, or anything but `master`.
    Other(String),
    /// It could not be asked (ACL, an old server): trust the sentinel.
    Unknown,
}

impl Sentinels {
    pub(crate) fn new(
        clients: Vec<redis::Client>,
        master: String,
        primary: ConnectionInfo,
    ) -> Self {
        Sentinels {
            silent: clients.iter().map(|_| AtomicBool::new(false)).collect(),
            asks: clients.iter().map(|_| AtomicU64::new(0)).collect(),
            unwaited: StdMutex::new(JoinSet::new()),
            clients,
            master,
            primary,
        }
    }

    /// Finds the primary and connects to it; while the nodes the sentinels
    /// name are not the primary, asks again for up to [`FAILOVER_WAIT`].
    pub(crate) async fn find(&self, timeouts: (Duration, Duration)) -> Result<Found, Error> {
        let deadline = tokio::time::Instant::now() + FAILOVER_WAIT;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut pause = backoff.next_delay();
        loop {
            match self.ask(None, timeouts).await {
                Ok(Looked::Moved(found)) => return Ok(*found),
                Ok(Looked::Stays { .. }) => return Err(Error::Closed), // not reached: no current primary given
                Err(NotFound {
                    error,
                    not_primary: true,
                }) if tokio::time::Instant::now() + pause < deadline => {
                    tracing::info!(%error, retry_in = ?pause, "no primary yet; a failover may be in progress");
                    tokio::time::sleep(pause).await;
                    pause = backoff.next_delay();
                }
                Err(NotFound { error, .. }) => return Err(error),
            }
        }
    }

    /// Where the primary is now, when it is no longer `current` (its
    /// address, command connection and the configuration epoch it was
    /// found at); [`Looked::Stays`] when `current` still is.
    pub(crate) async fn moved(
        &self,
        current: (&str, &Manager, u64),
        timeouts: (Duration, Duration),
    ) -> Result<Looked, Error> {
        self.ask(Some(current), timeouts).await.map_err(|e| e.error)
    }

    /// One look: asks every sentinel at once and acts as soon as the answers
    /// in hand decide it (see [`Look`]), not when the slowest has answered.
    async fn ask(
        &self,
        current: Option<(&str, &Manager, u64)>,
        (connect, response): (Duration, Duration),
    ) -> Result<Looked, NotFound> {
        // The last refusal, and whether it was a node saying it is not the
        // primary.
        let mut last: Option<(RedisError, bool)> = None;
        let mut look = Look::new(self.clients.len());
        let mut pending = Unwaited {
            asks: (0..self.clients.len())
                .map(|i| self.ask_one(i, connect))
                .collect(),
            left_to: &self.unwaited,
        };
        let mut named = Vec::with_capacity(self.clients.len());
        let mut tried: Vec<String> = Vec::with_capacity(self.clients.len());
        let mut followed = current.map_or(0, |(_, _, epoch)| epoch);
        while let Some((i, answer)) = pending.asks.next().await {
            look.answered(i);
            let n = match answer {
                Ok(n) => n,
                Err(e) => {
                    last = Some((e, false));
                    if look.decided(named.len(), &self.silent) {
                        break;
                    }
                    continue;
                }
            };
            // A configuration newer than the one followed: the failover
            // it names happened, whatever the sentinels not yet heard
            // from say. Its node answering `ROLE` as master decides it.
            // Newer than the current primary is named at in this look,
            // too: a client that missed a failover and the one back
            // followed an older epoch than its primary's, and a stale
            // answer of the epoch in between names a demoted node that
            // answers `master` until it is converted.
            if let Some((current_addr, _, _)) = current {
                let addr = n.addr();
                if addr == current_addr {
                    followed = followed.max(n.epoch);
                } else if n.epoch > followed && !tried.contains(&addr) {
                    tried.push(addr);
                    let (host, port, epoch) = (n.host.clone(), n.port, n.epoch);
                    if let Some(moved) = self
                        .move_to(host, port, epoch, (connect, response), &mut last)
                        .await?
                    {
                        return Ok(moved);
                    }
                }
            }
            named.push(n);
            if look.decided(named.len(), &self.silent) {
                break;
            }
        }
        drop(pending); // the sentinels not waited for: their asks end on their own
        // The newest configuration first: a sentinel that has not heard of
        // the last failover yet (they tell each other every 2 s) names the
        // old primary, which answers `master` until it is converted.
        // Stable: among equal epochs the order the answers came in.
        named.sort_by_key(|n| std::cmp::Reverse(n.epoch));
        for Named { host, port, epoch } in named {
            let addr = format!("{host}:{port}");
            if tried.contains(&addr) {
                continue;
            }
            tried.push(addr.clone());
            if let Some((current_addr, current_manager, _)) = current
                && addr == current_addr
            {
                // Still named: keep it unless it says it was demoted (an
                // unreachable primary is the sentinels' to fail over), at
                // the newest epoch it is named at (the first here).
                match role(&mut current_manager.clone(), response).await {
                    Ok(Role::Other(role)) => last = Some((not_primary(&addr, &role), true)),
                    Ok(Role::Master | Role::Unknown) | Err(_) => {
                        return Ok(Looked::Stays { epoch });
                    }
                }
                continue;
            }
            if let Some(moved) = self
                .move_to(host, port, epoch, (connect, response), &mut last)
                .await?
            {
                return Ok(moved);
            }
        }
        Err(match last {
            Some((e, not_primary)) => NotFound {
                error: Error::Redis(e),
                not_primary,
            },
            None => NotFound {
                error: Error::Closed,
                not_primary: false,
            },
        })
    }

    /// The move to the node at `host:port`, named at `epoch`, when it
    /// answers as the primary; `None` with its refusal in `last` when it
    /// does not (another node may); an error when the settings themselves
    /// are refused (every node would).
    async fn move_to(
        &self,
        host: String,
        port: u16,
        epoch: u64,
        timeouts: (Duration, Duration),
        last: &mut Option<(RedisError, bool)>,
    ) -> Result<Option<Looked>, NotFound> {
        let addr = format!("{host}:{port}");
        match self.connect_to(host, port, timeouts).await {
            Ok((client, manager)) => Ok(Some(Looked::Moved(Box::new(Found {
                addr,
                config_epoch: epoch,
                client,
                manager,
            })))),
            Err(Refused::Settings(error)) => Err(NotFound {
                error,
                not_primary: false,
            }),
            Err(Refused::Node(e)) => {
                *last = Some((e, false));
                Ok(None)
            }
            Err(Refused::NotPrimary(e)) => {
                *last = Some((e, true));
                Ok(None)
            }
        }
    }

    /// Connects to the node at `host:port` with the primary's settings and
    /// asks it whether it is the primary.
    async fn connect_to(
        &self,
        host: String,
        port: u16,
        (connect, response): (Duration, Duration),
    ) -> Result<(redis::Client, Manager), Refused> {
        let addr = format!("{host}:{port}");
        let client = redis::Client::open(self.primary_at(host, port))
            .map_err(|e| Refused::Settings(Error::Redis(e)))?; // the settings, not the node
        let mut candidate = match manager(&client, connect, response).await {
            Ok(m) => m,
            Err(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                // Another node would refuse as well.
                return Err(Refused::Settings(Error::Redis(e)));
            }
            Err(e) => return Err(Refused::Node(e)),
        };
        match role(&mut candidate, response).await {
            Ok(Role::Master | Role::Unknown) => Ok((client, candidate)),
            Ok(Role::Other(role)) => {
                tracing::info!(node = %addr, %role, "a sentinel named a node that is not the primary; asking the next");
                Err(Refused::NotPrimary(not_primary(&addr, &role)))
            }
            Err(e) => Err(Refused::Node(e)),
        }
    }

    /// One client per sentinel, in the order given, for the watchers of
    /// `+switch-master`.
    pub(crate) fn sentinel_clients(&self) -> &[redis::Client] {
        &self.clients
    }

    /// Whether a `+switch-master` message (`<master> <old ip> <old port>
    /// <new ip> <new port>`) is about this master.
    pub(crate) fn announces_ours(&self, payload: &str) -> bool {
        payload.split(' ').next() == Some(self.master.as_str())
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

    /// Asks sentinel `i` where the primary is ([`master_addr`]), and sets
    /// its `silent` mark from the outcome (unless a later ask of it was
    /// started meanwhile). Owns what it needs: a look may leave it to end
    /// on its own ([`Unwaited`]).
    fn ask_one(
        &self,
        i: usize,
        timeout: Duration,
    ) -> impl Future<Output = (usize, Result<Named, RedisError>)> + Send + 'static {
        let (sentinel, master) = (self.clients[i].clone(), self.master.clone());
        let (silent, asks) = (self.silent.clone(), self.asks.clone());
        let ask = asks[i].fetch_add(1, Ordering::AcqRel) + 1;
        async move {
            let answer = master_addr(&sentinel, &master, timeout).await;
            if asks[i].load(Ordering::Acquire) == ask {
                let timed_out = matches!(&answer, Err(e) if e.is_timeout());
                silent[i].store(timed_out, Ordering::Release);
            }
            (i, answer)
        }
    }
}

/// Why a named node was not connected to.
enum Refused {
    /// The settings themselves (another node would refuse as well).
    Settings(Error),
    /// This node: unreachable, or its connection failed.
    Node(RedisError),
    /// This node answered, and it is not the primary (a replica: the
    /// sentinels may be failing over).
    NotPrimary(RedisError),
}

/// Why the sentinels' answers led to no primary: the error to report, and
/// whether the last node tried was reachable but not the primary (mid
/// failover: worth asking again).
struct NotFound {
    error: Error,
    not_primary: bool,
}

fn not_primary(addr: &str, role: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        NOT_PRIMARY,
        format!("{addr} answers ROLE with {role:?}"),
    ))
}

/// What `conn`'s server says it is: `ROLE`, else `HELLO`'s `role` field.
async fn role(conn: &mut Manager, timeout: Duration) -> Result<Role, RedisError> {
    let asked = tokio::time::timeout(timeout, async {
        match query(conn, redis::cmd("ROLE")).await {
            Ok(Value::Array(items)) => Ok(items.first().and_then(text).map(Role::from)),
            Ok(_) => Ok(None),
            Err(e) if e.code().is_some() => {
                // Denied by the ACL, or unknown: HELLO without a protocol
                // version answers in the connection's protocol.
                match query(conn, redis::cmd("HELLO")).await {
                    Ok(reply) => Ok(field(&reply, "role").map(Role::from)),
                    Err(e) if e.code().is_some() => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    })
    .await;
    match asked {
        Ok(Ok(role)) => Ok(role.unwrap_or(Role::Unknown)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the node a sentinel named did not answer ROLE in time",
        ))),
    }
}

async fn query(conn: &mut Manager, cmd: redis::Cmd) -> Result<Value, RedisError> {
    conn.req_packed_command(&cmd).await
}

impl From<String> for Role {
    fn from(role: String) -> Role {
        if role == "master" {
            Role::Master
        } else {
            Role::Other(role)
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `name`'s value in a map reply (RESP3) or a flat name/value array (RESP2).
fn field(reply: &Value, name: &str) -> Option<String> {
    match reply {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .and_then(|(_, v)| text(v)),
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| text(&kv[0]).as_deref() == Some(name))
            .and_then(|kv| kv.get(1).and_then(text)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_role_in_either_protocol() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let flat = Value::Array(vec![
            bulk("server"),
            bulk("redis"),
            bulk("role"),
            bulk("replica"),
        ]);
        assert_eq!(field(&flat, "role").as_deref(), Some("replica"));
        let map = Value::Map(vec![(bulk("role"), bulk("master"))]);
        assert_eq!(field(&map, "role").map(Role::from), Some(Role::Master));
        assert_eq!(field(&map, "mode"), None);
    }

    #[test]
    fn a_look_is_decided_by_every_answer_but_the_silent_ones() {
        let silent = |flags: [bool; 3]| flags.map(AtomicBool::new);
        let mut look = Look::new(3);
        look.answered(0);
        // One answer of three, two sentinels still asked and not known silent.
        assert!(!look.decided(1, &silent([false, false, false])));
        assert!(!look.decided(1, &silent([false, true, false])));
        // Every sentinel still asked timed out at its last look.
        assert!(look.decided(1, &silent([false, true, true])));
        // Nothing named yet: wait, silent or not.
        assert!(!look.decided(0, &silent([false, true, true])));
        look.answered(2);
        // Two stale answers of three are no decision: the third may be the
        // failover's leader, the only one that knows the new epoch yet.
        assert!(!look.decided(2, &silent([false, false, false])));
        // Two answered, one of them an error: the third is waited for.
        assert!(!look.decided(1, &silent([false, false, false])));
        look.answered(1);
        assert!(look.decided(3, &silent([false, false, false])));
    }
}
