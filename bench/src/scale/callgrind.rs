//! A server's counts under Callgrind (the counted part, `counted.rs`):
//! [`take`] reads the counts since the last take with `callgrind_control
//! --dump`, which also zeroes them. Every other run's servers are not
//! counted, and [`take`] returns `None` for them at once.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use super::server::{Server, field};

/// The directory the counted servers dump to; set only in the child.
pub const DIR_VAR: &str = "REDBELL_CALLGRIND_DIR";

/// A server's counts over a window.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Counts {
    /// Instructions executed.
    pub instructions: u64,
    /// Simulated last-level cache misses (instruction and data).
    pub ll_misses: u64,
}

impl Counts {
    /// Instructions and misses per operation, of `ops` operations.
    pub fn per_op(self, ops: u64) -> [f64; 2] {
        let n = ops.max(1) as f64;
        [self.instructions as f64 / n, self.ll_misses as f64 / n]
    }
}

/// The counts of the server behind `srv` since the last take, or `None`
/// when it does not run under Callgrind (every run but this part's).
pub async fn take(srv: &mut Server) -> Option<Counts> {
    let dir = PathBuf::from(std::env::var_os(DIR_VAR)?);
    let pid = field(&srv.info("server").await.ok()?, "process_id")?;
    let status = tokio::process::Command::new("callgrind_control")
        .arg("--dump")
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .ok()?;
    if !status.success() {
        return None;
    }
    newest_dump(&dir, pid).and_then(|p| parse(&std::fs::read_to_string(p).ok()?))
}

/// The newest dump of process `pid` in `dir`: `redis.PID.N` with the
/// highest N.
fn newest_dump(dir: &Path, pid: u64) -> Option<PathBuf> {
    let prefix = format!("redis.{pid}.");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
            Some((n, dir.join(name)))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
}

/// The totals of a Callgrind dump: its `events:` line names the columns
/// of its `summary:` (or `totals:`) line.
fn parse(dump: &str) -> Option<Counts> {
    let line = |tag: &str| {
        dump.lines()
            .find_map(|l| l.strip_prefix(tag))
            .map(|rest| rest.split_whitespace().collect::<Vec<_>>())
    };
    let events = line("events:")?;
    let totals = line("summary:").or_else(|| line("totals:"))?;
    let get = |name: &str| {
        events
            .iter()
            .position(|e| *e == name)
            .and_then(|i| totals.get(i))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(Counts {
        instructions: get("Ir"),
        ll_misses: get("ILmr") + get("DLmr") + get("DLmw"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_dumps_totals_by_event_name() {
        let dump = "version: 1\ncreator: callgrind-3.24.0\n\
                    events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
                    fn=(1) main\n5 10 2 1 0 0 0 0 0 0\n\
                    summary: 1000 300 200 40 30 20 4 3 2\n";
        let c = super::parse(dump).expect("totals");
        assert_eq!(c.instructions, 1000);
        assert_eq!(c.ll_misses, 9);
        assert!(super::parse("events: Ir\n").is_none());
    }
}
