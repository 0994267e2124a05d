//! The Lua scripts and the one place their results are turned into Rust
//! values and errors.
//!
//! - [`registry`]: every script embedded once (`include_str!` of its file
//!   under `src/scripts/lua/`, whose header lists its KEYS, ARGV and every
//!   return value; `protocol.lua`, the version check, prepended to each),
//!   its Redis Cluster variant, and [`scripts()`].
//! - [`call`]: invoking one script, with [`PROTOCOL_VERSION`] as its
//!   `ARGV[1]`: `EVALSHA`; after a `SCRIPT FLUSH` (or on
//!   a server that never saw it) `EVAL` with the source, which runs and
//!   caches it; optionally pipelined with `WAIT`.
//! - [`layout`]: for each operation and lock [`Kind`](crate::keys::Kind),
//!   the script, its KEYS and ARGV, and the reading of its reply.
//! - [`election`]: the same for the leader election's own scripts.

mod call;
mod election;
mod layout;
mod registry;

pub(crate) use election::{Proclaimed, Proclamation, Reading, leader, proclaim, resign};
pub(crate) use layout::{
    Queue, Snapshot, acquire, break_lock, extend, inspect, inspect_many, pass, release,
    semaphore_status,
};
pub use registry::{ScriptInfo, scripts};

use crate::Error;

/// The version of the wire protocol (`PROTOCOL.md`) this crate speaks: the
/// `ARGV[1]` of every script call. Every script refuses another version
/// with the error reply `REDBELL_PROTOCOL`, before it reads or writes any
/// key ([`Error::Protocol`]): clients of one namespace (one Redis and key
/// prefix) must all speak the same version.
pub const PROTOCOL_VERSION: &str = "1";

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The key is ours; the fencing counter is now this value.
    Acquired { fence: u64 },
    /// Someone else holds it for this many more milliseconds (`None`: the
    /// key has no expiry).
    /// `server_us`: the server time of the attempt (the FIFO kinds, fair
    /// and semaphore, answer it): a waiter that attempted before its
    /// client's turn to queue it queues by this arrival (`acquire.rs`, "One
    /// place per client").
    Held {
        pttl_ms: Option<u64>,
        server_us: Option<u64>,
    },
}

/// The outcome of a release or an extend: the three cases the scripts tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owned {
    /// The key was ours (and is now deleted / extended).
    Ours,
    /// Another token holds the key.
    Theirs,
    /// The key is gone.
    Gone,
}

impl Owned {
    /// `Ok` when the key was ours, [`Error::NotHeld`] otherwise.
    pub(crate) fn into_result(self) -> Result<(), Error> {
        match self {
            Owned::Ours => Ok(()),
            Owned::Theirs | Owned::Gone => Err(Error::NotHeld),
        }
    }
}

fn owned(code: i64) -> Owned {
    match code {
        1 => Owned::Ours,
        0 => Owned::Theirs,
        _ => Owned::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many scripts the library ships.
    const ALL_SCRIPTS: usize = 23;

    #[test]
    fn every_script_checks_the_version_first() {
        let check = include_str!("lua/protocol.lua");
        assert!(check.contains(&format!("ARGV[1] ~= '{PROTOCOL_VERSION}'")));
        assert!(check.contains(&format!("scripts speak {PROTOCOL_VERSION}'")));
        for s in scripts() {
            assert!(s.source.starts_with(check), "{}", s.name);
        }
    }

    #[test]
    fn every_script_has_a_header_and_a_distinct_sha() {
        let all = scripts();
        assert_eq!(all.len(), ALL_SCRIPTS);
        for s in &all {
            // Shared code (wake_next) may come first; the operation's own
            // header must still open a line.
            let header = format!("-- {}:", s.name);
            assert!(
                s.source.starts_with(&header) || s.source.contains(&format!("\n{header}")),
                "{}",
                s.name
            );
            assert!(s.source.contains("KEYS[1") && s.source.contains("Returns"));
            assert_eq!(s.sha1.len(), 40);
        }
        let mut shas: Vec<_> = all.iter().map(|s| s.sha1).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), ALL_SCRIPTS);
    }

    #[test]
    fn owned_codes() {
        assert_eq!(owned(1), Owned::Ours);
        assert_eq!(owned(0), Owned::Theirs);
        assert_eq!(owned(-1), Owned::Gone);
        assert!(Owned::Gone.into_result().is_err());
    }
}
