//! The worker pool and the faults injected into it.
//!
//! Process faults hit a live worker that is not already stopped, picked by
//! the planned slot: SIGKILL (a fresh worker of the same kind takes its
//! place at once; `SigkillRun` picks a `redbell run` worker), SIGSTOP for
//! [`STOP_FOR`] (past its lease) then SIGCONT, and SIGSTOP of a *woken
//! waiter*: a worker waiting on a lock whose holder has just logged the end
//! of its hold (so the release is on its way and wakes it). Network faults
//! go through the worker's own proxy (`proxy.rs`): a partition for
//! [`STOP_FOR`], or half-open connections. Faults of the servers are in
//! `topology.rs`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::checker::{Event, Fault, FaultKind, Record};
use super::plan::{LEASE, Planned, STOP_FOR, WorkerKind};
use super::proxy::Proxy;
use super::topology::Topology;
use super::worker::now_us;
use crate::fail::{EX_FAILURE, Failure};

/// How long a woken waiter is looked for.
const WAITER_SEARCH: Duration = Duration::from_secs(3);

/// A running worker process.
pub struct Worker {
    pub id: String,
    pub kind: WorkerKind,
    pub lock: String,
    pub child: tokio::process::Child,
    /// When a stopped (or partitioned) worker is due to be continued
    /// (healed), and its fault's index.
    pub stopped: Option<(Instant, usize)>,
    pub proxy: Option<Proxy>,
}

/// The workers of a run, their logs, and the faults injected so far.
pub struct Pool {
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub stop_file: PathBuf,
    pub hold_ms: u64,
    pub workers: Vec<Worker>,
    pub faults: Vec<Fault>,
    /// The library's URL, or the server each worker gets a proxy to.
    url: String,
    proxy_to: Option<u16>,
    /// Passed to every worker (the target: sentinels, cluster, store).
    args: Vec<String>,
    next_id: usize,
}

