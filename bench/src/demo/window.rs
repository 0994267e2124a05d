//! One ticket window: the sale loop, under one of the locking strategies.
//!
//! Each sale, under the lock: `GET remaining`; a simulated "printing" time
//! (`--hold`); `RPUSH sales "ticket:window:fence"`; `SET remaining
//! remaining-1`. These are deliberately separate, non-atomic commands, so a
//! broken lock shows up as a duplicate ticket or an oversell. Between two
//! sales the window serves its next customer outside the lock (`--serve`).
//!
//! With `--open K` a window first opens: it takes a permit of the
//! semaphore `demo-RUN-open` (K permits), and closes (gives it back) after
//! the sale, recording when it was open (`opens`, µs) for the report's
//! concurrency check.
//!
//! A window stops when it reads `remaining <= 0`, and then uploads the
//! timestamps of its acquisitions (one `LPUSH`) for the hand-off statistics.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use crate::fail::{EX_FAILURE, Failure};

/// How a window protects its critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// redbell's event-driven mutex.
    Pubsub,
    /// The sleep-poll recipe: `SET NX PX`, sleep, retry; Lua
    /// compare-and-delete unlock.
    Poll,
    /// No lock at all (the hidden `--no-lock`): proves the checks can fail.
    Unlocked,
}

/// Everything one window needs to know.
#[derive(Debug, Clone)]
pub struct WindowConfig {
    pub run: String,
    pub window: u32,
    pub mode: Mode,
    pub poll_interval: Duration,
    pub hold: Duration,
    pub serve: Duration,
    pub lease: Duration,
    /// `--open K`: at most K windows open at once.
    pub open: Option<u32>,
}

/// The Redis keys of one demo run. Every key carries the run id as its hash
/// tag, so runs never collide and all keys of a run share one cluster slot.
#[derive(Debug, Clone)]
pub struct RunKeys {
    /// Tickets left (a decimal integer).
    pub remaining: String,
    /// The sale records, `ticket:window:fence`, in the order Redis saw them.
    pub sales: String,
    /// One record per acquisition, `window:fence:request:acquired:unlock:sold`
    /// (µs since the epoch), uploaded by each window when it stops.
    pub timings: String,
    /// Windows push their number here once connected.
    pub ready: String,
    /// The parent pushes one token per window here to start the sale.
    pub go: String,
    /// The poll baseline's lock key and fencing counter.
    pub poll_lock: String,
    pub poll_fence: String,
    /// The redbell lock's name; its keys are `redbell:{NAME}` and
    /// `redbell:{NAME}:fence`.
    pub lock_name: String,
    /// With `--open`: one record per opening, `window:opened:closed` (µs).
    pub opens: String,
    /// With `--open`: the redbell semaphore's name.
    pub open_name: String,
}

impl RunKeys {
    pub fn new(run: &str) -> RunKeys {
        let base = format!("redbell-demo:{{{run}}}");
        let lock_name = format!("demo-{run}");
        RunKeys {
            remaining: format!("{base}:remaining"),
            sales: format!("{base}:sales"),
            timings: format!("{base}:timings"),
            ready: format!("{base}:ready"),
            go: format!("{base}:go"),
            poll_lock: format!("{base}:lock"),
            poll_fence: format!("{base}:fence"),
            opens: format!("{base}:opens"),
            lock_name,
            open_name: format!("demo-{run}-open"),
        }
    }

    /// Every key the run may leave behind (the redbell lock's included).
    pub fn all(&self) -> Vec<String> {
        vec![
            self.remaining.clone(),
            self.sales.clone(),
            self.timings.clone(),
            self.ready.clone(),
            self.go.clone(),
            self.poll_lock.clone(),
            self.poll_fence.clone(),
            format!("redbell:{{{}}}", self.lock_name),
            format!("redbell:{{{}}}:fence", self.lock_name),
            self.opens.clone(),
            format!("redbell:{{{}}}:holders", self.open_name),
            format!("redbell:{{{}}}:permits", self.open_name),
            format!("redbell:{{{}}}:queue", self.open_name),
            format!("redbell:{{{}}}:queue:expiry", self.open_name),
            format!("redbell:{{{}}}:fence", self.open_name),
        ]
    }
}

