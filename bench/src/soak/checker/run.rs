//! The bounds of the faults that hit one process's several parts: a
//! `redbell run` and its command, every connection of a worker at once.
//!
//! - **`redbell run` commands running at once = 0**: each command appends
//!   to its lock's *unfenced* log (`runner.rs`: a line when it starts, one
//!   every 100 ms while it runs, one at its end). Two commands of one lock
//!   whose lines interleave ran at once: one wrote a line after the other
//!   wrote its first, so both were alive then (the timestamps come from one
//!   clock, this machine's). No fault of a worker excuses it, nor does
//!   fencing: a user of `run` relies on the command being alone, not on a
//!   store that checks fences. Only a server fault that may have lost the
//!   first grant does (a restart losing the AOF's last second, a failover).
//! - **A black-holed worker works again within 2 × response timeout + 1 s
//!   ([`BLACK_HOLE_RECOVERY`]) + the lease + 1 s**: from the black hole
//!   until the worker next gets a lock. The library owes the first term
//!   (its connections replaced after two response timeouts at most); a lock
//!   it held when its connections went silent is freed by its lease, and
//!   the lock is then handed over within the free-wait bound, 1 s (plus
//!   the servers' downtime, as for every bound after a fault). Not judged
//!   for a `redbell run` worker: each section is a fresh `redbell run`
//!   with fresh connections, nothing to recover, and its next lock waits
//!   out the other command's 3 s (its black-holed `redbell run` must still
//!   stop its command in time: the first bound).
//! - **A stopped command ended and its lock freed within --kill-grace + 2
//!   s** ([`KILL_GRACE`]): from the SIGTERM sent to its `redbell run` until
//!   that `redbell run` exited, which it does once its command's group is
//!   gone and it has released the lock. Its driver logs the exit (an error
//!   record `run:exit:CODE`, or the next section's wait).

use std::collections::BTreeMap;

use super::{Event, Fault, FaultKind, RUN, Record, Verdict, Violation, process_of, split_us};
use crate::soak::checker::FREE_WAIT_BOUND_US;
use crate::soak::plan::{BLACK_HOLE_RECOVERY, KILL_GRACE};

/// How long after the SIGTERM a stopped command may take to end and free
/// its lock: --kill-grace + 2 s (the bound).
const STOPPED_COMMAND_END_US: u64 = KILL_GRACE.as_micros() as u64 + 2_000_000;

/// Judges the bounds above, adding to `v`.
pub(super) fn judge(
    records: &[Record],
    faults: &[Fault],
    lease_us: u64,
    end_us: u64,
    v: &mut Verdict,
) {
    let run_end = records
        .iter()
        .map(|r| r.end_us.unwrap_or(r.start_us).max(r.start_us))
        .max()
        .unwrap_or(0)
        .max(end_us);
    run_overlaps(records, faults, v);
    black_holes(records, faults, lease_us, run_end, v);
    stopped_commands(records, faults, run_end, v);
}

/// One command's span in the unfenced log.
struct Command<'a> {
    worker: &'a str,
    seq: u64,
    start: u64,
    end: u64,
}

fn run_overlaps(records: &[Record], faults: &[Fault], v: &mut Verdict) {
    let mut spans: BTreeMap<(&str, &str, u64), (u64, u64)> = BTreeMap::new();
    for r in records {
        if matches!(r.event, Event::RunStart | Event::RunLine | Event::RunEnd) {
            let s = spans
                .entry((&r.lock, &r.worker, r.seq))
                .or_insert((u64::MAX, 0));
            s.0 = s.0.min(r.start_us);
            s.1 = s.1.max(r.start_us);
        }
    }
    let mut by_lock: BTreeMap<&str, Vec<Command>> = BTreeMap::new();
    // A command's first line and its last: within its life (a command
    // killed mid-run wrote no end line, and lived at least this long).
    for ((lock, worker, seq), (start, end)) in spans {
        by_lock.entry(lock).or_default().push(Command {
            worker,
            seq,
            start,
            end,
        });
    }
    let servers: Vec<&Fault> = faults.iter().filter(|f| f.kind.is_server()).collect();
    for (lock, mut cmds) in by_lock {
        cmds.sort_by_key(|c| c.start);
        let mut active: Vec<&Command> = Vec::new();
        for b in &cmds {
            active.retain(|a| a.end > b.start);
            for a in &active {
                // A server fault between the two starts may have lost
                // `a`'s grant: not the lock's doing.
                let lost = servers
                    .iter()
                    .find(|s| {
                        s.at_us <= b.start
                            && a.start <= s.until_us.unwrap_or(s.at_us) + split_us(s.kind)
                    })
                    .and_then(|s| s.kind.cause());
                if let Some(cause) = lost {
                    v.overlaps_explained += 1;
                    *v.overlaps_by_cause.entry(cause.to_owned()).or_default() += 1;
                    continue;
                }
                v.run_overlaps += 1;
                v.violations.push(Violation {
                    bound: "redbell run commands running at once = 0".into(),
                    lock: lock.to_owned(),
                    start_us: b.start,
                    end_us: a.end.min(b.end),
                    detail: format!(
                        "{}'s command (section {}) wrote to the unfenced log for {} ms after {}'s \
                         (section {}) had started",
                        a.worker,
                        a.seq,
                        (a.end.min(b.end) - b.start) / 1000,
                        b.worker,
                        b.seq
                    ),
                });
            }
            active.push(b);
        }
    }
}

