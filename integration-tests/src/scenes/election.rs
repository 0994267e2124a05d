//! What the election tests share (`election.rs`, `election_cli.rs`): the
//! campaigners' output lines, and how soon a change must be seen.

use std::time::Duration;

/// A generous bound on anything that should take milliseconds, on a busy
/// shared machine.
pub const SOON: Duration = Duration::from_secs(5);

/// A campaigner's output line `KIND TERM MICROS`: its kind, term and
/// time (µs since the epoch); `None` when it is not one.
pub fn parse(line: &str) -> Option<(&str, u64, u128)> {
    let mut parts = line.split(' ');
    let kind = parts.next()?;
    let term = parts.next()?.parse().ok()?;
    let us = parts.next()?.parse().ok()?;
    Some((kind, term, us))
}
