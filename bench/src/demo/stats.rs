//! Counting the Redis commands of a run with `INFO commandstats`.

use redis::aio::MultiplexedConnection;

use super::report::Commands;

/// Commands the demo itself uses for bookkeeping, never on the sale path.
const BOOKKEEPING: [&str; 5] = ["info", "lrange", "llen", "lpush", "blpop"];

/// Calls per command from `INFO commandstats`; `None` if the server refuses
/// INFO (some managed services do).
pub async fn command_calls(conn: &mut MultiplexedConnection) -> Option<Vec<(String, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .ok()?;
    Some(crate::commandstats::parse(&info))
}

/// Calls made between the two snapshots, bookkeeping excluded.
pub fn sale_commands(before: &[(String, u64)], after: &[(String, u64)]) -> Commands {
    let mut commands = Commands {
        total: 0,
        scripts: 0,
    };
    for (name, calls) in after {
        if BOOKKEEPING.contains(&name.as_str()) {
            continue;
        }
        let earlier = before
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, c)| *c);
        let delta = calls.saturating_sub(earlier);
        commands.total += delta;
        if crate::commandstats::SCRIPT_CALLS.contains(&name.as_str()) {
            commands.scripts += delta;
        }
    }
    commands
}