/// Microseconds since the Unix epoch. All windows run on one machine, so
/// timestamps from different processes can be compared.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A data connection with bounded connect and response times.
pub async fn connect(url: &str) -> Result<MultiplexedConnection, Failure> {
    let client =
        redis::Client::open(url).map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))
}

/// The poll baseline's unlock: delete the key only if it still holds our token.
const POLL_RELEASE: &str = r#"if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0"#;

/// What a window holds between acquire and release.
enum Held {
    Redbell(redbell::MutexGuard),
    Poll(String),
    Nothing,
}

/// The lock as one window uses it.
enum Lock {
    Redbell(redbell::Mutex),
    Poll { release: redis::Script },
    Unlocked,
}

/// Runs one window: connect, report ready, wait for the start signal, sell
/// until the tickets are gone, upload the timings.
pub async fn sell(url: &str, cfg: &WindowConfig) -> Result<(), Failure> {
    let keys = RunKeys::new(&cfg.run);
    let mut conn = connect(url).await?;
    let (lock, gate) = match cfg.mode {
        Mode::Pubsub => {
            let client = redbell::Client::connect(url)
                .await
                .map_err(|e| Failure::lock(url, "cannot connect to Redis", &e))?;
            let gate = cfg
                .open
                .map(|k| client.semaphore(&keys.open_name, k).with_lease(cfg.lease));
            (
                Lock::Redbell(client.mutex(&keys.lock_name).with_lease(cfg.lease)),
                gate,
            )
        }
        Mode::Poll => (
            Lock::Poll {
                release: redis::Script::new(POLL_RELEASE),
            },
            None,
        ),
        Mode::Unlocked => (Lock::Unlocked, None),
    };
    let r = |e: redis::RedisError| Failure::redis(url, &format!("window {}", cfg.window), &e);

    let _: () = conn.lpush(&keys.ready, cfg.window).await.map_err(r)?;
    wait_for_go(&mut conn, &keys, cfg.window).await.map_err(r)?;

    let mut timings = Vec::new();
    let mut opens = Vec::new();
    loop {
        let permit =
            match &gate {
                Some(gate) => Some(gate.acquire().await.map_err(|e| {
                    Failure::lock(url, &format!("window {}: open", cfg.window), &e)
                })?),
                None => None,
            };
        let opened = now_us();
        let request = now_us();
        let (held, fence) = acquire(&lock, &mut conn, &keys, cfg, url).await?;
        let acquired = now_us();
        let remaining: i64 = conn.get(&keys.remaining).await.map_err(r)?;
        let sold = remaining > 0;
        if sold {
            tokio::time::sleep(cfg.hold).await; // printing the ticket
            let record = format!("{remaining}:{}:{fence}", cfg.window);
            let _: () = conn.rpush(&keys.sales, record).await.map_err(r)?;
            let _: () = conn.set(&keys.remaining, remaining - 1).await.map_err(r)?;
        }
        let unlock = now_us();
        release(held, &lock, &mut conn, &keys, cfg, url).await?;
        if let Some(permit) = permit {
            opens.push(format!("{}:{opened}:{}", cfg.window, now_us()));
            close(permit, cfg, url).await?;
        }
        timings.push(format!(
            "{}:{fence}:{request}:{acquired}:{unlock}:{}",
            cfg.window,
            u8::from(sold)
        ));
        if !sold {
            break;
        }
        tokio::time::sleep(cfg.serve).await; // serving the next customer
    }
    let _: () = conn.lpush(&keys.timings, timings).await.map_err(r)?;
    if !opens.is_empty() {
        let _: () = conn.lpush(&keys.opens, opens).await.map_err(r)?;
    }
    Ok(())
}

