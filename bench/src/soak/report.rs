//! The soak's report: a markdown table on stdout, `report.json`, and
//! `report.md` (the table under a heading naming the run, which `make soak`
//! gathers into `docs/reliability.md`).

use std::path::Path;

use serde::Serialize;

use super::checker::{FREE_WAIT_BOUND_US, Fault, Verdict};
use super::plan::{BLACK_HOLE_RECOVERY, KILL_GRACE};
use super::stalls::{LATE, Stall};
use crate::fail::{EX_FAILURE, Failure};

/// Everything a run found, as written to `report.json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub secs: u64,
    pub topology: String,
    /// The worker kinds that ran.
    pub kinds: Vec<String>,
    pub lease_ms: u64,
    /// When the workers were told to stop (wall clock µs).
    pub end_us: u64,
    pub workers_not_stopping: Vec<String>,
    pub keys_left: Vec<String>,
    pub verdict: Verdict,
    pub faults: Vec<Fault>,
    /// The machine's stalls the soak's probe saw (`stalls.rs`).
    pub stalls: Vec<Stall>,
}

impl Report {
    /// Whether every bound held.
    pub fn passed(&self) -> bool {
        self.verdict.violations.is_empty()
            && self.keys_left.is_empty()
            && self.workers_not_stopping.is_empty()
    }

    /// The markdown table.
    pub fn table(&self) -> String {
        let v = &self.verdict;
        let ms = |us: u64| format!("{:.0} ms", us as f64 / 1000.0);
        let mut rows: Vec<(String, String, String)> = Vec::new();
        for (kind, n) in &v.acquisitions {
            rows.push((
                format!("acquisitions: {kind}"),
                n.to_string(),
                String::new(),
            ));
        }
        for (kind, n) in &v.faults {
            rows.push((format!("faults: {kind}"), n.to_string(), String::new()));
        }
        rows.push((
            "store writes accepted / rejected".into(),
            format!("{} / {}", v.writes_accepted, v.writes_rejected),
            String::new(),
        ));
        rows.push((
            "stale writes accepted by the store".into(),
            v.stale_writes_accepted.to_string(),
            "0".into(),
        ));
        rows.push((
            "stale writes accepted after a restart lost the store's maximum".into(),
            v.stale_writes_after_restart.to_string(),
            "(cause: restart)".into(),
        ));
        for (cause, n) in &v.overlaps_by_cause {
            rows.push((
                format!("overlapping hold pairs, explained: {cause}"),
                n.to_string(),
                String::new(),
            ));
        }
        rows.push((
            "double grants with one fence, both written".into(),
            v.same_fence_double_grants.to_string(),
            "0".into(),
        ));
        rows.push((
            "paused holder's write accepted before its successor's first write".into(),
            v.late_writes_before_successor.to_string(),
            "(what fencing cannot catch)".into(),
        ));
        rows.push((
            "overlapping hold pairs, unexplained".into(),
            v.overlaps_unexplained.to_string(),
            "0".into(),
        ));
        rows.push((
            "longest time a lock sat free while a live waiter waited".into(),
            ms(v.longest_free_wait_us),
            format!("≤ {}", ms(FREE_WAIT_BOUND_US)),
        ));
        rows.push((
            "the same, right after a fault of the holder or the servers".into(),
            ms(v.longest_free_wait_after_fault_us),
            format!(
                "≤ {} (+ the servers' downtime)",
                ms(self.lease_ms * 1000 + FREE_WAIT_BOUND_US)
            ),
        ));
        rows.push((
            format!(
                "stalls of the machine: the soak's probe thread woke > {} late (count / longest / total)",
                ms(LATE.as_micros() as u64)
            ),
            format!(
                "{} / {} / {}",
                v.machine_stalls,
                ms(v.longest_machine_stall_us),
                ms(v.machine_stall_total_us)
            ),
            "(the machine, not redbell)".into(),
        ));
        rows.push((
            "free waits over their bound by no more than the stalls inside them (longest)".into(),
            format!(
                "{} ({})",
                v.free_waits_over_bound_in_stalls,
                ms(v.longest_free_wait_in_stalls_us)
            ),
            "(bound + the stalls in the wait)".into(),
        ));
        rows.push((
            "redbell run commands running at once (unfenced log)".into(),
            v.run_overlaps.to_string(),
            "0".into(),
        ));
        rows.push((
            "longest time from a black hole until its worker got a lock".into(),
            ms(v.longest_black_hole_recovery_us),
            format!(
                "≤ {} (2 × response timeout + 1 s, + the lease and 1 s)",
                ms(BLACK_HOLE_RECOVERY.as_micros() as u64
                    + self.lease_ms * 1000
                    + FREE_WAIT_BOUND_US)
            ),
        ));
        rows.push((
            "longest time from SIGTERM until a stopped command's redbell run exited".into(),
            ms(v.longest_stopped_command_end_us),
            format!(
                "≤ {} (--kill-grace + 2 s)",
                ms(KILL_GRACE.as_micros() as u64 + 2_000_000)
            ),
        ));
        rows.push((
            "waiters stranded at the end".into(),
            v.stranded_waiters.to_string(),
            "0".into(),
        ));
        rows.push((
            "workers that did not stop when told".into(),
            self.workers_not_stopping.len().to_string(),
            "0".into(),
        ));
        for (kind, n) in &v.errors {
            rows.push((format!("errors: {kind}"), n.to_string(), String::new()));
        }
        rows.push((
            "lock keys left in Redis after the leases ran out".into(),
            self.keys_left.len().to_string(),
            "0".into(),
        ));
        let mut out = String::from("| measure | value | bound |\n|---|---:|---|\n");
        for (m, val, b) in rows {
            out.push_str(&format!("| {m} | {val} | {b} |\n"));
        }
        out
    }

    /// Writes `report.json` and `report.md` under `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), Failure> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Failure::new(EX_FAILURE, format!("report: {e}")))?;
        write_file(&dir.join("report.json"), &json)?;
        write_file(&dir.join("report.md"), &self.markdown())
    }

    /// The run as a section of the reliability page: what ran, how to
    /// replay it, the verdict and the table.
    pub fn markdown(&self) -> String {
        format!(
            "### {topology}: {verdict}\n\n\
             {secs} s, seed {seed}, lease {lease} ms; replay with \
             `SOAK_SEED={seed} SOAK_SECS={secs} SOAK_TOPOLOGY={topology} make soak`.\n\n{table}\n",
            topology = self.topology,
            verdict = if self.passed() { "passed" } else { "FAILED" },
            secs = self.secs,
            seed = self.seed,
            lease = self.lease_ms,
            table = self.table(),
        )
    }

    /// The failure naming the seed and the first offending interval.
    pub fn failure(&self) -> Failure {
        let first = self.verdict.violations.first().map_or_else(
            || {
                if self.keys_left.is_empty() {
                    format!(
                        "workers did not stop: {}",
                        self.workers_not_stopping.join(", ")
                    )
                } else {
                    format!("lock keys left in Redis: {}", self.keys_left.join(", "))
                }
            },
            |x| {
                format!(
                    "{} broken on {} in [{}, {}] µs ({} ms long): {}",
                    x.bound,
                    x.lock,
                    x.start_us,
                    x.end_us,
                    x.end_us.saturating_sub(x.start_us) / 1000,
                    x.detail
                )
            },
        );
        Failure::new(
            EX_FAILURE,
            format!(
                "soak failed (seed {}, replay with SOAK_SEED={}): {} violations; first: {first}",
                self.seed,
                self.seed,
                self.verdict.violations.len()
            ),
        )
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot write {}: {e}", path.display())))
}
