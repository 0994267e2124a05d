//! What the wake-up tests share: the standby window a release gives the
//! next in line (`wakeup.rs` waits past it, `wakeup_cost.rs` counts the
//! standbys it sends).

use std::time::Duration;

// ---------------------------------------------------------------- helpers

/// The standby window a release gives the next in line: twice the 100 ms
/// hand-off reservation.
pub const STANDBY_WINDOW: Duration = Duration::from_millis(200);
