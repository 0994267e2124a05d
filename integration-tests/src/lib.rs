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
//!
//! Beside those: the names of every key a lock uses ([`lock_key`],
//! [`waiters_key`], [`readers_key`], [`fifo_key`], ...), one-line shortcuts
//! for raw Redis commands ([`set`], [`del`], [`zcard`], [`client_list`],
//! [`commandstats`], ...), waiting helpers ([`eventually`], [`gone_within`],
//! [`promptly`], [`join_within`]), the non-atomic counter that proves mutual
//! exclusion ([`non_atomic_increment`]), a runtime that can be frozen
//! ([`Side`]), and the built binaries ([`built_binary`]).

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{ToRedisArgs, Value};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// The lease of a test lock that must not run out during the test: 30 s.
pub const LONG: Duration = Duration::from_secs(30);

/// How long an operation that should answer at once may take before the
/// test calls it hung: 5 s.
pub const PROMPT: Duration = Duration::from_secs(5);

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

/// The waiter queue of mutex `name`: `redbell:{name}:waiters` (a sorted
/// set of `<client id>:<waiter id>:<token>` members).
pub fn waiters_key(name: &str) -> String {
    format!("{}:waiters", lock_key(name))
}

/// The readers of rwlock `name`: `redbell:{name}:readers` (reader token ->
/// expiry in server ms).
pub fn readers_key(name: &str) -> String {
    format!("{}:readers", lock_key(name))
}

/// The waiting writers' intents of rwlock `name`: `redbell:{name}:writers`.
pub fn intents_key(name: &str) -> String {
    format!("{}:writers", lock_key(name))
}

/// The queue of fair mutex `name`: `redbell:{name}:fifo` (member ->
/// arrival in server µs).
pub fn fifo_key(name: &str) -> String {
    format!("{}:fifo", lock_key(name))
}

/// The queue expiries of fair mutex `name`: `redbell:{name}:fifo:expiry`
/// (member -> expiry in server ms).
pub fn fifo_expiry_key(name: &str) -> String {
    format!("{}:fifo:expiry", lock_key(name))
}

/// The wake-up channel of lock `name` for the client with id `client_id`
/// (the first field of its queue members): `redbell:{name}:wake:<id>`.
pub fn wake_channel(name: &str, client_id: &str) -> String {
    format!("{}:wake:{client_id}", lock_key(name))
}

/// The `SCAN` pattern matching every key of lock `name`: `redbell:{name}*`.
pub fn lock_pattern(name: &str) -> String {
    format!("redbell:{{{name}}}*")
}

/// A scratch key of the tests themselves in lock `name`'s hash slot:
/// `redbell-test:{name}:what`.
pub fn test_key(name: &str, what: &str) -> String {
    format!("redbell-test:{{{name}}}:{what}")
}

/// The scratch counter of lock `name` ([`non_atomic_increment`]):
/// `redbell-test:{name}:counter`.
pub fn counter_key(name: &str) -> String {
    test_key(name, "counter")
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

/// A redbell client whose locks get `lease` by default, renewed every
/// `every`.
///
/// # Panics
///
/// When the client cannot connect.
pub async fn renewing_client(url: &str, lease: Duration, every: Duration) -> redbell::Client {
    redbell::Client::builder(url)
        .default_lease(lease)
        .renew_every(every)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("redbell cannot connect to {url}: {e}"))
}

/// Loads redbell's scripts into the server and opens `c`'s connections:
/// one lock and unlock of a throwaway name. (The first EVALSHA on a fresh
/// server is a NOSCRIPT, retried after SCRIPT LOAD: warm up before
/// counting commands or timing.)
///
/// # Panics
///
/// When the lock or unlock fails.
pub async fn warm_up(c: &redbell::Client) {
    c.mutex(&unique("warm"))
        .lock()
        .await
        .expect("warm-up lock")
        .unlock()
        .await
        .expect("warm-up unlock");
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

/// `SET key value`.
pub async fn set(conn: &mut MultiplexedConnection, key: &str, value: impl ToRedisArgs) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(conn)
        .await
        .expect("SET");
}

/// `SET key value PX ms`: a value that expires like a lock's.
pub async fn set_px(conn: &mut MultiplexedConnection, key: &str, value: &str, ms: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ms)
        .query_async(conn)
        .await
        .expect("SET PX");
}

/// `DEL keys...`.
pub async fn del(conn: &mut MultiplexedConnection, keys: &[&str]) {
    let _: () = redis::cmd("DEL")
        .arg(keys)
        .query_async(conn)
        .await
        .expect("DEL");
}

