//! The worker pool and the faults injected into it and into Redis.
//!
//! Process faults hit a live worker that is not already stopped, picked by
//! the planned slot: SIGKILL (a fresh worker of the same kind takes its
//! place at once) and SIGSTOP for [`STOP_FOR`] (past its lease), then
//! SIGCONT. Server faults go through the soak's own connection:
//! `CLIENT KILL TYPE normal|pubsub` (which spares the caller) and
//! `CLIENT PAUSE 300 ALL`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

use super::checker::{Fault, FaultKind};
use super::plan::{Planned, STOP_FOR, WorkerKind};
use super::worker::now_us;
use crate::fail::{EX_FAILURE, Failure};

/// A running worker process.
pub struct Worker {
    pub id: String,
    pub kind: WorkerKind,
    pub lock: String,
    pub child: tokio::process::Child,
    /// When a stopped worker is due to be continued, and its fault's index.
    pub stopped: Option<(Instant, usize)>,
}

/// The workers of a run, their logs, and the faults injected so far.
pub struct Pool {
    pub url: String,
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub stop_file: PathBuf,
    pub hold_ms: u64,
    pub workers: Vec<Worker>,
    pub faults: Vec<Fault>,
    next_id: usize,
}

impl Pool {
    pub fn new(url: &str, dir: &Path, hold_ms: u64) -> Result<Pool, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
        Ok(Pool {
            url: url.to_owned(),
            exe,
            dir: dir.to_owned(),
            stop_file: dir.join("stop"),
            hold_ms,
            workers: Vec::new(),
            faults: Vec::new(),
            next_id: 0,
        })
    }

    /// Starts one more worker of `kind` on `lock`; returns its id.
    pub fn spawn(&mut self, kind: WorkerKind, lock: &str) -> Result<String, Failure> {
        self.next_id += 1;
        let id = format!("{}{}", kind.name(), self.next_id);
        let kind_arg = clap::ValueEnum::to_possible_value(&kind)
            .expect("no skipped kinds")
            .get_name()
            .to_owned();
        let child = tokio::process::Command::new(&self.exe)
            .env("REDIS_URL", &self.url)
            .arg("soak-worker")
            .args(["--id", &id, "--kind", &kind_arg, "--lock", lock])
            .arg("--log")
            .arg(self.dir.join(format!("{id}.jsonl")))
            .arg("--stop-file")
            .arg(&self.stop_file)
            .args(["--hold-ms", &self.hold_ms.to_string()])
            .stdin(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start worker {id}: {e}")))?;
        self.workers.push(Worker {
            id: id.clone(),
            kind,
            lock: lock.to_owned(),
            child,
            stopped: None,
        });
        Ok(id)
    }

    /// Continues the stopped workers that are due (all of them with `all`).
    pub fn continue_due(&mut self, all: bool) {
        let now = Instant::now();
        for w in &mut self.workers {
            if let Some((due, fault)) = w.stopped
                && (all || due <= now)
            {
                signal(&w.child, "CONT");
                self.faults[fault].until_us = Some(now_us());
                w.stopped = None;
            }
        }
    }

    /// Injects `planned`; returns a line describing it.
    pub async fn inject(
        &mut self,
        planned: &Planned,
        conn: &mut ConnectionManager,
    ) -> Result<String, Failure> {
        let at_us = now_us();
        let mut fault = Fault {
            at_us,
            kind: planned.kind,
            worker: None,
            until_us: None,
        };
        let line = match planned.kind {
            FaultKind::Sigkill | FaultKind::Sigstop => {
                let live: Vec<usize> = (0..self.workers.len())
                    .filter(|&i| self.workers[i].stopped.is_none())
                    .collect();
                let Some(&i) = live.get(planned.slot % live.len().max(1)) else {
                    return Ok("no live worker to hit".into());
                };
                let id = self.workers[i].id.clone();
                fault.worker = Some(id.clone());
                if planned.kind == FaultKind::Sigkill {
                    let mut w = self.workers.remove(i);
                    signal(&w.child, "KILL");
                    let _ = w.child.wait().await;
                    // Dead by now: anything it logged came before this.
                    fault.at_us = now_us();
                    let new = self.spawn(w.kind, &w.lock)?;
                    format!("SIGKILL {id}; {new} starts in its place")
                } else {
                    signal(&self.workers[i].child, "STOP");
                    self.workers[i].stopped = Some((Instant::now() + STOP_FOR, self.faults.len()));
                    format!("SIGSTOP {id} for {} ms", STOP_FOR.as_millis())
                }
            }
            FaultKind::ClientKillNormal | FaultKind::ClientKillPubsub => {
                let ty = if planned.kind == FaultKind::ClientKillNormal {
                    "normal"
                } else {
                    "pubsub"
                };
                let n: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg(ty)
                    .query_async(conn)
                    .await;
                match n {
                    Ok(n) => format!("CLIENT KILL TYPE {ty}: {n} connections"),
                    Err(e) => format!("CLIENT KILL TYPE {ty} failed: {e}"),
                }
            }
            FaultKind::ClientPause => {
                let r: redis::RedisResult<()> = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(300)
                    .arg("ALL")
                    .query_async(conn)
                    .await;
                match r {
                    Ok(()) => "CLIENT PAUSE 300 ALL".to_owned(),
                    Err(e) => format!("CLIENT PAUSE failed: {e}"),
                }
            }
        };
        self.faults.push(fault);
        Ok(line)
    }

    /// Tells every worker to stop and waits up to `grace` for them; kills
    /// (without counting it as a fault) and returns the ids of those that
    /// did not exit in time.
    pub async fn stop(&mut self, grace: Duration) -> Result<Vec<String>, Failure> {
        self.continue_due(true);
        std::fs::write(&self.stop_file, b"stop\n").map_err(|e| {
            Failure::new(
                EX_FAILURE,
                format!("cannot write {}: {e}", self.stop_file.display()),
            )
        })?;
        let deadline = Instant::now() + grace;
        let mut late = Vec::new();
        for w in &mut self.workers {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, w.child.wait()).await {
                Ok(Ok(status)) if !status.success() => {
                    eprintln!("soak: worker {} exited with {status}", w.id)
                }
                Ok(_) => {}
                Err(_) => {
                    signal(&w.child, "KILL");
                    let _ = w.child.wait().await;
                    late.push(w.id.clone());
                }
            }
        }
        self.workers.clear();
        Ok(late)
    }
}

/// Sends `sig` to a worker's process group (the worker and, for a `redbell
/// run` worker, its `redbell`) with kill(1) (the bench has no unsafe code).
fn signal(child: &tokio::process::Child, sig: &str) {
    if let Some(pid) = child.id() {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), "--", &format!("-{pid}")])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("soak: kill -{sig} {pid} failed");
        }
    }
}
