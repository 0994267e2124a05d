//! What one bench run measured (also written as `results.json`), and how
//! its latencies are printed; read by the report, the verdict and the chart.

use serde::Serialize;

use super::cluster::ClusterInfo;
use super::contend::Outcome;
use super::floor::{Floor, SerialFloor, Takeover, Uncontended};
use super::metrics_cost::MetricsCost;
use super::semaphore::SemaphoreRow;

/// Everything one run measured.
#[derive(Debug, Serialize)]
pub struct Results {
    /// UTC, `YYYY-MM-DD HH:MM`.
    pub date: String,
    pub cores: usize,
    pub redis_version: String,
    /// The Redis Cluster of the `redbell cluster` rows (`--cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    pub build: &'static str,
    pub quick: bool,
    pub hold_us: u64,
    pub floor: Floor,
    /// The hand-off loop with no lock: the ceiling of hand-offs/s.
    pub serial_floor: SerialFloor,
    pub handoff: Vec<Outcome>,
    pub scaling: Vec<Outcome>,
    /// Lock+unlock alone: Redis CPU per lock+unlock.
    pub uncontended: Uncontended,
    /// With the hand-off rows' critical section: ops/s of a lock around work.
    pub uncontended_work: Uncontended,
    pub takeover: Vec<Takeover>,
    pub semaphore: SemaphoreRow,
    /// The `metrics` feature's cost (scenario 8).
    pub metrics: MetricsCost,
}

impl Results {
    /// The PING p50 in µs (at least 1): the unit of the ×PING multiples.
    pub fn ping(&self) -> f64 {
        self.floor.ping_us.p50.unwrap_or(1).max(1) as f64
    }

    /// `123 µs (2.1×)`: a latency and its multiple of the PING p50.
    pub fn lat(&self, us: Option<i64>) -> String {
        match us {
            Some(us) => format!("{} ({:.1}×)", fmt_us(us), us as f64 / self.ping()),
            None => "–".to_owned(),
        }
    }

    /// `hand-offs/s` over the serial floor's iterations/s.
    pub fn of_floor(&self, per_s: f64) -> Option<f64> {
        let f = self.serial_floor.iterations_per_s;
        (f > 0.0).then(|| per_s / f)
    }
}

/// `87 µs`, `1.24 ms`, `2.1 s`.
pub fn fmt_us(us: i64) -> String {
    let a = us.unsigned_abs();
    if a < 1_000 {
        format!("{us} µs")
    } else if a < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{:.2} s", us as f64 / 1e6)
    }
}
