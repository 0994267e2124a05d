//! How much of each scenario a run does (full or `--quick`).
//!
//! The full run aims at a few minutes on a 2-core machine. Every strategy
//! gets the same N: the poll recipe is not slow per hand-off here, because
//! with no pause between a worker's unlock and its next lock the releaser
//! usually re-takes the lock itself before any sleeper wakes (which is what
//! the "to another worker" and "busiest share" columns show). A poller
//! starved for the whole run waits as long as the run lasts, so a smaller N
//! for the poll recipe would also flatter its wait percentiles.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lock::Strategy;

#[derive(Debug, Clone)]
pub struct Plan {
    /// Calls per floor measurement.
    pub samples: usize,
    /// W of the hand-off scenarios.
    pub workers: Vec<u32>,
    /// Hand-offs per hand-off scenario: redbell, redbell fair, rslock,
    /// poll 10 ms, poll 100 ms.
    pub n: [u64; 5],
    /// Waiters of the scaling scenarios (redbell).
    pub waiters: Vec<u32>,
    /// Waiters of the scaling scenarios (poll 10 ms).
    pub poll_waiters: Vec<u32>,
    /// Hand-offs per scaling scenario: redbell, poll 10 ms.
    pub scaling_n: [u64; 2],
    /// Workers of the uncontended scenario, each with its own client and lock.
    pub uncontended_workers: u32,
    /// Length of one round of the uncontended scenario, per strategy.
    pub uncontended: Duration,
    /// Rounds of the uncontended scenario (strategies take turns).
    pub uncontended_rounds: u32,
    pub crash_runs: u32,
    /// Rounds of the metrics-cost row (each runs its three variants).
    pub metrics_rounds: u32,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                samples: 300,
                workers: vec![2, 8, 32],
                n: [200, 200, 200, 200, 200],
                waiters: vec![1, 10, 100, 1000],
                // 1,000 pollers saturate a debug build's connections (~10 s).
                poll_waiters: vec![1, 10, 100],
                scaling_n: [200, 200],
                uncontended_workers: 8,
                uncontended: Duration::from_millis(200),
                uncontended_rounds: 3,
                crash_runs: 3,
                metrics_rounds: 1,
            }
        } else {
            Plan {
                samples: 2000,
                workers: vec![2, 8, 32],
                n: [2000, 2000, 2000, 2000, 2000],
                waiters: vec![1, 10, 100, 1000],
                poll_waiters: vec![1, 10, 100, 1000],
                scaling_n: [2000, 2000],
                uncontended_workers: 8,
                uncontended: Duration::from_secs(1),
                uncontended_rounds: 5,
                crash_runs: 20,
                metrics_rounds: 7,
            }
        }
    }

    /// The strategies of the hand-off scenarios, with their N.
    pub fn handoff_strategies(&self) -> [(Strategy, u64); 5] {
        [
            (Strategy::Redbell, self.n[0]),
            (Strategy::Fair, self.n[1]),
            (Strategy::Rslock, self.n[2]),
            (Strategy::Poll(Duration::from_millis(10)), self.n[3]),
            (Strategy::Poll(Duration::from_millis(100)), self.n[4]),
        ]
    }

    /// Iterations of the serial floor (the hand-off scenarios' N).
    pub fn serial_n(&self) -> u64 {
        self.n[0]
    }

    /// `(strategy, waiters, N)` of every scaling scenario.
    pub fn scaling(&self) -> Vec<(Strategy, u32, u64)> {
        let redbell = self
            .waiters
            .iter()
            .map(|&w| (Strategy::Redbell, w, self.scaling_n[0]));
        let poll = self.poll_waiters.iter().map(|&w| {
            (
                Strategy::Poll(Duration::from_millis(10)),
                w,
                self.scaling_n[1],
            )
        });
        redbell.chain(poll).collect()
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}
