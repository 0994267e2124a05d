//! The cost of redbell's `metrics` feature: the hand-off scenario of
//! redbell's plain `Mutex` (8 workers, each with its own client, over 2
//! processes) run with the feature compiled out, compiled in with no
//! recorder installed (every `metrics` macro hits the facade's no-op
//! recorder), and compiled in with a Prometheus recorder installed in
//! every worker (as an application exporting its metrics would; no HTTP
//! server, its upkeep every 5 s). The three take turns in interleaved
//! rounds of one run, each round in a rotated order, and each figure is
//! the median of its rounds, so the machine's drift hits all three alike.
//!
//! "Compiled out" runs the workers of this executable, which must be built
//! without the feature; "compiled in" runs `redbell-bench-metrics` from
//! the same directory: this crate built with `--features metrics` (`make
//! bench` builds it and copies it there). Without it the row is skipped,
//! with the reason in the report.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::contend::{self, Scenario, Worker};
use super::lock::Strategy;
use super::worker::has_metrics;
use crate::fail::Failure;

/// The executable with the feature, beside this one.
pub const METRICS_EXE: &str = "redbell-bench-metrics";

/// The three variants, in the report's order.
const VARIANTS: [&str; 3] = [
    "feature off",
    "feature on, no recorder",
    "feature on, Prometheus recorder",
];

/// What the row measured.
#[derive(Debug, Clone, Serialize)]
pub struct MetricsCost {
    pub workers: u32,
    pub n: u64,
    pub rounds: u32,
    /// Per variant (in [`VARIANTS`] order): its label and the hand-offs/s
    /// of each round.
    pub variants: Vec<(String, Vec<f64>)>,
    /// Why the row was not measured, if it was not.
    pub skipped: Option<String>,
}

impl MetricsCost {
    /// The median hand-offs/s of variant `i`.
    pub fn median(&self, i: usize) -> Option<f64> {
        let mut v = self.variants.get(i)?.1.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        Some(if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        })
    }

    /// The median over the rounds of variant `i`'s hand-offs/s over the
    /// feature-off run of the same round, minus one: the paired change,
    /// less sensitive to the machine's drift than the medians' ratio.
    pub fn paired(&self, i: usize) -> Option<f64> {
        let off = &self.variants.first()?.1;
        let mut r: Vec<f64> = self
            .variants
            .get(i)?
            .1
            .iter()
            .zip(off)
            .filter(|&(_, &o)| o > 0.0)
            .map(|(v, o)| v / o - 1.0)
            .collect();
        if r.is_empty() {
            return None;
        }
        r.sort_by(f64::total_cmp);
        let mid = r.len() / 2;
        Some(if r.len() % 2 == 1 {
            r[mid]
        } else {
            (r[mid - 1] + r[mid]) / 2.0
        })
    }

    /// Variant `i`'s median over the feature-off median, minus one: the
    /// cost (negative when slower).
    pub fn change(&self, i: usize) -> Option<f64> {
        let off = self.median(0).filter(|&m| m > 0.0)?;
        Some(self.median(i)? / off - 1.0)
    }
}

/// Runs the row: `rounds` rounds of the three variants, `n` hand-offs each.
pub async fn run(
    url: &str,
    run: &str,
    n: u64,
    rounds: u32,
    hold: Duration,
    lease: Duration,
) -> Result<MetricsCost, Failure> {
    let workers = 8;
    let mut cost = MetricsCost {
        workers,
        n,
        rounds,
        variants: VARIANTS
            .iter()
            .map(|v| ((*v).to_owned(), Vec::new()))
            .collect(),
        skipped: None,
    };
    let on = match metrics_exe() {
        Ok(exe) => exe,
        Err(why) => {
            eprintln!("bench: metrics cost skipped: {why}");
            cost.skipped = Some(why);
            return Ok(cost);
        }
    };
    let workers_of = [
        Worker::default(),
        Worker {
            exe: Some(on.clone()),
            recorder: false,
        },
        Worker {
            exe: Some(on),
            recorder: true,
        },
    ];
    for round in 0..rounds {
        for k in 0..VARIANTS.len() {
            let i = (k + round as usize) % VARIANTS.len();
            let s = Scenario {
                kind: "metrics",
                strategy: Strategy::Redbell,
                workers,
                processes: 2,
                shared_client: false,
                n,
                hold,
                lease,
                cluster: Vec::new(),
                worker: workers_of[i].clone(),
            };
            let name = format!("bench-{run}-metrics-{round}-{i}");
            let o = contend::run(url, &name, &s).await?;
            eprintln!(
                "bench:   metrics cost round {}/{rounds}, {}: {:.0} hand-offs/s",
                round + 1,
                VARIANTS[i],
                o.handoffs_per_s
            );
            cost.variants[i].1.push(o.handoffs_per_s);
        }
    }
    Ok(cost)
}

/// `redbell-bench-metrics` beside this executable, when this one is built
/// without the feature; else why the row cannot be measured.
fn metrics_exe() -> Result<PathBuf, String> {
    if has_metrics() {
        return Err("this bench is built with the `metrics` feature: \
             nothing to compare it with (run the one built without it)"
            .to_owned());
    }
    let me = std::env::current_exe().map_err(|e| format!("cannot find my executable: {e}"))?;
    let exe = me.with_file_name(METRICS_EXE);
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(format!(
            "{} is not built (`make bench` builds it: \
             the bench with `--features metrics`, copied there)",
            exe.file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
        ))
    }
}
