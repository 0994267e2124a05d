//! The frame `redbell run` and `redbell elect` both run their command in
//! (`supervise.rs`, [`Frame::run`](supervise::Frame::run)): the command
//! started in a process group of its own (`child.rs`) and signalled as a
//! group (`group.rs`); the signals `redbell` handles itself and forwards
//! (`signals.rs`); the terminal handed to the group (`terminal.rs`); when
//! the group is stopped before the lease's deadline (`schedule.rs`); the
//! guardian process that enforces that deadline even when `redbell` is
//! frozen or dead (`guardian.rs`); and redbell's exit code and last
//! releases (`exit.rs`). What differs between the two is what they hold:
//! each gives the frame a [`Lease`](supervise::Lease).

pub(crate) mod child;
pub(crate) mod exit;
pub(crate) mod group;
pub(crate) mod guardian;
pub(crate) mod schedule;
pub(crate) mod signals;
pub(crate) mod supervise;
pub(crate) mod terminal;
