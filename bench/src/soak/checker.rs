//! The soak's verdict: a pure function from the workers' log records and
//! the injected faults to the numbers of the report and the broken bounds.
//!
//! # What the workers log (one JSON object a line, wall clock µs)
//!
//! Every critical section of a worker has a sequence number `seq` and up to
//! four records: `wait` when it calls `lock()` (`start_us`), `acquired` when
//! the call returned (`start_us` = wait start, `end_us` = got the lock, with
//! the guard's `fence`), `write` around each fence-checked store write (one
//! on entry, one on the way out; `outcome` = `accepted` / `rejected` /
//! `error:KIND`) and `hold` just
//! before `unlock()` (`start_us` = got the lock, `end_us` = about to
//! unlock). A failed `lock()` or `unlock()` is an `error` record whose
//! `outcome` is `lock:KIND` or `unlock:KIND`. A semaphore's workers log its
//! permit count (`permits`) with every record: the lock's *capacity*, how
//! many may hold it at once (1 for the other kinds; readers share among
//! themselves within that 1, as a writer's hold excludes them all).
//!
//! A recorded hold lies inside the real one (it starts after Redis granted
//! the lock and ends before the release was sent), so two recorded holds
//! that intersect did overlap in Redis. A SIGKILLed worker's open wait or
//! hold ends at its kill.
//!
//! # The bounds
//!
//! - **Stale writes accepted = 0**: an accepted write whose fence is lower
//!   than that of a write accepted before it started.
//! - **Unexplained overlaps = 0**: a hold that starts while `capacity`
//!   others hold the lock (readers not counting against readers) is
//!   allowed only if a fault explains it: one side's worker SIGSTOPped,
//!   partitioned or half-open for longer than the lease during its hold,
//!   or a server fault between the grants that may have lost the earlier
//!   one. Each explained pair is counted by its cause; what is left
//!   unexplained beyond `capacity - 1` others is a violation each (with a
//!   capacity of 1, every unexplained pair). The paused side's last write
//!   must then not have been accepted after the other side's write (a
//!   stale write). Its write being accepted *before* the successor's first
//!   write is what fencing cannot catch; it is counted, not a violation.
//! - **Longest free wait ≤ 1 s** (lease + 1 s right after a SIGKILL or
//!   SIGSTOP of the holder): for each hold that starts while fewer than
//!   `capacity` hold the lock, the time since they fell below it (with a
//!   capacity of 1: since the last hold ended) that a live waiter (not
//!   stopped) spent waiting: how long a lock, or a semaphore's permit, sat
//!   free while someone waited for it.
//! - **Stranded waiters = 0**: a wait with no end after the workers were
//!   told to stop and given time.
//!
//! # Why semaphore holders write nothing
//!
//! The store keeps the highest fence it accepted and rejects lower ones:
//! right for a lock, whose holders follow one another. Permit holders do
//! not: a holder of fence 10 may legitimately write after holders of 11,
//! 12, ... took the other permits, wrote and let go, so the store would
//! reject correct behaviour. Nor can a resource tell a stale lower fence
//! from a live one by fences alone, and a store per permit slot would
//! need a slot number, which the semaphore does not hand out (a permit is
//! any member of its holders set). Its holds are judged by the capacity
//! above instead.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use super::stalls::{Stall, stalled_within};

/// One line of a worker's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub worker: String,
    pub kind: String,
    pub lock: String,
    pub event: Event,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    pub start_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// A semaphore's permit count (absent for the other kinds: one holder,
    /// or readers sharing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// On a `run_start` line: the command's pid (its process group) and
    /// its parent's, the `redbell run` that runs it (the faults aimed at
    /// either read them here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
}

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Wait,
    Acquired,
    Write,
    Hold,
    Error,
    /// A `redbell run` command's lines in the lock's unfenced log
    /// (`run.rs`): when it starts, every [`RUN_LINE_EVERY`] while it runs,
    /// when it ends (`outcome`: `done` or `sigterm`).
    ///
    /// [`RUN_LINE_EVERY`]: super::plan::RUN_LINE_EVERY
    RunStart,
    RunLine,
    RunEnd,
}