/// The other faults aimed at `worker`'s process in `[from, to]`.
fn hit_again(faults: &[Fault], worker: &str, from: u64, to: u64) -> bool {
    faults
        .iter()
        .any(|f| f.worker.as_deref() == Some(worker) && f.at_us > from && f.at_us <= to)
}

fn black_holes(records: &[Record], faults: &[Fault], lease_us: u64, run_end: u64, v: &mut Verdict) {
    for f in faults.iter().filter(|f| f.kind == FaultKind::BlackHole) {
        let Some(worker) = f.worker.as_deref() else {
            continue;
        };
        let kind = records.iter().find(|r| process_of(&r.worker) == worker);
        if kind.is_some_and(|r| r.kind == RUN) {
            continue;
        }
        // The servers' downtime in the meantime comes on top.
        let base = BLACK_HOLE_RECOVERY.as_micros() as u64 + lease_us + FREE_WAIT_BOUND_US;
        let down: u64 = faults
            .iter()
            .filter(|s| s.kind.is_server() && s.at_us >= f.at_us && s.at_us <= f.at_us + base)
            .map(|s| s.until_us.unwrap_or(s.at_us) - s.at_us)
            .max()
            .unwrap_or(0);
        let bound = base + down;
        let got = records
            .iter()
            .filter(|r| r.event == Event::Acquired && process_of(&r.worker) == worker)
            .filter_map(|r| r.end_us)
            .filter(|&t| t > f.at_us)
            .min();
        let seen_until = got.unwrap_or(run_end).min(f.at_us + bound);
        if hit_again(faults, worker, f.at_us, seen_until) {
            continue; // (a SIGKILL, a stop: judged by their own bounds)
        }
        match got {
            Some(t) => {
                let took = t - f.at_us;
                v.longest_black_hole_recovery_us = v.longest_black_hole_recovery_us.max(took);
                if took <= bound {
                    continue;
                }
            }
            None if run_end <= f.at_us + bound => continue, // the run ended first
            None => {}
        }
        v.violations.push(Violation {
            bound: format!(
                "a black-holed worker gets a lock again <= {} ms",
                bound / 1000
            ),
            lock: records
                .iter()
                .find(|r| process_of(&r.worker) == worker)
                .map_or_else(String::new, |r| r.lock.clone()),
            start_us: f.at_us,
            end_us: got.unwrap_or(run_end),
            detail: match got {
                Some(t) => format!("{worker} got a lock {} ms after", (t - f.at_us) / 1000),
                None => format!(
                    "{worker} never got a lock again ({} ms until the end of the run)",
                    (run_end - f.at_us) / 1000
                ),
            },
        });
    }
}

fn stopped_commands(records: &[Record], faults: &[Fault], run_end: u64, v: &mut Verdict) {
    for f in faults
        .iter()
        .filter(|f| f.kind == FaultKind::SigstopCommand)
    {
        let (Some(worker), Some(term)) = (f.worker.as_deref(), f.until_us) else {
            continue;
        };
        let exited = records
            .iter()
            .filter(|r| r.worker == worker)
            .filter_map(|r| match r.event {
                Event::Error
                    if r.outcome
                        .as_deref()
                        .is_some_and(|o| o.starts_with("run:exit")) =>
                {
                    r.end_us
                }
                Event::Wait => Some(r.start_us),
                _ => None,
            })
            .filter(|&t| t >= term)
            .min();
        if hit_again(faults, worker, f.at_us, exited.unwrap_or(run_end)) {
            continue;
        }
        match exited {
            Some(t) => {
                let took = t - term;
                v.longest_stopped_command_end_us = v.longest_stopped_command_end_us.max(took);
                if took <= STOPPED_COMMAND_END_US {
                    continue;
                }
            }
            None if run_end <= term + STOPPED_COMMAND_END_US => continue,
            None => {}
        }
        v.violations.push(Violation {
            bound: format!(
                "a stopped command ended and its lock freed <= {} ms after SIGTERM",
                STOPPED_COMMAND_END_US / 1000
            ),
            lock: records
                .iter()
                .find(|r| r.worker == worker)
                .map_or_else(String::new, |r| r.lock.clone()),
            start_us: term,
            end_us: exited.unwrap_or(run_end),
            detail: match exited {
                Some(t) => format!(
                    "{worker}'s redbell run exited {} ms after",
                    (t - term) / 1000
                ),
                None => format!(
                    "{worker}'s redbell run never exited ({} ms until the end of the run)",
                    (run_end - term) / 1000
                ),
            },
        });
    }
}