impl Pool {
    pub fn new(
        url: &str,
        proxy_to: Option<u16>,
        args: Vec<String>,
        dir: &Path,
        hold_ms: u64,
    ) -> Result<Pool, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
        Ok(Pool {
            exe,
            dir: dir.to_owned(),
            stop_file: dir.join("stop"),
            hold_ms,
            workers: Vec::new(),
            faults: Vec::new(),
            url: url.to_owned(),
            proxy_to,
            args,
            next_id: 0,
        })
    }

    /// Starts one more worker of `kind` on `lock`; returns its id.
    pub async fn spawn(&mut self, kind: WorkerKind, lock: &str) -> Result<String, Failure> {
        self.next_id += 1;
        let id = format!("{}{}", kind.name(), self.next_id);
        let kind_arg = clap::ValueEnum::to_possible_value(&kind)
            .expect("no skipped kinds")
            .get_name()
            .to_owned();
        let proxy = match self.proxy_to {
            Some(port) => Some(
                Proxy::start(port)
                    .await
                    .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start a proxy: {e}")))?,
            ),
            None => None,
        };
        let url = proxy.as_ref().map_or_else(|| self.url.clone(), Proxy::url);
        let child = tokio::process::Command::new(&self.exe)
            .env("REDIS_URL", &url)
            .arg("soak-worker")
            .args(["--id", &id, "--kind", &kind_arg, "--lock", lock])
            .arg("--log")
            .arg(self.log(&id))
            .arg("--stop-file")
            .arg(&self.stop_file)
            .args(["--hold-ms", &self.hold_ms.to_string()])
            .args(&self.args)
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
            proxy,
        });
        Ok(id)
    }

    fn log(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.jsonl"))
    }

    /// Continues the stopped workers and heals the partitions that are due
    /// (all of them with `all`).
    pub fn continue_due(&mut self, all: bool) {
        let now = Instant::now();
        for w in &mut self.workers {
            if let Some((due, fault)) = w.stopped
                && (all || due <= now)
            {
                match self.faults[fault].kind {
                    FaultKind::Partition => {
                        if let Some(p) = &w.proxy {
                            p.partition(false);
                        }
                    }
                    FaultKind::HalfOpen => {}
                    _ => signal(&w.child, "CONT"),
                }
                if self.faults[fault].kind != FaultKind::HalfOpen {
                    self.faults[fault].until_us = Some(now_us());
                }
                w.stopped = None;
            }
        }
    }

    /// The live (not stopped) workers that `kind` may hit.
    fn targets(&self, kind: FaultKind) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&i| self.workers[i].stopped.is_none())
            .filter(|&i| kind != FaultKind::SigkillRun || self.workers[i].kind == WorkerKind::Run)
            .filter(|&i| {
                !matches!(kind, FaultKind::Partition | FaultKind::HalfOpen)
                    || self.workers[i].proxy.is_some()
            })
            .collect()
    }

    /// Injects `planned`; returns a line describing it.
    pub async fn inject(
        &mut self,
        planned: &Planned,
        topo: &mut Topology,
    ) -> Result<String, Failure> {
        let mut fault = Fault {
            at_us: now_us(),
            kind: planned.kind,
            worker: None,
            until_us: None,
        };
        if planned.kind.is_server() {
            let (line, until) = topo.inject(planned).await?;
            fault.until_us = until;
            self.faults.push(fault);
            return Ok(line);
        }
        if let Some(line) = topo.inject_client(planned.kind).await {
            self.faults.push(fault);
            return Ok(line);
        }
        let i = if planned.kind == FaultKind::SigstopWaiter {
            match self.woken_waiter(planned.slot).await {
                Some(i) => i,
                None => return Ok("no woken waiter found to SIGSTOP".into()),
            }
        } else {
            let live = self.targets(planned.kind);
            let Some(&i) = live.get(planned.slot % live.len().max(1)) else {
                return Ok(format!(
                    "no live worker to hit with {}",
                    planned.kind.name()
                ));
            };
            i
        };
        let id = self.workers[i].id.clone();
        fault.worker = Some(id.clone());
        fault.at_us = now_us();
        let due = Instant::now() + STOP_FOR;
        let line = match planned.kind {
            FaultKind::Sigkill | FaultKind::SigkillRun => {
                let mut w = self.workers.remove(i);
                signal(&w.child, "KILL");
                let _ = w.child.wait().await;
                // Dead by now: anything it logged came before this.
                fault.at_us = now_us();
                let new = self.spawn(w.kind, &w.lock).await?;
                format!("SIGKILL {id}; {new} starts in its place")
            }
            FaultKind::Partition => {
                if let Some(p) = &self.workers[i].proxy {
                    p.partition(true);
                }
                self.workers[i].stopped = Some((due, self.faults.len()));
                format!("partition {id} for {} ms", STOP_FOR.as_millis())
            }
            FaultKind::HalfOpen => {
                let n = self.workers[i].proxy.as_ref().map_or(0, Proxy::half_open);
                // Its connections are dead until it notices: judged as
                // stopped for a lease and a second.
                fault.until_us =
                    Some(fault.at_us + (LEASE + Duration::from_secs(1)).as_micros() as u64);
                self.workers[i].stopped = Some((Instant::now() + LEASE, self.faults.len()));
                format!("half-open: server side of {id}'s connections closed ({n} relayed so far)")
            }
            _ => {
                signal(&self.workers[i].child, "STOP");
                self.workers[i].stopped = Some((due, self.faults.len()));
                let what = if planned.kind == FaultKind::SigstopWaiter {
                    "woken waiter "
                } else {
                    ""
                };
                format!("SIGSTOP {what}{id} for {} ms", STOP_FOR.as_millis())
            }
        };
        self.faults.push(fault);
        Ok(line)
    }

    /// A worker waiting on a lock whose holder has just logged the end of
    /// its hold; the slot picks among several.
    async fn woken_waiter(&self, slot: usize) -> Option<usize> {
        let deadline = Instant::now() + WAITER_SEARCH;
        while Instant::now() < deadline {
            let last: Vec<Option<Event>> = self
                .workers
                .iter()
                .map(|w| last_event(&self.log(&w.id)))
                .collect();
            let releasing: Vec<&str> = (0..self.workers.len())
                .filter(|&i| last[i] == Some(Event::Hold))
                .map(|i| self.workers[i].lock.as_str())
                .collect();
            let waiting: Vec<usize> = (0..self.workers.len())
                .filter(|&i| self.workers[i].stopped.is_none() && last[i] == Some(Event::Wait))
                .filter(|&i| releasing.contains(&self.workers[i].lock.as_str()))
                .collect();
            if !waiting.is_empty() {
                return Some(waiting[slot % waiting.len()]);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
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

/// The event of the last complete line of a worker's log.
fn last_event(path: &Path) -> Option<Event> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(1024))).ok()?;
    let mut tail = String::new();
    f.read_to_string(&mut tail).ok()?;
    let line = tail.trim_end().rsplit('\n').next()?;
    serde_json::from_str::<Record>(line).ok().map(|r| r.event)
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
