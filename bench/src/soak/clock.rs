//! The soak's one clock: wall-clock µs, which every process of the run
//! (all on this machine) logs by. A leaf module, so that the stall probe
//! and the workers' I/O can both read it without importing each other.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall clock µs.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
