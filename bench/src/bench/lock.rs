//! The locking strategies under test, behind one small interface:
//! redbell's event-driven mutex (on one server, or on a Redis Cluster),
//! its fair (FIFO, direct hand-off) mutex, the `rslock` crate (Redlock over
//! redis-rs, retrying with a random sleep; used here on one server), and the
//! sleep-poll recipe (implemented here, once, for every scenario of the
//! bench).

use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::fail::{EX_FAILURE, Failure};

/// A locking strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// redbell: waiters park until the release wakes the head of the queue.
    Redbell,
    /// redbell's `FairMutex`: waiters are served in arrival order, the
    /// release grants the lock to the head of the queue.
    Fair,
    /// redbell's plain mutex through a Redis Cluster client
    /// (`Client::cluster`): the same locking, with sharded pub/sub
    /// (SPUBLISH/SSUBSCRIBE) for the wake-ups.
    Cluster,
    /// The `rslock` crate's `LockManager::acquire` (loops `SET NX PX`;
    /// after a failed try it runs its compare-and-delete and sleeps a random
    /// 0–200 ms) and `LockGuard::release`, on one server.
    Rslock,
    /// `SET key token NX PX lease`; on failure sleep this long and retry;
    /// release with a Lua compare-and-delete.
    Poll(Duration),
}

impl Strategy {
    /// A short label for tables and JSON: `redbell`, `redbell fair`,
    /// `redbell cluster`, `poll 10ms`.
    pub fn label(self) -> String {
        match self {
            Strategy::Redbell => "redbell".to_owned(),
            Strategy::Fair => "redbell fair".to_owned(),
            Strategy::Cluster => "redbell cluster".to_owned(),
            Strategy::Rslock => "rslock".to_owned(),
            Strategy::Poll(d) => format!("poll {}", humantime::format_duration(d)),
        }
    }

    /// The commands this strategy's clients send themselves (every other
    /// command in `INFO commandstats` runs inside one of its scripts). Used
    /// to split "round trips" from "all commands".
    pub fn client_commands(self) -> &'static [&'static str] {
        match self {
            Strategy::Redbell | Strategy::Fair => &[
                "evalsha",
                "eval",
                "script|load",
                "subscribe",
                "unsubscribe",
                "ping",
            ],
            Strategy::Cluster => &[
                "evalsha",
                "eval",
                "script|load",
                "ssubscribe",
                "sunsubscribe",
                "ping",
            ],
            Strategy::Poll(_) | Strategy::Rslock => &["set", "evalsha", "eval", "script|load"],
        }
    }
}

/// The poll recipe's unlock: delete the key only if it still holds our token.
const POLL_RELEASE: &str = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0"#;

/// One lock, as one worker (or task) uses it.
#[derive(Clone)]
pub enum Lock {
    Redbell(redbell::Mutex),
    Fair(redbell::FairMutex),
    Rslock {
        manager: rslock::LockManager,
        resource: String,
        lease: Duration,
    },
    Poll {
        conn: ConnectionManager,
        key: String,
        lease_ms: u64,
        interval: Duration,
        release: redis::Script,
    },
}

/// What `Lock::acquire` returns and `Lock::release` consumes (both redbell
/// mutexes return a `MutexGuard`).
pub enum Held {
    Redbell(redbell::MutexGuard),
    Rslock(rslock::LockGuard),
    Poll(String),
}

/// A connection from the same library redbell uses (redis-rs
/// `ConnectionManager`, one multiplexed socket). The response timeout is
/// long: 1,000 pollers sharing one connection (a debug build, a loaded
/// server) queue replies well past the default, and the baseline should
/// report that slowness, not fail on it.
pub async fn manager(url: &str) -> Result<ConnectionManager, Failure> {
    let client =
        redis::Client::open(url).map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(60)));
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))
}

/// rslock's key for lock `name`.
pub fn rslock_key(name: &str) -> String {
    format!("redbell-bench:{{{name}}}:rslock")
}

/// The poll baseline's key for lock `name`.
pub fn poll_key(name: &str) -> String {
    format!("redbell-bench:{{{name}}}:poll")
}

/// A handle on the connection(s) a strategy needs; cloned handles share them.
#[derive(Clone)]
pub enum Conn {
    Redbell(redbell::Client),
    Rslock(rslock::LockManager),
    Poll(ConnectionManager),
}

