//! One soak worker process (the hidden `soak-worker` subcommand): takes its
//! lock over and over until told to stop, writes the guard's fence to the
//! fence-checked store on entering and on leaving each critical section, and logs every wait,
//! acquisition, write and hold as a JSON line (see `checker.rs`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;

use super::checker::{Event, Record};
use super::plan::{LEASE, WorkerKind};
use crate::fail::{EX_FAILURE, Failure};

/// The fence-checked store: accepts a write only if its fence is at least
/// the highest fence accepted so far, and keeps that maximum. Returns 1
/// (accepted) or 0 (rejected).
const STORE_WRITE: &str = r"
local max = tonumber(redis.call('GET', KEYS[1]) or '-1')
local fence = tonumber(ARGV[1])
if fence >= max then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
";

/// The store key of lock `lock`.
pub fn store_key(lock: &str) -> String {
    format!("soak:{{{lock}}}:store")
}

/// Options of the hidden `soak-worker` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// This worker's id (in the logs and the fault lines).
    #[arg(long)]
    pub id: String,
    /// Which lock handle it uses.
    #[arg(long, value_enum)]
    pub kind: WorkerKind,
    /// The lock name.
    #[arg(long)]
    pub lock: String,
    /// The JSON-lines log to append to.
    #[arg(long)]
    pub log: PathBuf,
    /// Stop (after the current critical section) once this file exists.
    #[arg(long)]
    pub stop_file: PathBuf,
    /// How long each critical section holds the lock, in ms.
    #[arg(long, default_value_t = 5)]
    pub hold_ms: u64,
}

/// Wall clock µs (one clock: every process is on this machine).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A redbell error's variant name, e.g. `NotHeld`.
pub fn error_kind(e: &redbell::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Unknown")
        .to_owned()
}

enum Handle {
    Mutex(redbell::Mutex),
    Fair(redbell::FairMutex),
    Rw(redbell::RwLock),
}

enum Guard {
    Mutex(redbell::MutexGuard),
    Write(redbell::WriteGuard),
}

impl Guard {
    fn fence(&self) -> u64 {
        match self {
            Guard::Mutex(g) => g.fence(),
            Guard::Write(g) => g.fence(),
        }
    }

    async fn unlock(self) -> Result<(), redbell::Error> {
        match self {
            Guard::Mutex(g) => g.unlock().await,
            Guard::Write(g) => g.unlock().await,
        }
    }
}

impl Handle {
    async fn lock(&self) -> Result<Guard, redbell::Error> {
        Ok(match self {
            Handle::Mutex(m) => Guard::Mutex(m.lock().await?),
            Handle::Fair(m) => Guard::Mutex(m.lock().await?),
            Handle::Rw(l) => Guard::Write(l.write().await?),
        })
    }
}

struct Log {
    file: File,
    args: WorkerArgs,
}

impl Log {
    /// Appends one record in a single write, so a SIGKILL never leaves half
    /// a line.
    fn put(
        &mut self,
        event: Event,
        seq: u64,
        fence: Option<u64>,
        span: (u64, Option<u64>),
        outcome: Option<String>,
    ) {
        let rec = Record {
            worker: self.args.id.clone(),
            kind: self.args.kind.name().to_owned(),
            lock: self.args.lock.clone(),
            event,
            seq,
            fence,
            start_us: span.0,
            end_us: span.1,
            outcome,
        };
        let mut line = serde_json::to_string(&rec).unwrap_or_default();
        line.push('\n');
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            eprintln!("soak worker {}: cannot log: {e}", self.args.id);
        }
    }
}

/// Runs one worker until the stop file appears.
pub async fn run(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    let client = redbell::Client::builder(url)
        .default_lease(LEASE)
        .renew_every(LEASE / 3)
        .connect()
        .await
        .map_err(|e| Failure::lock(url, "soak worker cannot connect", &e))?;
    let store = redis::Client::open(url).map_err(|e| Failure::redis(url, "soak store", &e))?;
    let mut conn = ConnectionManager::new(store)
        .await
        .map_err(|e| Failure::redis(url, "soak store", &e))?;
    let handle = match args.kind {
        WorkerKind::Mutex => Handle::Mutex(client.mutex(&args.lock)),
        WorkerKind::Fair => Handle::Fair(client.fair_mutex(&args.lock)),
        WorkerKind::RwWrite => Handle::Rw(client.rwlock(&args.lock)),
    };
    let file = File::options()
        .create(true)
        .append(true)
        .open(&args.log)
        .map_err(|e| {
            Failure::new(
                EX_FAILURE,
                format!("cannot open {}: {e}", args.log.display()),
            )
        })?;
    let script = redis::Script::new(STORE_WRITE);
    let key = store_key(&args.lock);
    let hold = Duration::from_millis(args.hold_ms);
    let stop_file = args.stop_file.clone();
    let mut log = Log { file, args };

    let mut seq = 0;
    while !stopped(&stop_file) {
        seq += 1;
        let wait = now_us();
        log.put(Event::Wait, seq, None, (wait, None), None);
        let guard = match handle.lock().await {
            Ok(g) => g,
            Err(e) => {
                log.put(
                    Event::Error,
                    seq,
                    None,
                    (wait, Some(now_us())),
                    Some(format!("lock:{}", error_kind(&e))),
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let got = now_us();
        let fence = guard.fence();
        log.put(Event::Acquired, seq, Some(fence), (wait, Some(got)), None);

        // Write once on entry and once on the way out: a holder paused in
        // between (past its lease) comes back with a stale fence, which the
        // store must reject.
        let first = write(&script, &key, fence, &mut conn, &mut log, seq).await;
        tokio::time::sleep(hold).await;
        let last = write(&script, &key, fence, &mut conn, &mut log, seq).await;
        let outcome = if first == "accepted" { last } else { first };
        log.put(
            Event::Hold,
            seq,
            Some(fence),
            (got, Some(now_us())),
            Some(outcome),
        );
        if let Err(e) = guard.unlock().await {
            let t = now_us();
            log.put(
                Event::Error,
                seq,
                Some(fence),
                (t, Some(t)),
                Some(format!("unlock:{}", error_kind(&e))),
            );
        }
        // A short pause between sections so others get a turn.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// One fence-checked store write, logged; returns its outcome.
async fn write(
    script: &redis::Script,
    key: &str,
    fence: u64,
    conn: &mut ConnectionManager,
    log: &mut Log,
    seq: u64,
) -> String {
    let start = now_us();
    let res: Result<i64, _> = script.key(key).arg(fence).invoke_async(conn).await;
    let outcome = match res {
        Ok(1) => "accepted".to_owned(),
        Ok(_) => "rejected".to_owned(),
        Err(e) => format!("error:{:?}", e.kind()),
    };
    log.put(
        Event::Write,
        seq,
        Some(fence),
        (start, Some(now_us())),
        Some(outcome.clone()),
    );
    outcome
}

fn stopped(stop_file: &Path) -> bool {
    stop_file.exists()
}
