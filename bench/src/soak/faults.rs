//! The worker pool and the faults injected into it.
//!
//! Process faults hit a live worker that is not already stopped, picked by
//! the planned slot: SIGKILL (a fresh worker of the same kind takes its
//! place at once; `SigkillRun` picks a `redbell run` worker), SIGSTOP for
//! [`STOP_FOR`] (past its lease) then SIGCONT, and SIGSTOP of a *woken
//! waiter*: a worker waiting on a lock whose holder has just logged the end
//! of its hold (so the release is on its way and wakes it). Network faults
//! go through the worker's own proxy (the kit's `Proxy`): a partition for
//! [`STOP_FOR`], or half-open connections. Faults of the servers are in
//! `topology.rs`.
//!
//! The faults of a process's parts, each found by what the worker logged
//! (bounds in `checker/run.rs` and `checker.rs`):
//!
//! - `BlackHole`: every connection of a worker goes silent for good (its
//!   proxy's black hole); new ones work. It must work again within
//!   [`BLACK_HOLE_RECOVERY`] (+ the lease and 1 s).
//! - `FreezePool`: SIGSTOP of a pool worker once each of its tasks has
//!   been waiting a while (so each holds a place in the lock's queue), for
//!   [`STOP_FOR`]; the other workers' waits keep the 1 s free-wait bound.
//! - `FreezeHost`: SIGSTOP of [`HOST_WORKERS`] single-task workers together
//!   once each has been waiting a while on the same lock (a paused host or
//!   container), for [`STOP_FOR`]; the others' waits keep the 1 s bound
//!   (a release's standbys reach seven members past the woken one).
//! - `SigstopRun`: SIGSTOP of the `redbell run` process alone (the parent
//!   of a command that started in the last [`FRESH`]: it has most of
//!   [`RUN_HOLD`] left, past the lease) for [`STOP_FOR`]: its command must
//!   not run on once the lease can have run out.
//! - `SigstopCommand`: SIGSTOP of such a command's group, then [`TERM_AFTER`]
//!   later SIGTERM to its `redbell run` alone, as `timeout` sends (the
//!   command is in a group of its own, which `timeout`'s signal to its own
//!   group misses too). Nothing continues it: ending it is `redbell run`'s
//!   job, within --kill-grace + 2 s.
//!
//! The plain SIGSTOP spares pool workers and `redbell run` workers (on a
//! `run` worker it is `SigstopRun`; on a pool, `FreezePool` when it lands
//! as all its tasks wait), and so does a partition the pool (its queue
//! members look alive to Redis, as a frozen pool's do): each of those has
//! its own fault, to be replayed alone.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::checker::{Event, Fault, FaultKind, Record};
use super::plan::{
    BLACK_HOLE_RECOVERY, LEASE, POOL_TASKS, Planned, RUN_HOLD, STOP_FOR, TERM_AFTER, WorkerKind,
};
use super::topology::Topology;
use super::worker_io::now_us;
use crate::fail::{EX_FAILURE, Failure};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use redbell_testkit::Proxy;

/// How long a woken waiter (or a waiting pool, or a running command) is
/// looked for.
const WAITER_SEARCH: Duration = Duration::from_secs(3);

/// How recently a command hit by `SigstopRun` or `SigstopCommand` started.
const FRESH: Duration = Duration::from_millis(300);

/// How many workers `FreezeHost` freezes together.
const HOST_WORKERS: usize = 3;

/// How long each worker hit by `FreezeHost` has been waiting: its attempt
/// (a round trip of about a millisecond) has queued it. Single-task
/// workers in a stream of 5 ms holds seldom wait longer.
const HOST_QUEUED_FOR: Duration = Duration::from_millis(3);

/// How long each task of a pool hit by `FreezePool` has been waiting: long
/// enough for its attempt to have queued it.
const QUEUED_FOR: Duration = Duration::from_millis(20);

