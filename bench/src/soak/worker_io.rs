//! What a worker process is given and what it writes, shared by the
//! library workers (`worker.rs`) and the `redbell run` workers
//! (`runner.rs`): its arguments and target, the stop file, the JSON-lines
//! log and the fence-checked store, and the one clock every process logs
//! by.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::checker::{Event, Record};
use super::plan::{LEASE, RESPONSE_TIMEOUT, WorkerKind};
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

/// How a worker reaches Redis: the library's client and the store.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Connect the library through these sentinels (comma-separated URLs,
    /// master `mymaster`) instead of the global --url.
    #[arg(long)]
    pub sentinels: Option<String>,
    /// Connect the library to this Redis Cluster (comma-separated node
    /// URLs) instead of the global --url.
    #[arg(long)]
    pub cluster: Option<String>,
    /// The server of the fence-checked store (default: the global --url).
    #[arg(long)]
    pub store_url: Option<String>,
}

impl Target {
    /// The library's client, with the soak's lease.
    pub async fn client(&self, url: &str) -> Result<redbell::Client, Failure> {
        let split = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        let builder = if let Some(s) = &self.sentinels {
            let urls = split(s);
            let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
            redbell::Client::sentinel_builder(&refs, "mymaster")
        } else if let Some(c) = &self.cluster {
            let urls = split(c);
            let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
            redbell::Client::cluster_builder(&refs)
        } else {
            redbell::Client::builder(url)
        };
        builder
            .default_lease(LEASE)
            .response_timeout(RESPONSE_TIMEOUT)
            .renew_every(LEASE / 3)
            .connect()
            .await
            .map_err(|e| Failure::lock(url, "soak worker cannot connect", &e))
    }

    /// The `redbell` CLI's Redis options for the same target.
    pub fn cli_args(&self, url: &str) -> Vec<String> {
        if let Some(s) = &self.sentinels {
            vec![
                "--sentinel".into(),
                s.clone(),
                "--master".into(),
                "mymaster".into(),
            ]
        } else if let Some(c) = &self.cluster {
            vec!["--cluster".into(), c.clone()]
        } else {
            vec!["--url".into(), url.to_owned()]
        }
    }

    pub fn store_url<'a>(&'a self, url: &'a str) -> &'a str {
        self.store_url.as_deref().unwrap_or(url)
    }
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
    #[command(flatten)]
    pub target: Target,
}

pub use super::clock::now_us;

/// A redbell error's variant name, e.g. `NotHeld`.
pub fn error_kind(e: &redbell::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Unknown")
        .to_owned()
}

/// A worker's JSON-lines log.
pub struct Log {
    file: File,
    worker: String,
    kind: WorkerKind,
    lock: String,
}

impl Log {
    pub fn open(path: &Path, worker: &str, kind: WorkerKind, lock: &str) -> Result<Log, Failure> {
        // (Appends of one line each: several writers of one file, as the
        // tasks of a pool or a `redbell run` worker's commands, never mix
        // their lines.)
        let file = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Failure::new(EX_FAILURE, format!("cannot open {}: {e}", path.display()))
            })?;
        Ok(Log {
            file,
            worker: worker.to_owned(),
            kind,
            lock: lock.to_owned(),
        })
    }

    /// Appends one record in a single write, so a SIGKILL never leaves half
    /// a line.
    pub fn put(
        &mut self,
        event: Event,
        seq: u64,
        fence: Option<u64>,
        span: (u64, Option<u64>),
        outcome: Option<String>,
    ) {
        self.put_record(Record {
            worker: self.worker.clone(),
            kind: self.kind.name().to_owned(),
            lock: self.lock.clone(),
            event,
            seq,
            fence,
            start_us: span.0,
            end_us: span.1,
            outcome,
            permits: self.kind.permits(),
            pid: None,
            ppid: None,
        });
    }

    /// A `redbell run` command's line in its lock's unfenced log, now:
    /// `pids` (its own and its `redbell run`'s) on the first.
    pub fn put_run(&mut self, event: Event, seq: u64, outcome: &str, pids: Option<(u32, u32)>) {
        self.put_record(Record {
            worker: self.worker.clone(),
            kind: self.kind.name().to_owned(),
            lock: self.lock.clone(),
            event,
            seq,
            fence: None,
            start_us: now_us(),
            end_us: None,
            outcome: Some(outcome.to_owned()),
            permits: None,
            pid: pids.map(|p| p.0),
            ppid: pids.map(|p| p.1),
        });
    }

    fn put_record(&mut self, rec: Record) {
        let mut line = serde_json::to_string(&rec).unwrap_or_default();
        line.push('\n');
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            eprintln!("soak worker {}: cannot log: {e}", self.worker);
        }
    }
}

/// The fence-checked store of one lock.
pub struct Store {
    script: redis::Script,
    key: String,
    conn: ConnectionManager,
}

impl Store {
    pub async fn open(url: &str, lock: &str) -> Result<Store, Failure> {
        let client = redis::Client::open(url).map_err(|e| Failure::redis(url, "soak store", &e))?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_connection_timeout(Some(Duration::from_secs(2)));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| Failure::redis(url, "soak store", &e))?;
        Ok(Store {
            script: redis::Script::new(STORE_WRITE),
            key: store_key(lock),
            conn,
        })
    }

    /// One fence-checked write, logged; returns its outcome.
    pub async fn write(&mut self, fence: u64, log: &mut Log, seq: u64) -> String {
        let start = now_us();
        let res: Result<i64, _> = self
            .script
            .key(&self.key)
            .arg(fence)
            .invoke_async(&mut self.conn)
            .await;
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

    /// A critical section that began waiting at `wait` and got `fence` at
    /// `got`: logs the acquisition, writes on entry and on the way out (a
    /// holder paused in between comes back with a stale fence, which the
    /// store must reject) if it is given a store, and logs the hold.
    pub async fn section(
        store: Option<&mut Store>,
        log: &mut Log,
        seq: u64,
        (wait, got, fence): (u64, u64, u64),
        hold: Duration,
    ) {
        log.put(Event::Acquired, seq, Some(fence), (wait, Some(got)), None);
        let outcome = match store {
            Some(store) => {
                let first = store.write(fence, log, seq).await;
                tokio::time::sleep(hold).await;
                let last = store.write(fence, log, seq).await;
                Some(if first == "accepted" { last } else { first })
            }
            None => {
                tokio::time::sleep(hold).await;
                None
            }
        };
        log.put(
            Event::Hold,
            seq,
            Some(fence),
            (got, Some(now_us())),
            outcome,
        );
    }
}

pub fn stopped(stop_file: &Path) -> bool {
    stop_file.exists()
}