pub use super::fault_kind::FaultKind;

/// The process of a worker id: a pool worker's tasks log as `ID/TASK`, and
/// a fault aimed at `ID` hits them all.
pub fn process_of(worker: &str) -> &str {
    worker.split_once('/').map_or(worker, |(p, _)| p)
}

/// One injected fault; `until_us` is when a stopped worker was continued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub at_us: u64,
    pub kind: FaultKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_us: Option<u64>,
}

/// The kind of the workers that hold a lock shared (`RwLock` readers).
pub const READER: &str = "rw-read";

/// The kind of the `redbell run` workers.
pub const RUN: &str = "run";

/// How long after its command's last record `redbell run` may still be
/// releasing, and how long before the hold a killed connection may still
/// be the one its release meets.
const RUN_RELEASE_US: u64 = 500_000;

/// How long after a Sentinel failover the old primary may still take
/// writes: until the clients hear `+switch-master`, which the sentinels
/// publish once the promoted replica reports the master role (their INFO of
/// it runs every second during a failover). The old primary itself answers
/// as a primary for 8 s or more, until it is converted; the clients no
/// longer wait for that.
const SENTINEL_SPLIT_US: u64 = 3_000_000;

/// How long after the sentinels announce a new primary a client may still
/// be switching to it (hearing `+switch-master` and reconnecting).
const SWITCH_US: u64 = 500_000;

/// Why two holds may overlap when one worker was stopped through a
/// Sentinel failover's announcement (`stale_primary` below).
const STALE_PRIMARY: &str = "old primary's grant to a client stopped through the failover";

fn split_us(kind: FaultKind) -> u64 {
    if matches!(
        kind,
        FaultKind::Failover | FaultKind::SentinelFailover | FaultKind::FreezeSentinel
    ) {
        SENTINEL_SPLIT_US
    } else {
        0
    }
}

/// How far apart a restart and the store write it lost may be (the AOF
/// is fsynced every second).
const AOF_SLACK_US: u64 = 2_000_000;

/// How far back before a gap the holds that may have ended into it are
/// looked for.
const LOOK_BACK_US: u64 = 30_000_000;

/// The free-wait bound without a holder fault, and the slack added to the
/// lease after one.
pub const FREE_WAIT_BOUND_US: u64 = 1_000_000;

/// How close to a release a waiting worker's stop may still meet one of
/// its attempts in flight (written before the stop and run by the server
/// after the release, or the woken waiter's attempt, its round trip and its
/// log line, on a busy machine): such a stop is a fault of the holder the
/// attempt became. Stops further from the release find the attempt
/// answered and logged, or not yet sent.
const IN_FLIGHT_US: u64 = 20_000;

/// A broken bound: what, and the first offending interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub bound: String,
    pub lock: String,
    pub start_us: u64,
    pub end_us: u64,
    pub detail: String,
}

/// The checker's result.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    pub acquisitions: BTreeMap<String, u64>,
    pub faults: BTreeMap<String, u64>,
    pub writes_accepted: u64,
    pub writes_rejected: u64,
    pub stale_writes_accepted: u64,
    pub overlaps_explained: u64,
    pub overlaps_by_cause: BTreeMap<String, u64>,
    pub stale_writes_after_restart: u64,
    pub same_fence_double_grants: u64,
    pub overlaps_unexplained: u64,
    pub late_writes_before_successor: u64,
    pub longest_free_wait_us: u64,
    pub longest_free_wait_after_fault_us: u64,
    /// Stalls of the machine the soak's probe saw (`stalls.rs`): how
    /// many, the longest, and their total.
    pub machine_stalls: u64,
    pub longest_machine_stall_us: u64,
    pub machine_stall_total_us: u64,
    /// Free waits over their bound by no more than the machine's stalls
    /// inside them, and the longest such wait.
    pub free_waits_over_bound_in_stalls: u64,
    pub longest_free_wait_in_stalls_us: u64,
    pub stranded_waiters: u64,
    /// Pairs of `redbell run` commands of one lock whose lines in the
    /// unfenced log interleave (`run.rs`).
    pub run_overlaps: u64,
    /// The longest time from a black hole until its worker next got a lock.
    pub longest_black_hole_recovery_us: u64,
    /// The longest time from the SIGTERM to a stopped command's `redbell
    /// run` until it had exited (its command ended, its lock released).
    pub longest_stopped_command_end_us: u64,
    pub errors: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
}