impl Conn {
    pub async fn connect(url: &str, strategy: Strategy) -> Result<Conn, Failure> {
        match strategy {
            Strategy::Redbell | Strategy::Fair => redbell::Client::connect(url)
                .await
                .map(Conn::Redbell)
                .map_err(|e| Failure::lock(url, "cannot connect to Redis", &e)),
            Strategy::Poll(_) => manager(url).await.map(Conn::Poll),
            Strategy::Rslock => {
                let client = redis::Client::open(url)
                    .map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?;
                let manager = rslock::LockManager::from_clients(vec![client]);
                // Connect now, as the others do, not on the first acquire.
                manager
                    .query_redis_for_key_value(b"redbell-bench:connect")
                    .await
                    .map_err(|e| Failure::new(EX_FAILURE, format!("rslock: {e}")))?;
                Ok(Conn::Rslock(manager))
            }
            Strategy::Cluster => Err(Failure::new(
                EX_FAILURE,
                "redbell cluster needs the cluster's node URLs",
            )),
        }
    }

    /// A redbell client on the Redis Cluster that `nodes` belong to.
    pub async fn cluster(nodes: &[String]) -> Result<Conn, Failure> {
        redbell::Client::cluster(nodes)
            .await
            .map(Conn::Redbell)
            .map_err(|e| Failure::lock(&nodes.join(","), "cannot connect to the cluster", &e))
    }

    /// The lock `name` with a fixed `lease` (no renewal traffic).
    pub fn lock(&self, strategy: Strategy, name: &str, lease: Duration) -> Lock {
        match (self, strategy) {
            (Conn::Redbell(client), Strategy::Fair) => {
                Lock::Fair(client.fair_mutex(name).with_lease(lease))
            }
            (Conn::Redbell(client), _) => Lock::Redbell(client.mutex(name).with_lease(lease)),
            (Conn::Rslock(manager), _) => Lock::Rslock {
                manager: manager.clone(),
                resource: rslock_key(name),
                lease,
            },
            (Conn::Poll(conn), Strategy::Poll(interval)) => Lock::Poll {
                conn: conn.clone(),
                key: poll_key(name),
                lease_ms: lease.as_millis().max(1) as u64,
                interval,
                release: redis::Script::new(POLL_RELEASE),
            },
            (Conn::Poll(_), _) => unreachable!("a poll connection for another strategy"),
        }
    }
}

impl Lock {
    /// Waits until the lock is ours.
    pub async fn acquire(&self) -> Result<Held, Failure> {
        match self {
            Lock::Redbell(mutex) => mutex
                .lock()
                .await
                .map(Held::Redbell)
                .map_err(|e| fail("acquire", &e)),
            Lock::Fair(mutex) => mutex
                .lock()
                .await
                .map(Held::Redbell)
                .map_err(|e| fail("acquire", &e)),
            Lock::Rslock {
                manager,
                resource,
                lease,
            } => manager
                .acquire(resource.as_bytes(), *lease)
                .await
                .map(Held::Rslock)
                .map_err(|e| fail("acquire", &e)),
            Lock::Poll {
                conn,
                key,
                lease_ms,
                interval,
                ..
            } => {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let mut conn = conn.clone();
                loop {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(*lease_ms)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| fail("acquire", &e))?;
                    if set.is_some() {
                        return Ok(Held::Poll(token));
                    }
                    tokio::time::sleep(*interval).await;
                }
            }
        }
    }

    /// Releases what `acquire` returned; losing the lease first is a failure
    /// (the bench's leases are far longer than any hold).
    pub async fn release(&self, held: Held) -> Result<(), Failure> {
        match (held, self) {
            (Held::Redbell(guard), _) => guard.unlock().await.map_err(|e| fail("release", &e)),
            (Held::Rslock(guard), _) => {
                guard.release().await; // best effort: rslock reports nothing
                Ok(())
            }
            (
                Held::Poll(token),
                Lock::Poll {
                    conn, key, release, ..
                },
            ) => {
                let deleted: i64 = release
                    .key(key)
                    .arg(token)
                    .invoke_async(&mut conn.clone())
                    .await
                    .map_err(|e| fail("release", &e))?;
                if deleted == 1 {
                    Ok(())
                } else {
                    Err(Failure::new(EX_FAILURE, "release: the poll lock was lost"))
                }
            }
            (Held::Poll(_), _) => unreachable!("a poll token on another lock"),
        }
    }
}

fn fail(what: &str, e: &dyn std::fmt::Display) -> Failure {
    Failure::new(EX_FAILURE, format!("{what}: {e}"))
}