/// Closes the window: gives its permit back. A permit lost before that
/// (its lease ran out) is an error: more than K windows may have been open.
async fn close(permit: redbell::Permit, cfg: &WindowConfig, url: &str) -> Result<(), Failure> {
    let what = format!("window {}: close", cfg.window);
    match permit.unlock().await {
        Ok(()) => Ok(()),
        Err(redbell::Error::NotHeld) => Err(Failure::new(
            EX_FAILURE,
            format!(
                "{what}: the permit's lease ({}) ran out while open; raise --lease",
                humantime::format_duration(cfg.lease)
            ),
        )),
        Err(e) => Err(Failure::lock(url, &what, &e)),
    }
}

/// Blocks until the parent pushes the start token (at most 60 s).
async fn wait_for_go(
    conn: &mut MultiplexedConnection,
    keys: &RunKeys,
    window: u32,
) -> Result<(), redis::RedisError> {
    for _ in 0..60 {
        let got: Option<(String, String)> = conn.blpop(&keys.go, 1.0).await?;
        if got.is_some() {
            return Ok(());
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Io,
        "no start signal",
        format!("window {window} waited 60 s for the parent"),
    )))
}

/// Takes the lock; returns what is held and the fence of this acquisition.
async fn acquire(
    lock: &Lock,
    conn: &mut MultiplexedConnection,
    keys: &RunKeys,
    cfg: &WindowConfig,
    url: &str,
) -> Result<(Held, u64), Failure> {
    let what = format!("window {}: acquire", cfg.window);
    match lock {
        Lock::Redbell(mutex) => {
            let guard = mutex
                .lock()
                .await
                .map_err(|e| Failure::lock(url, &what, &e))?;
            let fence = guard.fence();
            Ok((Held::Redbell(guard), fence))
        }
        Lock::Poll { .. } => {
            let token = uuid::Uuid::new_v4().simple().to_string();
            let lease_ms = cfg.lease.as_millis().max(1) as u64;
            loop {
                let set: Option<String> = redis::cmd("SET")
                    .arg(&keys.poll_lock)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(lease_ms)
                    .query_async(conn)
                    .await
                    .map_err(|e| Failure::redis(url, &what, &e))?;
                if set.is_some() {
                    break;
                }
                tokio::time::sleep(cfg.poll_interval).await;
            }
            // The recipe has no fencing; an INCR after acquiring gives the
            // invariant check something comparable.
            let fence: u64 = conn
                .incr(&keys.poll_fence, 1)
                .await
                .map_err(|e| Failure::redis(url, &what, &e))?;
            Ok((Held::Poll(token), fence))
        }
        Lock::Unlocked => {
            // No lock; a fence from a plain counter keeps the records uniform.
            let fence: u64 = conn
                .incr(&keys.poll_fence, 1)
                .await
                .map_err(|e| Failure::redis(url, &what, &e))?;
            Ok((Held::Nothing, fence))
        }
    }
}

/// Releases what `acquire` returned. Losing the lock before the release
/// (the lease ran out mid-sale) is an error: the sale may have overlapped.
async fn release(
    held: Held,
    lock: &Lock,
    conn: &mut MultiplexedConnection,
    keys: &RunKeys,
    cfg: &WindowConfig,
    url: &str,
) -> Result<(), Failure> {
    let what = format!("window {}: release", cfg.window);
    let lost = || {
        Failure::new(
            EX_FAILURE,
            format!(
                "{what}: the lock's lease ({}) ran out during a sale; raise --lease",
                humantime::format_duration(cfg.lease)
            ),
        )
    };
    match (held, lock) {
        (Held::Redbell(guard), _) => match guard.unlock().await {
            Ok(()) => Ok(()),
            Err(redbell::Error::NotHeld) => Err(lost()),
            Err(e) => Err(Failure::lock(url, &what, &e)),
        },
        (Held::Poll(token), Lock::Poll { release }) => {
            let deleted: i64 = release
                .key(&keys.poll_lock)
                .arg(token)
                .invoke_async(conn)
                .await
                .map_err(|e| Failure::redis(url, &what, &e))?;
            if deleted == 1 { Ok(()) } else { Err(lost()) }
        }
        _ => Ok(()),
    }
}