#[derive(Debug, Clone)]
struct Hold {
    worker: String,
    /// When its wait began (the grant came after).
    from: u64,
    fence: u64,
    kind: String,
    /// A reader's hold (readers may overlap each other).
    shared: bool,
    start: u64,
    end: u64,
    write: Option<(u64, u64, String)>,
}

#[derive(Debug, Clone)]
struct Wait {
    worker: String,
    start: u64,
    end: Option<u64>,
    /// It ended in an error rather than a grant.
    failed: bool,
}

/// Checks the records of a run against its faults; `lease_us` is the
/// workers' lease.
#[cfg(test)]
pub fn check(records: &[Record], faults: &[Fault], lease_us: u64) -> Verdict {
    check_until(records, faults, &[], lease_us, 0)
}

/// The checker, over the records of a run whose workers were told to stop at `end_us` (0: at
/// its last record): a worker wedged for good logs nothing more, and a
/// bound that awaits its next record is broken if the run went on past it.
/// `stalls` are the machine's, in time order (`stalls.rs`): a free wait
/// may exceed its bound by the stalls inside it.
pub fn check_until(
    records: &[Record],
    faults: &[Fault],
    stalls: &[Stall],
    lease_us: u64,
    end_us: u64,
) -> Verdict {
    let mut v = Verdict {
        machine_stalls: stalls.len() as u64,
        ..Verdict::default()
    };
    for s in stalls {
        let len = s.until_us.saturating_sub(s.from_us);
        v.longest_machine_stall_us = v.longest_machine_stall_us.max(len);
        v.machine_stall_total_us += len;
    }
    for f in faults {
        *v.faults.entry(f.kind.name().to_owned()).or_default() += 1;
    }
    run::judge(records, faults, lease_us, end_us, &mut v);
    let killed: HashMap<&str, u64> = faults
        .iter()
        .filter(|f| matches!(f.kind, FaultKind::Sigkill | FaultKind::SigkillRun))
        .filter_map(|f| Some((f.worker.as_deref()?, f.at_us)))
        .collect();
    // A worker stopped, partitioned or half-open: not live meanwhile.
    let stops: Vec<(&str, u64, u64, FaultKind)> = faults
        .iter()
        .filter(|f| f.kind.stops())
        .filter_map(|f| {
            Some((
                f.worker.as_deref()?,
                f.at_us,
                f.until_us.unwrap_or(u64::MAX),
                f.kind,
            ))
        })
        .collect();
    let servers: Vec<(u64, u64, FaultKind)> = faults
        .iter()
        .filter(|f| f.kind.is_server())
        .map(|f| (f.at_us, f.until_us.unwrap_or(f.at_us), f.kind))
        .collect();
    // A worker stopped (SIGSTOP, partition) over a Sentinel failover's
    // announcement, before it could have acted on it, hears it only once
    // continued: its attempts meanwhile may still reach the old primary,
    // which answers as a primary until the sentinels convert it, and
    // grant it a lock the new primary has given another. Its window runs
    // from its continue as everyone's runs from the announcement.
    let stale_primary = |x: &Hold| {
        servers
            .iter()
            .filter(|s| split_us(s.2) > 0)
            .any(|&(at, announced, kind)| {
                stops.iter().any(|&(w, s, u, _)| {
                    w == process_of(&x.worker)
                        && s <= announced + SWITCH_US
                        && u >= announced
                        && x.start >= at
                        && x.start <= u.saturating_add(split_us(kind))
                })
            })
    };
    let restarts: Vec<u64> = servers
        .iter()
        .filter(|s| s.2 == FaultKind::Restart)
        .map(|s| s.0)
        .collect();
    // `redbell run` releases after its command exits, and does not retry a
    // release that met a killed connection: the lock frees at its lease.
    let conn_faults: Vec<u64> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::ClientKillNormal)
        .map(|f| f.at_us)
        .collect();
    let stopped_in = |worker: &str, a: u64, b: u64| -> Vec<(u64, u64)> {
        stops
            .iter()
            .filter(|(w, s, u, _)| *w == process_of(worker) && *s <= b && *u >= a)
            .map(|&(_, s, u, _)| (s, u))
            .collect()
    };
    // The fault that lets hold `x` overlap `other`: its worker stopped past
    // the lease during it, or during its wait when it holds the lower fence
    // (granted first, frozen before it could log the grant).
    let stop_cause = |x: &Hold, other: &Hold| {
        stops
            .iter()
            .find(|f| {
                let (w, s, u) = (&f.0, &f.1, &f.2);
                *w == process_of(&x.worker)
                    && f.3.cause().is_some()
                    && u.saturating_sub(*s) > lease_us
                    && *s <= x.end
                    && (*u >= x.start || (x.fence < other.fence && *u >= x.from))
            })
            .and_then(|f| f.3.cause())
    };

    // Index the records of each (worker, seq).
    let mut by_seq: BTreeMap<(&str, u64), Vec<&Record>> = BTreeMap::new();
    for r in records {
        by_seq.entry((&r.worker, r.seq)).or_default().push(r);
        match r.event {
            Event::Acquired => *v.acquisitions.entry(r.kind.clone()).or_default() += 1,
            Event::Error => {
                let kind = r.outcome.clone().unwrap_or_else(|| "unknown".into());
                *v.errors.entry(kind).or_default() += 1;
            }
            Event::Write => match r.outcome.as_deref() {
                Some("accepted") => v.writes_accepted += 1,
                Some("rejected") => v.writes_rejected += 1,
                other => {
                    let kind = format!("write:{}", other.unwrap_or("unknown"));
                    *v.errors.entry(kind).or_default() += 1;
                }
            },
            _ => {}
        }
    }

    // How many may hold each lock at once: a semaphore's permits, as its
    // workers log them; 1 for the others.
    let mut capacity: HashMap<&str, usize> = HashMap::new();
    for r in records {
        if let Some(p) = r.permits {
            let c = capacity.entry(&r.lock).or_insert(1);
            *c = (*c).max(p.max(1) as usize);
        }
    }

    let mut holds: BTreeMap<String, Vec<Hold>> = BTreeMap::new();
    let mut waits: BTreeMap<String, Vec<Wait>> = BTreeMap::new();
    let mut writes: BTreeMap<String, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for ((worker, _), recs) in &by_seq {
        let find = |e: Event| recs.iter().find(|r| r.event == e);
        let kill = killed.get(process_of(worker)).copied();
        let lock = recs[0].lock.clone();
        let acquired = find(Event::Acquired);
        if let Some(w) = find(Event::Wait) {
            let lock_err = recs.iter().find(|r| {
                r.event == Event::Error
                    && r.outcome
                        .as_deref()
                        .is_some_and(|o| o.starts_with("lock:") || o.starts_with("run:"))
            });
            let end = acquired
                .and_then(|a| a.end_us)
                .or_else(|| lock_err.and_then(|e| e.end_us))
                .or(kill.filter(|&k| k >= w.start_us));
            waits.entry(lock.clone()).or_default().push(Wait {
                worker: worker.to_string(),
                start: w.start_us,
                end,
                failed: acquired.is_none() && lock_err.is_some(),
            });
        }
        // The section's writes; the hold is judged by its last one.
        let mut write = None;
        for w in recs.iter().filter(|r| r.event == Event::Write) {
            let outcome = w.outcome.clone().unwrap_or_default();
            let end = w.end_us.unwrap_or(w.start_us);
            if outcome == "accepted" {
                writes.entry(lock.clone()).or_default().push((
                    w.start_us,
                    end,
                    w.fence.unwrap_or(0),
                ));
            }
            if write.as_ref().is_none_or(|(s, _, _)| w.start_us >= *s) {
                write = Some((w.start_us, end, outcome));
            }
        }
        if let Some(a) = acquired {
            let start = a.end_us.unwrap_or(a.start_us);
            // A `redbell run` command killed mid-section logs no hold: it
            // ran until its last line in the unfenced log at least.
            let last_line = recs
                .iter()
                .filter(|r| matches!(r.event, Event::RunLine | Event::RunEnd))
                .map(|r| r.start_us)
                .max();
            let end = find(Event::Hold)
                .and_then(|h| h.end_us)
                .or(last_line)
                .or(kill.filter(|&k| k >= start))
                .unwrap_or(start);
            holds.entry(lock.clone()).or_default().push(Hold {
                worker: worker.to_string(),
                from: a.start_us,
                fence: a.fence.unwrap_or(0),
                kind: recs[0].kind.clone(),
                shared: recs[0].kind == READER,
                start,
                end,
                write,
            });
        }
    }

    // Stale accepted writes: sweep the writes by start, keeping the highest
    // fence among those that had ended before.
    for (lock, ws) in &mut writes {
        let mut by_end = ws.clone();
        by_end.sort_by_key(|w| w.1);
        ws.sort_by_key(|w| w.0);
        let (mut j, mut max) = (0, None::<(u64, u64, u64)>);
        for &(start, end, fence) in ws.iter() {
            while j < by_end.len() && by_end[j].1 < start {
                if max.is_none_or(|m| by_end[j].2 > m.2) {
                    max = Some(by_end[j]);
                }
                j += 1;
            }
            if let Some(m) = max.filter(|m| m.2 > fence) {
                // The store lives on the restarted server: a maximum
                // written within the AOF's lost second may be gone.
                if restarts
                    .iter()
                    .any(|&r| m.1 <= r + AOF_SLACK_US && m.1 + AOF_SLACK_US >= r && r <= start)
                {
                    v.stale_writes_after_restart += 1;
                    continue;
                }
                v.stale_writes_accepted += 1;
                v.violations.push(Violation {
                    bound: "stale writes accepted = 0".into(),
                    lock: lock.clone(),
                    start_us: m.0,
                    end_us: end,
                    detail: format!("fence {fence} accepted after fence {} had been", m.2),
                });
            }
        }
    }

    for (lock, hs) in &mut holds {
        hs.sort_by_key(|h| h.start);
        // Overlaps.
        let capacity = capacity.get(lock.as_str()).copied().unwrap_or(1);
        let mut active: Vec<&Hold> = Vec::new();
        for h in hs.iter() {
            if h.kind == RUN {
                // `redbell run` commands are judged by their unfenced log
                // instead, with no fencing excuse (`run.rs`).
                continue;
            }
            active.retain(|a| a.end > h.start);
            let others: Vec<&Hold> = active
                .iter()
                .filter(|a| !(a.shared && h.shared))
                .copied()
                .collect();
            // Within the capacity: nothing to explain.
            if others.len() < capacity {
                active.push(h);
                continue;
            }
            let mut unexplained: Vec<&Hold> = Vec::new();
            for &a in &others {
                // `a` started first; a server fault between the two grants
                // may have lost `a`'s.
                let lost = servers
                    .iter()
                    .find(|s| a.start <= s.1 + split_us(s.2) && s.0 <= h.start)
                    .and_then(|s| s.2.cause());
                let (paused, other, cause) = if let Some(c) = stop_cause(a, h) {
                    (a, h, c)
                } else if let Some(c) = stop_cause(h, a) {
                    (h, a, c)
                } else if let Some(c) = lost {
                    (a, h, c)
                } else if stale_primary(h) {
                    (h, a, STALE_PRIMARY)
                } else if stale_primary(a) {
                    (a, h, STALE_PRIMARY)
                } else {
                    unexplained.push(a);
                    continue;
                };
                v.overlaps_explained += 1;
                *v.overlaps_by_cause.entry(cause.to_owned()).or_default() += 1;
                let accepted = |x: &Hold| x.write.as_ref().is_some_and(|w| w.2 == "accepted");
                if !a.shared && !h.shared && a.fence == h.fence && accepted(a) && accepted(h) {
                    // Fencing cannot tell these two apart.
                    v.same_fence_double_grants += 1;
                    v.violations.push(Violation {
                        bound: "double grants with one fence, both written = 0".into(),
                        lock: lock.clone(),
                        start_us: h.start,
                        end_us: a.end.min(h.end),
                        detail: format!(
                            "{} and {} both wrote fence {} ({cause})",
                            a.worker, h.worker, h.fence
                        ),
                    });
                }
                if let Some((ws, _, o)) = &paused.write
                    && o == "accepted"
                    && *ws > other.start
                {
                    v.late_writes_before_successor += 1;
                }
            }
            // `h` started while `capacity` others held it with no fault to
            // excuse them: a violation for each unexplained pair on a lock,
            // one for the hold on a semaphore, counting the holders too many.
            if unexplained.len() >= capacity && capacity == 1 {
                for a in &unexplained {
                    v.overlaps_unexplained += 1;
                    v.violations.push(Violation {
                        bound: "unexplained overlapping holds = 0".into(),
                        lock: lock.clone(),
                        start_us: h.start,
                        end_us: a.end.min(h.end),
                        detail: format!("{} and {} held it at once", a.worker, h.worker),
                    });
                }
            } else if unexplained.len() >= capacity {
                v.overlaps_unexplained += (unexplained.len() + 1 - capacity) as u64;
                let names: Vec<&str> = unexplained.iter().map(|x| x.worker.as_str()).collect();
                v.violations.push(Violation {
                    bound: "unexplained overlapping holds = 0".into(),
                    lock: lock.clone(),
                    start_us: h.start,
                    // Until the first of them let go.
                    end_us: unexplained.iter().map(|x| x.end).fold(h.end, u64::min),
                    detail: format!(
                        "{} got one of {capacity} permits while {} held them",
                        h.worker,
                        names.join(", ")
                    ),
                });
            }
            active.push(h);
        }

        // Free time while someone waited.
        let mut by_worker: BTreeMap<&str, Vec<&Wait>> = BTreeMap::new();
        for w in waits.get(lock.as_str()).into_iter().flatten() {
            by_worker.entry(&w.worker).or_default().push(w);
        }
        for list in by_worker.values_mut() {
            list.sort_by_key(|w| w.start);
        }
        // Whether a fault hit a holder whose lock may have sat taken in
        // Redis (up to its lease) into the gap before `gap_end`.
        let hit = |x: &Hold, gap_end: u64| {
            killed
                .get(process_of(&x.worker))
                .is_some_and(|&k| k >= x.start && k <= gap_end)
                // (A woken waiter stopped, or a pool stopped while all its
                // tasks waited, had let go of its last hold: not
                // a holder fault; if it was granted the lock just before,
                // `frozen_grant` below tells, but for a reader, whose grant
                // may be shared and need not show in the fences. Unless
                // the hold began after the stop was sent: the signal can
                // land late, after the waiter got the lock and logged the
                // end of its section but before it released.)
                || stops.iter().any(|(w, s, u, k)| {
                    *w == process_of(&x.worker)
                        && *s <= gap_end
                        && *u >= x.start
                        && (!matches!(
                            k,
                            FaultKind::SigstopWaiter | FaultKind::FreezePool | FaultKind::FreezeHost
                        )
                            || x.shared
                            || x.start >= *s)
                })
                || (x.kind == RUN
                    && conn_faults
                        .iter()
                        .any(|&t| t + RUN_RELEASE_US >= x.start && t <= x.end + RUN_RELEASE_US))
        };
        // A sweep over the holds by start, with their ends in a heap:
        // `free_since` is when the holders last fell below the capacity,
        // and whose end did it (`None` before it was ever reached, or
        // while it is). With a capacity of 1 a gap is a time with no
        // holder, after the hold that ended last.
        let mut ends: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let mut free_since: Option<(u64, &Hold)> = None;
        for (i, h) in hs.iter().enumerate() {
            while let Some(&Reverse((end, j))) = ends.peek() {
                if end > h.start {
                    break;
                }
                ends.pop();
                if ends.len() + 1 == capacity {
                    free_since = Some((end, &hs[j]));
                }
            }
            let gap = free_since.filter(|&(s, _)| ends.len() < capacity && h.start > s);
            ends.push(Reverse((h.end, i)));
            if ends.len() >= capacity {
                free_since = None;
            }
            if let Some((gap_start, prev)) = gap {
                let gap_end = h.start;
                let mut free = 0;
                let mut free_from = gap_end;
                for list in by_worker.values() {
                    let i = list.partition_point(|w| w.start < gap_end);
                    let Some(w) = i.checked_sub(1).map(|i| list[i]) else {
                        continue;
                    };
                    if w.end.is_some_and(|e| e < gap_end) {
                        continue;
                    }
                    let mut from = gap_start.max(w.start);
                    for (_, until) in stopped_in(&w.worker, from, gap_end) {
                        from = from.max(until);
                    }
                    if gap_end.saturating_sub(from) > free {
                        free = gap_end - from;
                        free_from = from;
                    }
                }
                // Any hold that ended within a lease of the gap counts
                // (readers share the lock: the last to let go may not be
                // the one hit), but not a permit still held at its end: a
                // fault of that holder keeps no other permit taken.
                // The last such hold to end: a second permit's holder hit
                // inside the gap (the first's permit still out) keeps its
                // own permit taken until a lease after it, so the gap's
                // bound runs from there.
                let hit_end = hs[..i]
                    .iter()
                    .rev()
                    .take_while(|x| x.start + LOOK_BACK_US >= gap_start)
                    .filter(|x| {
                        x.end + lease_us >= gap_start && x.end <= gap_end && hit(x, gap_end)
                    })
                    .map(|x| x.end)
                    .max();
                let holder_fault = hit_end.is_some();
                // A stopped worker granted the lock in the gap logs its hold
                // only once continued: later, with a lower fence.
                let frozen_grant = !h.shared
                    && hs[i..]
                        .iter()
                        .take_while(|x| x.start <= gap_end + LOOK_BACK_US)
                        .any(|x| {
                            !x.shared
                                && x.fence < h.fence
                                && !stopped_in(
                                    &x.worker,
                                    gap_start.saturating_sub(lease_us),
                                    gap_end,
                                )
                                .is_empty()
                        })
                    // Or its call met the stop with the grant's reply still
                    // unread, and failed once continued: the grant stands
                    // until its lease runs out.
                    || by_worker.values().filter_map(|l| last_started(l, gap_end)).any(|w| {
                        w.failed
                            && w.start <= gap_end
                            && w.end.is_some_and(|e| e >= gap_end)
                            && !stopped_in(&w.worker, w.start.max(gap_start.saturating_sub(lease_us)), gap_end)
                                .is_empty()
                    })
                    // Or it was stopped while its wait was open and the lock
                    // free: just as the release that opened the gap ran, or
                    // just after it came to wait on the free lock. An attempt
                    // it had written (the kernel sends it though the process
                    // is stopped) or the woken waiter's attempt may have
                    // reached the server, taken the lock with a full lease,
                    // and its reply met the stop. Once continued, the call
                    // timed out and was sent again, and the wait logged only
                    // the later grant (a higher fence), so neither rule above
                    // sees the first: a lease bounds it. Such a grant is
                    // dated by its lease: it ran out by `gap_end`, so it was
                    // made by `gap_end - lease` at the latest, and the stop
                    // came no earlier than `IN_FLIGHT_US` before the release
                    // nor later than that after the grant (and after the wait
                    // began). A SIGKILL there is the same: the grant dies
                    // unlogged with its process.
                    || {
                        let last_grant = gap_end.saturating_sub(lease_us).max(gap_start);
                        let near = |s: u64| {
                            s + IN_FLIGHT_US >= gap_start && s <= last_grant + IN_FLIGHT_US
                        };
                        by_worker
                            .values()
                            .filter_map(|l| last_started(l, last_grant + IN_FLIGHT_US))
                            .any(|w| {
                                let kill = killed.get(process_of(&w.worker)).copied();
                                (w.end.is_none_or(|e| e >= gap_end)
                                    && stopped_in(
                                        &w.worker,
                                        gap_start.saturating_sub(IN_FLIGHT_US),
                                        gap_end,
                                    )
                                    .iter()
                                    .any(|&(s, _)| near(s) && w.start <= s))
                                    // (A killed worker's wait ends at its kill.)
                                    || kill.is_some_and(|k| {
                                        near(k) && w.start <= k && w.end == Some(k)
                                    })
                            })
                    };
                // The servers' faults: their downtime on top (the time
                // they covered, several in a row each adding theirs).
                let down = downtime::union_len(
                    servers
                        .iter()
                        .filter(|s| {
                            s.0 <= gap_end && s.1 + lease_us + FREE_WAIT_BOUND_US >= gap_start
                        })
                        .map(|s| (s.0, s.1)),
                );
                let bound = if holder_fault || frozen_grant || down.is_some() {
                    v.longest_free_wait_after_fault_us =
                        v.longest_free_wait_after_fault_us.max(free);
                    let later = hit_end.map_or(0, |e| e.saturating_sub(gap_start));
                    lease_us + FREE_WAIT_BOUND_US + down.unwrap_or(0) + later
                } else {
                    v.longest_free_wait_us = v.longest_free_wait_us.max(free);
                    FREE_WAIT_BOUND_US
                };
                // The machine's own stalls inside the wait lengthen it.
                let stalled = if free > bound {
                    stalled_within(stalls, free_from, gap_end)
                } else {
                    0
                };
                // At most the bound again: a stalled machine explains a
                // late wake-up, not a lost one.
                if free > bound && free <= bound + stalled.min(bound) {
                    v.free_waits_over_bound_in_stalls += 1;
                    v.longest_free_wait_in_stalls_us = v.longest_free_wait_in_stalls_us.max(free);
                } else if free > bound {
                    v.violations.push(Violation {
                        bound: format!(
                            "{} free while a live waiter waited <= {} ms",
                            if capacity > 1 { "permit" } else { "lock" },
                            bound / 1000
                        ),
                        lock: lock.clone(),
                        start_us: gap_start,
                        end_us: gap_end,
                        detail: format!(
                            "free {} ms after {} let go, before {} got it",
                            free / 1000,
                            prev.worker,
                            h.worker
                        ),
                    });
                }
            }
        }
    }

    for (lock, ws) in &waits {
        for w in ws.iter().filter(|w| w.end.is_none()) {
            v.stranded_waiters += 1;
            v.violations.push(Violation {
                bound: "stranded waiters = 0".into(),
                lock: lock.clone(),
                start_us: w.start,
                end_us: w.start,
                detail: format!("{} never got the lock nor an error", w.worker),
            });
        }
    }
    v.violations.sort_by_key(|x| x.start_us);
    v
}

/// A worker's last wait (`list` in start order) that began by `t`: the
/// only one that can still be open at `t`, since a worker's waits follow
/// one another.
fn last_started<'a>(list: &[&'a Wait], t: u64) -> Option<&'a Wait> {
    let i = list.partition_point(|w| w.start <= t);
    i.checked_sub(1).map(|i| list[i])
}

#[cfg(test)]
mod tests;

mod downtime;
mod run;
