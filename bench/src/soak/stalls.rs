//! The soak's own stalls: times when the machine did not run the soak.
//!
//! The free-wait bound (a lock sits free ≤ 1 s while a live waiter waits)
//! is a bound on the protocol, measured by processes that need the CPU to
//! act: a woken waiter must be scheduled to send its attempt and to log
//! the grant. On a machine busy with other work, a waiter can be runnable
//! but not running for a second or more, and its wait then looks like a
//! lost wake-up though nothing was lost.
//!
//! A probe thread in the soak's own process sleeps [`TICK`] at a time and
//! records each wake-up that came more than [`LATE`] after it was due:
//! the interval between is a stall of the machine (the probe is an
//! ordinary thread at the workers' priority, so it starves with them). The
//! checker adds the stalls it finds inside a free wait to that wait's
//! bound, and the report says how many waits needed it and how long the
//! stalls were, so a run on a starved machine is told apart from a broken
//! protocol instead of passing silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::clock::now_us;

/// How long the probe sleeps between checks.
pub const TICK: Duration = Duration::from_millis(10);

/// How late a wake-up must be to count as a stall.
pub const LATE: Duration = Duration::from_millis(50);

/// One stall: from when the probe was due to wake until it woke (wall
/// clock µs, as the workers log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    pub from_us: u64,
    pub until_us: u64,
}

/// The probe thread; [`StallProbe::stop`] ends it and returns its stalls.
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    stalls: Arc<Mutex<Vec<Stall>>>,
    thread: Option<JoinHandle<()>>,
}

impl StallProbe {
    /// Starts the probe.
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stalls = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, stalls) = (stop.clone(), stalls.clone());
            std::thread::Builder::new()
                .name("soak-stall-probe".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let due_us = now_us() + TICK.as_micros() as u64;
                        let before = Instant::now();
                        std::thread::sleep(TICK);
                        if before.elapsed() > TICK + LATE {
                            let stall = Stall {
                                from_us: due_us,
                                until_us: now_us(),
                            };
                            if let Ok(mut s) = stalls.lock() {
                                s.push(stall);
                            }
                        }
                    }
                })
                .ok()
        };
        Self {
            stop,
            stalls,
            thread,
        }
    }

    /// Stops the probe; the stalls it saw, in time order.
    pub fn stop(mut self) -> Vec<Stall> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stalls.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// How much of `[from, to]` the `stalls` (in time order) cover.
pub fn stalled_within(stalls: &[Stall], from: u64, to: u64) -> u64 {
    let first = stalls.partition_point(|s| s.until_us <= from);
    stalls[first..]
        .iter()
        .take_while(|s| s.from_us < to)
        .map(|s| s.until_us.min(to).saturating_sub(s.from_us.max(from)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_the_part_inside_the_window() {
        let s = [
            Stall {
                from_us: 100,
                until_us: 200,
            },
            Stall {
                from_us: 300,
                until_us: 450,
            },
            Stall {
                from_us: 900,
                until_us: 1000,
            },
        ];
        assert_eq!(stalled_within(&s, 150, 400), 50 + 100);
        assert_eq!(stalled_within(&s, 0, 2000), 350);
        assert_eq!(stalled_within(&s, 460, 890), 0);
        assert_eq!(stalled_within(&[], 0, 10), 0);
    }
}
