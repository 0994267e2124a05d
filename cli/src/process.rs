//! What `redbell run` and `redbell elect` share to run a command under a
//! lease: its process group (`group.rs`: start it, signal it, reap what it
//! leaves), the signals `redbell` handles itself (`signals.rs`), when the
//! group is stopped before a lease's deadline (`schedule.rs`), and the
//! guardian process that enforces that deadline even when `redbell` is
//! frozen or dead (`guardian.rs`).

pub(crate) mod group;
pub(crate) mod guardian;
pub(crate) mod schedule;
pub(crate) mod signals;