/// A running worker process.
pub struct Worker {
    pub id: String,
    pub kind: WorkerKind,
    pub lock: String,
    pub child: tokio::process::Child,
    /// When a stopped (or partitioned) worker is due to be continued
    /// (healed), and its fault's index.
    pub stopped: Option<(Instant, usize)>,
    /// The process stopped, when not the worker's group (`SigstopRun`: its
    /// `redbell run`).
    pub stopped_pid: Option<u32>,
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
                Proxy::start(0, port)
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
            stopped_pid: None,
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
                let kind = self.faults[fault].kind;
                match kind {
                    FaultKind::Partition => {
                        if let Some(p) = &w.proxy {
                            p.resume();
                        }
                    }
                    // Nothing to undo (their `until_us` was set when
                    // injected): they only kept other faults off it.
                    FaultKind::HalfOpen | FaultKind::BlackHole | FaultKind::SigstopCommand => {}
                    FaultKind::SigstopRun => {
                        if let Some(pid) = w.stopped_pid {
                            signal_pid(pid, Signal::SIGCONT);
                        }
                    }
                    _ => signal(&w.child, Signal::SIGCONT),
                }
                if !matches!(
                    kind,
                    FaultKind::HalfOpen | FaultKind::BlackHole | FaultKind::SigstopCommand
                ) {
                    self.faults[fault].until_us = Some(now_us());
                }
                w.stopped = None;
                w.stopped_pid = None;
            }
        }
    }

    /// The live (not stopped) workers that `kind` may hit.
    fn targets(&self, kind: FaultKind) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|&i| self.workers[i].stopped.is_none())
            .filter(|&i| {
                let w = &self.workers[i];
                match kind {
                    FaultKind::SigkillRun | FaultKind::SigstopRun | FaultKind::SigstopCommand => {
                        w.kind == WorkerKind::Run
                    }
                    FaultKind::FreezePool => w.kind == WorkerKind::Pool,
                    // Readers wait on writers, not in a queue of their own.
                    // A FairMutex grants its frozen heads in turn, a claim
                    // each (1.3 s behind three, `frozen_host.rs`): past the
                    // soak's 1 s, so not here.
                    FaultKind::FreezeHost => !matches!(
                        w.kind,
                        WorkerKind::Run
                            | WorkerKind::Pool
                            | WorkerKind::RwRead
                            | WorkerKind::Fair
                            | WorkerKind::PythonFair
                    ),
                    FaultKind::Sigstop | FaultKind::SigstopWaiter => {
                        !matches!(w.kind, WorkerKind::Run | WorkerKind::Pool)
                    }
                    FaultKind::Partition => w.proxy.is_some() && w.kind != WorkerKind::Pool,
                    FaultKind::HalfOpen | FaultKind::BlackHole => w.proxy.is_some(),
                    _ => true,
                }
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
            if until.is_some() {
                fault.until_us = until;
                self.faults.push(fault);
            }
            return Ok(line);
        }
        if let Some(line) = topo.inject_client(planned.kind).await {
            self.faults.push(fault);
            return Ok(line);
        }
        if planned.kind == FaultKind::FreezeHost {
            return Ok(self.freeze_host(planned.slot).await);
        }
        // The command's pid and its `redbell run`'s, for the faults of those.
        let mut pids = None;
        let i = if planned.kind == FaultKind::SigstopWaiter {
            match self.woken_waiter(planned.slot).await {
                Some(i) => i,
                None => return Ok("no woken waiter found to SIGSTOP".into()),
            }
        } else if planned.kind == FaultKind::FreezePool {
            match self.waiting_pool(planned.slot).await {
                Some(i) => i,
                None => return Ok("no pool with all its tasks waiting found to SIGSTOP".into()),
            }
        } else if matches!(
            planned.kind,
            FaultKind::SigstopRun | FaultKind::SigstopCommand
        ) {
            match self.running_command(planned.slot).await {
                Some((i, pid, ppid)) => {
                    pids = Some((pid, ppid));
                    i
                }
                None => return Ok("no redbell run command just started found".into()),
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
                signal(&w.child, Signal::SIGKILL);
                let _ = w.child.wait().await;
                // Dead by now: anything it logged came before this.
                fault.at_us = now_us();
                let new = self.spawn(w.kind, &w.lock).await?;
                format!("SIGKILL {id}; {new} starts in its place")
            }
            FaultKind::Partition => {
                if let Some(p) = &self.workers[i].proxy {
                    p.partition().await;
                }
                self.workers[i].stopped = Some((due, self.faults.len()));
                format!("partition {id} for {} ms", STOP_FOR.as_millis())
            }
            FaultKind::BlackHole => {
                let n = match &self.workers[i].proxy {
                    Some(p) => p.blackhole().await,
                    None => 0,
                };
                // Not live until it must work again (`checker/run.rs`
                // judges that); no other fault hits it meanwhile.
                fault.until_us = Some(fault.at_us + BLACK_HOLE_RECOVERY.as_micros() as u64);
                self.workers[i].stopped =
                    Some((Instant::now() + BLACK_HOLE_RECOVERY, self.faults.len()));
                format!("black hole: every connection of {id} silent ({n} relayed so far)")
            }
            FaultKind::SigstopRun => {
                let Some((pid, ppid)) = pids else {
                    return Ok("no command found".into());
                };
                signal_pid(ppid, Signal::SIGSTOP);
                self.workers[i].stopped = Some((due, self.faults.len()));
                self.workers[i].stopped_pid = Some(ppid);
                format!(
                    "SIGSTOP {id}'s redbell run (pid {ppid}; its command, pid {pid}, runs on) for {} ms",
                    STOP_FOR.as_millis()
                )
            }
            FaultKind::SigstopCommand => {
                let Some((pid, ppid)) = pids else {
                    return Ok("no command found".into());
                };
                signal_pid_group(pid, Signal::SIGSTOP);
                tokio::time::sleep(TERM_AFTER).await;
                // The bound runs from the SIGTERM.
                fault.until_us = Some(now_us());
                signal_pid(ppid, Signal::SIGTERM);
                self.workers[i].stopped = Some((due, self.faults.len()));
                format!(
                    "SIGSTOP {id}'s command (group {pid}), then {} ms later SIGTERM its redbell run (pid {ppid})",
                    TERM_AFTER.as_millis()
                )
            }
            FaultKind::HalfOpen => {
                let n = match &self.workers[i].proxy {
                    Some(p) => p.blackhole().await,
                    None => 0,
                };
                // Its connections are dead until it notices: judged as
                // stopped for a lease and a second.
                fault.until_us =
                    Some(fault.at_us + (LEASE + Duration::from_secs(1)).as_micros() as u64);
                self.workers[i].stopped = Some((Instant::now() + LEASE, self.faults.len()));
                format!("half-open: server side of {id}'s connections closed ({n} relayed so far)")
            }
            _ => {
                signal(&self.workers[i].child, Signal::SIGSTOP);
                self.workers[i].stopped = Some((due, self.faults.len()));
                let what = match planned.kind {
                    FaultKind::SigstopWaiter => "woken waiter ",
                    FaultKind::FreezePool => "pool (every task waiting) ",
                    _ => "",
                };
                format!("SIGSTOP {what}{id} for {} ms", STOP_FOR.as_millis())
            }
        };
        self.faults.push(fault);
        Ok(line)
    }

    /// `FreezeHost`: SIGSTOP of [`HOST_WORKERS`] workers waiting on one
    /// lock, together, for [`STOP_FOR`]; one fault record each.
    async fn freeze_host(&mut self, slot: usize) -> String {
        let Some(host) = self.waiting_host(slot).await else {
            return "no three workers waiting ahead of another on one lock found to SIGSTOP".into();
        };
        for &i in &host {
            signal(&self.workers[i].child, Signal::SIGSTOP);
        }
        let (at_us, due) = (now_us(), Instant::now() + STOP_FOR);
        let mut ids = Vec::new();
        for &i in &host {
            let id = self.workers[i].id.clone();
            self.workers[i].stopped = Some((due, self.faults.len()));
            self.faults.push(Fault {
                at_us,
                kind: FaultKind::FreezeHost,
                worker: Some(id.clone()),
                until_us: None,
            });
            ids.push(id);
        }
        format!(
            "SIGSTOP host: {} (each waiting on {}) for {} ms",
            ids.join(", "),
            self.workers[host[0]].lock,
            STOP_FOR.as_millis()
        )
    }

    /// The [`HOST_WORKERS`] longest-waiting workers of one lock, each
    /// waiting for [`HOST_QUEUED_FOR`] at least, with a live waiter of another
    /// worker (a pool's task included) that began waiting after them all:
    /// behind them in the queue. The slot picks among the locks that have
    /// them.
    async fn waiting_host(&mut self, slot: usize) -> Option<Vec<usize>> {
        let deadline = Instant::now() + WAITER_SEARCH;
        let eligible = self.targets(FaultKind::FreezeHost);
        while Instant::now() < deadline {
            let queued_before = now_us().saturating_sub(HOST_QUEUED_FOR.as_micros() as u64);
            // Per live worker: the starts of its tasks' open waits.
            let mut waiting: std::collections::BTreeMap<&str, Vec<(u64, usize)>> =
                Default::default();
            for (i, w) in self.workers.iter().enumerate() {
                if w.stopped.is_some() {
                    continue;
                }
                let mut last: std::collections::HashMap<String, Record> = Default::default();
                for r in tail(&self.log(&w.id), 16 * 1024) {
                    last.insert(r.worker.clone(), r);
                }
                for r in last.values().filter(|r| r.event == Event::Wait) {
                    waiting.entry(&w.lock).or_default().push((r.start_us, i));
                }
            }
            let mut hosts: Vec<Vec<usize>> = Vec::new();
            for list in waiting.values_mut() {
                list.sort_unstable();
                let host: Vec<(u64, usize)> = list
                    .iter()
                    .filter(|&&(start, i)| start <= queued_before && eligible.contains(&i))
                    .take(HOST_WORKERS)
                    .copied()
                    .collect();
                let Some(&(last, _)) = host.last() else {
                    continue;
                };
                let behind = list
                    .iter()
                    .any(|&(start, i)| start > last && host.iter().all(|h| h.1 != i));
                if host.len() == HOST_WORKERS && behind {
                    hosts.push(host.into_iter().map(|h| h.1).collect());
                }
            }
            if !hosts.is_empty() {
                return Some(hosts.swap_remove(slot % hosts.len()));
            }
            // Every worker's log is read per turn: not every millisecond.
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.continue_due(false);
        }
        None
    }

    /// A worker waiting on a lock whose holder has just logged the end of
    /// its hold; the slot picks among several.
    async fn woken_waiter(&mut self, slot: usize) -> Option<usize> {
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
                .filter(|&i| !matches!(self.workers[i].kind, WorkerKind::Pool | WorkerKind::Run))
                .filter(|&i| releasing.contains(&self.workers[i].lock.as_str()))
                .collect();
            if !waiting.is_empty() {
                return Some(waiting[slot % waiting.len()]);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            // A search may last seconds: the stops due meanwhile end on time.
            self.continue_due(false);
        }
        None
    }

    /// A pool worker each of whose tasks has been waiting for
    /// [`QUEUED_FOR`] at least; the slot picks among several.
    async fn waiting_pool(&mut self, slot: usize) -> Option<usize> {
        let deadline = Instant::now() + WAITER_SEARCH;
        let pools = self.targets(FaultKind::FreezePool);
        if pools.is_empty() {
            return None;
        }
        while Instant::now() < deadline {
            let queued_before = now_us().saturating_sub(QUEUED_FOR.as_micros() as u64);
            let ready: Vec<usize> = pools
                .iter()
                .copied()
                .filter(|&i| {
                    let mut last: std::collections::HashMap<String, Record> = Default::default();
                    for r in tail(&self.log(&self.workers[i].id), 32 * 1024) {
                        last.insert(r.worker.clone(), r);
                    }
                    last.len() == POOL_TASKS
                        && last
                            .values()
                            .all(|r| r.event == Event::Wait && r.start_us <= queued_before)
                })
                .collect();
            if !ready.is_empty() {
                return Some(ready[slot % ready.len()]);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            // A search may last seconds: the stops due meanwhile end on time.
            self.continue_due(false);
        }
        None
    }

    /// A `redbell run` worker whose command started within [`FRESH`], with
    /// the command's pid and its `redbell run`'s (checked to be one).
    async fn running_command(&mut self, slot: usize) -> Option<(usize, u32, u32)> {
        let deadline = Instant::now() + WAITER_SEARCH + RUN_HOLD;
        let runs = self.targets(FaultKind::SigstopRun);
        let first = runs.first()?;
        let path = super::runner::unfenced_log(
            &self.log(&self.workers[*first].id),
            &self.workers[*first].lock,
        );
        while Instant::now() < deadline {
            let fresh_after = now_us().saturating_sub(FRESH.as_micros() as u64);
            let recs = tail(&path, 16 * 1024);
            let found: Vec<(usize, u32, u32)> = recs
                .iter()
                .filter(|r| r.event == Event::RunStart && r.start_us >= fresh_after)
                .filter(|r| {
                    !recs
                        .iter()
                        .any(|e| e.event == Event::RunEnd && e.worker == r.worker && e.seq == r.seq)
                })
                .filter_map(|r| {
                    let i = *runs.iter().find(|&&i| self.workers[i].id == r.worker)?;
                    let (pid, ppid) = (r.pid.filter(|&p| p > 1)?, r.ppid.filter(|&p| p > 1)?);
                    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
                    (comm.trim() == "redbell").then_some((i, pid, ppid))
                })
                .collect();
            if !found.is_empty() {
                return Some(found[slot % found.len()]);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.continue_due(false);
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
                    signal(&w.child, Signal::SIGKILL);
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

/// The complete records in the last `bytes` of a log.
fn tail(path: &Path, bytes: u64) -> Vec<Record> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut text = String::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(bytes))).is_err()
        || f.read_to_string(&mut text).is_err()
    {
        return Vec::new();
    }
    // (A first line cut in half does not parse.)
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Sends `sig` to a worker's process group (the worker and, for a `redbell
/// run` worker, its `redbell`).
fn signal(child: &tokio::process::Child, sig: Signal) {
    if let Some(pid) = child.id() {
        signal_pid_group(pid, sig);
    }
}

/// Sends `sig` to the process group `pgid`.
fn signal_pid_group(pgid: u32, sig: Signal) {
    kill(-(pgid as i32), sig);
}

/// Sends `sig` to the process `pid` alone.
fn signal_pid(pid: u32, sig: Signal) {
    kill(pid as i32, sig);
}

/// kill(2), not kill(1): a process spawned and waited for from the fault
/// loop would hold it up.
fn kill(target: i32, sig: Signal) {
    if let Err(e) = nix::sys::signal::kill(Pid::from_raw(target), sig) {
        eprintln!("soak: kill -{sig} {target} failed: {e}");
    }
}