/// `HSET key field value`: foreign data of the wrong type under a lock's key.
pub async fn hset(conn: &mut MultiplexedConnection, key: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg(field)
        .arg(value)
        .query_async(conn)
        .await
        .expect("HSET");
}

/// `HGETALL key` as a flat list: field, value, field, value, ...
pub async fn hgetall(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL")
}

/// `ZCARD key`: how many members a sorted set (a queue) holds.
pub async fn zcard(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

/// `ZRANGE key 0 -1`: the members of a sorted set, lowest score first.
pub async fn zrange(conn: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .expect("ZRANGE")
}

/// The server's clock in ms (`TIME`).
pub async fn server_ms(conn: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    s * 1000 + us / 1000
}

/// `CONFIG SET parameter value` (e.g. `maxclients`, to refuse reconnects).
pub async fn config_set(
    conn: &mut MultiplexedConnection,
    parameter: &str,
    value: impl ToRedisArgs,
) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(parameter)
        .arg(value)
        .query_async(conn)
        .await
        .expect("CONFIG SET");
}

/// `CONFIG RESETSTAT`: zeroes the counts [`commandstats`] reads.
pub async fn reset_stats(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .expect("CONFIG RESETSTAT");
}

/// `INFO commandstats` as command (lower case) -> calls since the last
/// [`reset_stats`].
pub async fn commandstats(conn: &mut MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// The server's connections (`CLIENT LIST`): `(id, the connection's line)`.
pub async fn client_list(conn: &mut MultiplexedConnection) -> Vec<(u64, String)> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter_map(|line| {
            let id = line.strip_prefix("id=")?.split(' ').next()?.parse().ok()?;
            Some((id, line.to_owned()))
        })
        .collect()
}

/// The ids in a [`client_list`].
pub fn client_ids(list: &[(u64, String)]) -> HashSet<u64> {
    list.iter().map(|(id, _)| *id).collect()
}

