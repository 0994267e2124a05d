//! Percentiles, and Redis command counts from `INFO commandstats`.

use serde::Serialize;

use super::lock::Strategy;

/// The `q`-quantile (0..=1) of `values` by nearest rank; sorts in place.
/// `None` when empty.
pub fn quantile<T: Copy + Ord>(values: &mut [T], q: f64) -> Option<T> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// p50 and p99 (µs) of a sample.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Pcts {
    pub p50: Option<i64>,
    pub p99: Option<i64>,
}

impl Pcts {
    pub fn of(values: &[i64]) -> Pcts {
        let mut v = values.to_vec();
        Pcts {
            p50: quantile(&mut v, 0.50),
            p99: quantile(&mut v, 0.99),
        }
    }
}

/// Commands the bench itself sends for bookkeeping (the counter `INCR`,
/// the parent's `MGET` of it, `MULTI`/`EXEC`, `CONFIG RESETSTAT`, `INFO`);
/// neither strategy's lock path uses any of them.
const BOOKKEEPING: [&str; 6] = ["incr", "mget", "multi", "exec", "info", "config"];

/// The lock's Redis cost over a measured window of hand-offs.
#[derive(Debug, Clone, Serialize)]
pub struct Commands {
    /// Hand-offs (acquisitions) in the window.
    pub handoffs: u64,
    /// Every command, those run inside scripts included.
    pub all: u64,
    /// Commands the clients sent: round trips (script calls, and for the
    /// poll recipe its `SET`s; for redbell also SUBSCRIBE/UNSUBSCRIBE).
    pub round_trips: u64,
    /// Of those, script calls.
    pub scripts: u64,
    /// The raw counts, bookkeeping excluded.
    pub by_command: Vec<(String, u64)>,
    /// Redis CPU time over the window (`INFO cpu`: `used_cpu_sys +
    /// used_cpu_user`), in µs; the bench's bookkeeping included (a few
    /// commands per millisecond of the window).
    pub cpu_us: f64,
}

impl Commands {
    /// Splits commandstats taken after a `CONFIG RESETSTAT` into the
    /// strategy's own calls and the ones its scripts made.
    pub fn from_stats(stats: &[(String, u64)], strategy: Strategy, handoffs: u64) -> Commands {
        let mut c = Commands {
            handoffs,
            all: 0,
            round_trips: 0,
            scripts: 0,
            by_command: Vec::new(),
            cpu_us: 0.0,
        };
        for (name, calls) in stats {
            let base = name.split('|').next().unwrap_or(name);
            if BOOKKEEPING.contains(&base) {
                continue;
            }
            c.all += calls;
            if strategy.client_commands().contains(&name.as_str()) {
                c.round_trips += calls;
            }
            if crate::commandstats::SCRIPT_CALLS.contains(&name.as_str()) {
                c.scripts += calls;
            }
            c.by_command.push((name.clone(), *calls));
        }
        c
    }

    pub fn per_handoff(&self, n: u64) -> Option<f64> {
        (self.handoffs > 0).then(|| n as f64 / self.handoffs as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut v = vec![5, 1, 4, 2, 3];
        assert_eq!(quantile(&mut v, 0.5), Some(3));
        assert_eq!(quantile(&mut v, 0.99), Some(5));
        assert_eq!(quantile(&mut v, 0.0), Some(1));
        assert_eq!(quantile::<i64>(&mut [], 0.5), None);
    }

    #[test]
    fn splits_round_trips() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=30,usec=1\r\n\
            cmdstat_get:calls=50,usec=1\r\ncmdstat_incr:calls=10,usec=1\r\n\
            cmdstat_config|resetstat:calls=1,usec=1\r\ncmdstat_set:calls=7,usec=1\r\n";
        let stats = crate::commandstats::parse(info);
        let c = Commands::from_stats(&stats, Strategy::Redbell, 10);
        assert_eq!((c.all, c.round_trips, c.scripts), (87, 30, 30));
        let p = Commands::from_stats(&stats, Strategy::Poll(Default::default()), 10);
        assert_eq!(p.round_trips, 37);
        assert_eq!(p.per_handoff(p.round_trips), Some(3.7));
    }
}
