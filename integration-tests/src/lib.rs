//! Shared helpers for redbell's integration tests.
//!
//! Every test talks to a real Redis:
//!
//! - the shared server named by `REDIS_URL` (started by `scripts/with-redis.sh`
//!   for `make test`), for tests that only touch their own, uniquely named
//!   locks ([`unique`]);
//! - a [`PrivateRedis`] of its own for tests that kill connections
//!   server-wide, restart the server, flush scripts or need exact command
//!   counts, so they never disturb the tests running beside them.
//!
//! [`Monitor`] records what a server executes (Redis `MONITOR`), so tests can
//! count the commands a client sent — "no polling while parked", "at most
//! one attempt per release", "no PUBLISH was ever sent".

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The shared test server's URL, from `REDIS_URL`.
///
/// # Panics
///
/// When `REDIS_URL` is unset: run the tests with `make test`, or start a
/// server with `scripts/redis/start.sh` and export the URL it prints.
pub fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "REDIS_URL is not set: the integration tests need a real Redis. Run `make test`, \
             or `export REDIS_URL=$(scripts/redis/start.sh)` and then `cargo test`"
        ),
    }
}

/// The redis-server binary for [`PrivateRedis`]: `REDBELL_REDIS_SERVER`, else
/// `redis-server` on `PATH`.
pub fn redis_server_bin() -> String {
    std::env::var("REDBELL_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// A lock name no other test (or earlier run) uses: `what-<uuid>`.
pub fn unique(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

/// The Redis key of lock `name` under the default prefix: `redbell:{name}`.
pub fn lock_key(name: &str) -> String {
    format!("redbell:{{{name}}}")
}

/// The fencing counter key of lock `name`: `redbell:{name}:fence`.
pub fn fence_key(name: &str) -> String {
    format!("redbell:{{{name}}}:fence")
}

/// The cluster hash tag of lock `name`, `{name}`: every key and channel of
/// the lock (lock key, fence, waiter queue, wake-up channels) contains it,
/// so a MONITOR line naming the lock in any way contains it too.
pub fn hash_tag(name: &str) -> String {
    format!("{{{name}}}")
}

/// The SHA1 of the redbell script called `name` (`acquire`, `release`, ...).
///
/// # Panics
///
/// When redbell has no such script.
pub fn script_sha(name: &str) -> &'static str {
    redbell::scripts()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("redbell has no script called {name:?}"))
        .sha1
}

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

/// A redbell client with the default settings.
///
/// # Panics
///
/// When the client cannot connect.
pub async fn client(url: &str) -> redbell::Client {
    redbell::Client::connect(url)
        .await
        .unwrap_or_else(|e| panic!("redbell cannot connect to {url}: {e}"))
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

/// Waits (up to 10 s) until lock `name` has at least `n` subscriptions, i.e.
/// `n` clients are ready to be woken.
///
/// # Panics
///
/// When it does not happen within 10 s.
pub async fn wait_for_subscribers(url: &str, name: &str, n: i64) {
    let conn = raw(url).await;
    let ok = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { subscribers(&mut conn, name).await >= n }
    })
    .await;
    assert!(ok, "lock {name} never had {n} subscribed clients");
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

/// Polls `check` every 20 ms until it returns true or `within` has passed;
/// returns its last answer.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Records every command a Redis server executes (`MONITOR`), in the
/// background, for counting.
///
/// A line looks like
/// `1712345678.123456 [0 127.0.0.1:50000] "EVALSHA" "<sha>" "2" "redbell:{n}" ...`;
/// commands a Lua script runs appear as `[0 lua] "SET" ...`. Matching is on
/// substrings, case-insensitively.
#[derive(Debug)]
pub struct Monitor {
    url: String,
    lines: Arc<StdMutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Monitor {
    /// Starts monitoring the server at `url`; every command executed after
    /// this returns is recorded.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    pub async fn start(url: &str) -> Monitor {
        let monitor = redis::Client::open(url)
            .expect("redis url")
            .get_async_monitor()
            .await
            .unwrap_or_else(|e| panic!("MONITOR on {url}: {e}"));
        let lines = Arc::new(StdMutex::new(Vec::new()));
        let sink = lines.clone();
        let task = tokio::spawn(async move {
            let mut stream = monitor.into_on_message::<Value>();
            while let Some(value) = stream.next().await {
                let line = match value {
                    Value::SimpleString(s) => s,
                    Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                };
                sink.lock().unwrap().push(line);
            }
        });
        Monitor {
            url: url.to_owned(),
            lines,
            task,
        }
    }

    /// Waits until every command the server executed before this call has
    /// been recorded: sends a unique `ECHO` on a fresh connection and waits
    /// for it to come through (MONITOR reports commands in execution order).
    ///
    /// # Panics
    ///
    /// When the marker does not arrive within 10 s.
    pub async fn sync(&self) {
        let marker = unique("monitor-sync");
        let mut conn = raw(&self.url).await;
        let _: String = redis::cmd("ECHO")
            .arg(&marker)
            .query_async(&mut conn)
            .await
            .expect("ECHO");
        let seen = eventually(Duration::from_secs(10), || async {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&marker))
        })
        .await;
        assert!(seen, "MONITOR did not report our marker within 10 s");
    }

    /// How many lines are recorded so far; a mark for [`Monitor::count_since`].
    pub fn mark(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// A copy of the recorded lines.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The recorded lines (from index `since`) that contain every one of `needles`.
    pub fn matching_since(&self, since: usize, needles: &[&str]) -> Vec<String> {
        let needles: Vec<String> = needles.iter().map(|n| n.to_ascii_lowercase()).collect();
        self.lines.lock().unwrap()[since..]
            .iter()
            .filter(|line| {
                let line = line.to_ascii_lowercase();
                needles.iter().all(|n| line.contains(n.as_str()))
            })
            .cloned()
            .collect()
    }

    /// How many recorded lines contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.matching_since(0, needles).len()
    }

    /// How many lines recorded from index `since` on contain every one of `needles`.
    pub fn count_since(&self, since: usize, needles: &[&str]) -> usize {
        self.matching_since(since, needles).len()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A redis-server of the test's own on a free loopback port, killed on drop.
///
/// Started with `--save '' --appendonly no`, so a restart comes back empty.
#[derive(Debug)]
pub struct PrivateRedis {
    port: u16,
    password: Option<String>,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts a server and waits until it answers PING.
    ///
    /// # Panics
    ///
    /// When redis-server cannot be started or does not answer within 10 s.
    pub async fn start() -> PrivateRedis {
        Self::start_with(None).await
    }

    /// Starts a server that requires `password` (`--requirepass`).
    pub async fn start_with_password(password: &str) -> PrivateRedis {
        Self::start_with(Some(password.to_owned())).await
    }

    async fn start_with(password: Option<String>) -> PrivateRedis {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("redbell-it-{}", unique("redis")));
        std::fs::create_dir_all(&dir).expect("create the private redis dir");
        let mut redis = PrivateRedis {
            port,
            password,
            dir,
            child: None,
        };
        redis.spawn().await;
        redis
    }

    /// The URL to connect to, with the password when there is one.
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The URL without any password.
    pub fn url_without_password(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a fresh (empty) one on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// Starts the server process if it is not running, and waits for PING.
    pub async fn spawn(&mut self) {
        assert!(self.child.is_none(), "the private redis is already running");
        let bin = redis_server_bin();
        let mut cmd = Command::new(&bin);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--daemonize")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(pw) = &self.password {
            cmd.arg("--requirepass").arg(pw);
        }
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {bin}: {e} (install redis-server or set REDBELL_REDIS_SERVER; \
                 `scripts/redis/install.sh` installs it)"
            )
        });
        self.child = Some(child);
        let url = self.url();
        let up = eventually(Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                let Ok(client) = redis::Client::open(url) else {
                    return false;
                };
                let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                    return false;
                };
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                matches!(pong.as_deref(), Ok("PONG"))
            }
        })
        .await;
        if !up {
            self.stop();
            panic!(
                "private redis-server on port {} did not answer PING within 10 s",
                self.port
            );
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}