/// How many channels the connection of a [`client_list`] line is
/// subscribed to (its `sub=` field).
pub fn subscriptions(line: &str) -> usize {
    line.split(' ')
        .find_map(|f| f.strip_prefix("sub="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `CLIENT KILL ID id`.
///
/// # Panics
///
/// When no connection was killed.
pub async fn kill_client(conn: &mut MultiplexedConnection, id: u64) {
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(conn)
        .await
        .expect("CLIENT KILL ID");
    assert_eq!(killed, 1, "connection {id} was not killed");
}

/// `CLIENT KILL TYPE kind` (`normal`, `pubsub`, ...): how many connections
/// were killed. Killing `normal` connections kills `conn` too: pass a fresh
/// one.
pub async fn kill_clients_of_type(conn: &mut MultiplexedConnection, kind: &str) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query_async(conn)
        .await
        .expect("CLIENT KILL TYPE")
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
pub async fn eventually<F, Fut>(within: Duration, check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_every(within, Duration::from_millis(20), check).await
}

/// Polls `check` every `every` until it returns true or `within` has
/// passed; returns its last answer.
pub async fn eventually_every<F, Fut>(within: Duration, every: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Whether `key` is gone (or goes) within `within`: [`eventually`] not
/// [`exists`]. The caller asserts on the answer.
pub async fn gone_within(conn: &MultiplexedConnection, key: &str, within: Duration) -> bool {
    eventually(within, || {
        let mut conn = conn.clone();
        async move { !exists(&mut conn, key).await }
    })
    .await
}

/// Waits (up to 10 s, checking every `every`) until the sorted set `key`
/// holds at least `n` members: `n` waiters queued.
///
/// # Panics
///
/// When it does not happen within 10 s.
pub async fn wait_for_members(conn: &MultiplexedConnection, key: &str, n: i64, every: Duration) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = conn.clone();
    loop {
        let have = zcard(&mut conn, key).await;
        if have >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {have} of {n} members after 10 s"
        );
        tokio::time::sleep(every).await;
    }
}

/// Awaits `fut` for at most [`PROMPT`].
///
/// # Panics
///
/// When it takes longer: `what` hung.
pub async fn promptly<F: Future>(what: &str, fut: F) -> F::Output {
    timeout(PROMPT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} hung (no answer within {PROMPT:?})"))
}

/// Awaits `fut`, which must fail within [`PROMPT`]; its error.
///
/// # Panics
///
/// When `what` hung or succeeded.
pub async fn fails_promptly<T: Debug>(
    what: &str,
    fut: impl Future<Output = Result<T, redbell::Error>>,
) -> redbell::Error {
    match promptly(what, fut).await {
        Ok(v) => panic!("{what} succeeded: {v:?}"),
        Err(e) => e,
    }
}

/// Spawns `fut` and notes when it finished: the task's output is
/// `(the instant fut completed, its output)`, for measuring how soon a
/// waiter got in after a release.
pub fn spawn_timed<F>(fut: F) -> JoinHandle<(Instant, F::Output)>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(async move {
        let out = fut.await;
        (Instant::now(), out)
    })
}

/// Waits for every task, for at most `within` in all; their outputs in
/// order.
///
/// # Panics
///
/// With `on_timeout` when they did not all finish within `within`, and
/// when a task panicked.
pub async fn join_within<T>(
    within: Duration,
    tasks: Vec<JoinHandle<T>>,
    on_timeout: &str,
) -> Vec<T> {
    timeout(within, futures_util::future::join_all(tasks))
        .await
        .expect(on_timeout)
        .into_iter()
        .map(|t| t.expect("task panicked"))
        .collect()
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

    /// The URL of the monitored server.
    pub fn url(&self) -> &str {
        &self.url
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

/// A Tokio runtime (one thread) of its own, standing for another process:
/// freezing it ([`Side::freeze`]) stops its clients dead (they read
/// nothing, send nothing, run no timer) while their sockets stay open, like
/// a process that hangs or dies at a chosen moment. Stopped on drop.
#[derive(Debug)]
pub struct Side {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Keeps a [`Side`] frozen until dropped.
#[derive(Debug)]
pub struct Frozen {
    _thaw: std::sync::mpsc::Sender<()>,
}

impl Side {
    /// Starts the runtime on a thread of its own.
    pub fn start() -> Side {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("side runtime");
            handle_tx.send(rt.handle().clone()).unwrap();
            rt.block_on(async {
                let _ = stopped.await;
            });
        });
        Side {
            handle: handle_rx.recv().expect("side runtime handle"),
            stop: Some(stop),
        }
    }

    /// Spawns `future` on this runtime.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// A redbell client living on this runtime (its connections and
    /// background tasks freeze with it).
    pub async fn client(&self, url: &str) -> redbell::Client {
        let url = url.to_owned();
        self.spawn(async move { client(&url).await }).await.unwrap()
    }

    /// Blocks the runtime's only thread until the returned value is dropped.
    pub async fn freeze(&self) -> Frozen {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (thaw_tx, thaw_rx) = std::sync::mpsc::channel::<()>();
        self.spawn(async move {
            let _ = started_tx.send(());
            let _ = thaw_rx.recv(); // blocks the thread: nothing else runs
        });
        started_rx.await.expect("the side runtime froze");
        Frozen { _thaw: thaw_tx }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Runs the future `f` makes on a current-thread runtime of a new thread
/// (a separate "process" the test can block or abandon), and drops that
/// runtime, with every task still on it and without running them again,
/// when the future returns. Join the thread to know it is gone.
pub fn on_own_runtime<F, Fut>(f: F) -> std::thread::JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("own runtime");
        rt.block_on(f());
        drop(rt);
    })
}

/// `<target>/debug/<name>` (`name` may be `examples/<example>`):
/// `CARGO_TARGET_DIR` if set (an absolute dir replaces the base), else the
/// workspace's `target/`.
///
/// # Panics
///
/// When it has not been built.
pub fn built_binary(name: &str) -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bin redbell --examples` first (`make test` does)",
        path.display()
    );
    path
}

/// The built `redbell` binary ([`built_binary`]).
pub fn redbell_binary() -> PathBuf {
    built_binary("redbell")
}

/// Prints a finished process's status and output to stderr, headed
/// `--- what`, for the test's log.
pub fn log_output(what: &str, out: &Output) {
    eprintln!(
        "--- {what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `e` is a connection-level Redis failure worth retrying (what a
/// failover causes for a moment), as opposed to any other error.
pub fn retryable(e: &redbell::Error) -> bool {
    matches!(e, redbell::Error::Redis(_)) && e.is_retryable()
}

/// Calls `f` until it succeeds, for up to `within`: right after a failover
/// a command may fail with a retryable connection error for a moment.
/// Panics on any other error, and when the client has not recovered within
/// `within`. Returns the value and how many failed calls came before it.
pub async fn recovering<T, F, Fut>(what: &str, within: Duration, mut f: F) -> (T, u32)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, redbell::Error>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + within;
    let mut failed = 0;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let outcome = tokio::time::timeout(left, f()).await.unwrap_or_else(|_| {
            panic!("{what}: no answer within {within:?} ({failed} failed calls before)")
        });
        match outcome {
            Ok(v) => return (v, failed),
            Err(e) if retryable(&e) => {
                failed += 1;
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{what}: the client did not recover within {within:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what}: {e} ({:?} in)", started.elapsed()),
        }
    }
}
