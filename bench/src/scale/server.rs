//! What the scale rows read from the server and from `/proc`: `INFO`
//! sections, `CLIENT LIST`, key counts, and a process's resident memory.
//! Every reader is one command on the bench's own connection; the commands
//! the bench itself sends are left out of the counts ([`BOOKKEEPING`]).

use redis::aio::MultiplexedConnection;

use crate::commandstats;
use crate::fail::Failure;

/// The bench's own commands, left out of every count: they are the
/// measuring, not the measured.
const BOOKKEEPING: [&str; 12] = [
    "info",
    "type",
    "pttl",
    "memory|usage",
    "config|resetstat",
    "client|list",
    "pubsub|channels",
    "pubsub|shardchannels",
    "pubsub|shardnumsub",
    "dbsize",
    "scan",
    "zcard",
];

/// The library's default fence TTL (7 days), for prefilled fence keys.
const FENCE_TTL_MS: u64 = 7 * 24 * 3_600 * 1_000;

/// The bench's connection to the server it measures.
pub struct Server {
    url: String,
    conn: MultiplexedConnection,
    /// This connection's `CLIENT ID`, left out of [`Server::clients`].
    pub own_id: u64,
}

/// One line of `CLIENT LIST`.
#[derive(Debug, Clone)]
pub struct ClientRow {
    pub id: u64,
    /// `P` for a pub/sub connection (`flags=P`).
    pub pubsub: bool,
    /// Channels and shard channels this connection is subscribed to.
    pub channels: u64,
}

impl Server {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> Result<Server, Failure> {
        let client =
            redis::Client::open(url).map_err(|e| Failure::redis(url, "invalid Redis URL", &e))?;
        // A long response timeout: a SCAN of 100,000 keys on a server
        // under Callgrind (the counted part) takes seconds.
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(std::time::Duration::from_secs(120)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| Failure::redis(url, "cannot connect to Redis", &e))?;
        let own_id: u64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .map_err(|e| Failure::redis(url, "CLIENT ID", &e))?;
        Ok(Server {
            url: url.to_owned(),
            conn,
            own_id,
        })
    }

    async fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &mut redis::Cmd,
        what: &str,
    ) -> Result<T, Failure> {
        cmd.query_async(&mut self.conn)
            .await
            .map_err(|e| Failure::redis(&self.url, what, &e))
    }

    /// The text of `INFO section`.
    pub async fn info(&mut self, section: &str) -> Result<String, Failure> {
        self.query(redis::cmd("INFO").arg(section), "INFO").await
    }

    /// `used_memory` in bytes.
    pub async fn used_memory(&mut self) -> Result<u64, Failure> {
        let info = self.info("memory").await?;
        Ok(field(&info, "used_memory").unwrap_or(0))
    }

    /// The server's CPU time so far, µs (`used_cpu_sys + used_cpu_user`).
    pub async fn cpu_us(&mut self) -> Result<f64, Failure> {
        Ok(commandstats::cpu_us(&self.info("cpu").await?))
    }

    /// `CONFIG RESETSTAT`: zeroes `INFO commandstats`.
    pub async fn reset_stats(&mut self) -> Result<(), Failure> {
        self.query(redis::cmd("CONFIG").arg("RESETSTAT"), "CONFIG RESETSTAT")
            .await
    }

    /// Calls per command since the last reset, the bench's own left out.
    pub async fn calls(&mut self) -> Result<Vec<(String, u64)>, Failure> {
        let info = self.info("commandstats").await?;
        let mut calls = commandstats::parse(&info);
        calls.retain(|(name, _)| !BOOKKEEPING.contains(&name.as_str()));
        Ok(calls)
    }

    /// `CLIENT LIST`, every connection but this one.
    pub async fn clients(&mut self) -> Result<Vec<ClientRow>, Failure> {
        let text: String = self
            .query(redis::cmd("CLIENT").arg("LIST"), "CLIENT LIST")
            .await?;
        let own = self.own_id;
        Ok(text
            .lines()
            .filter_map(|line| {
                let get = |k: &str| {
                    line.split(' ')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                };
                let id: u64 = get("id")?.parse().ok()?;
                let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                Some(ClientRow {
                    id,
                    pubsub: get("flags").is_some_and(|f| f.contains('P')),
                    channels: num("sub") + num("ssub") + num("psub"),
                })
            })
            .filter(|c| c.id != own)
            .collect())
    }

    /// Subscribers of the shard channels matching `pattern`, summed
    /// (`PUBSUB SHARDCHANNELS`, then `PUBSUB SHARDNUMSUB`).
    pub async fn shard_subscribers(&mut self, pattern: &str) -> Result<u64, Failure> {
        let channels: Vec<String> = self
            .query(
                redis::cmd("PUBSUB").arg("SHARDCHANNELS").arg(pattern),
                "PUBSUB SHARDCHANNELS",
            )
            .await?;
        if channels.is_empty() {
            return Ok(0);
        }
        let counts: Vec<String> = self
            .query(
                redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channels),
                "PUBSUB SHARDNUMSUB",
            )
            .await?;
        Ok(counts
            .iter()
            .skip(1)
            .step_by(2)
            .filter_map(|v| v.parse::<u64>().ok())
            .sum())
    }

    /// Keys in the database (`DBSIZE`).
    pub async fn dbsize(&mut self) -> Result<u64, Failure> {
        self.query(&mut redis::cmd("DBSIZE"), "DBSIZE").await
    }

    /// Keys matching `pattern`, counted with `SCAN`.
    pub async fn count_keys(&mut self, pattern: &str) -> Result<u64, Failure> {
        let mut cursor = 0u64;
        let mut n = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = self
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(10_000),
                    "SCAN",
                )
                .await?;
            n += keys.len() as u64;
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }

    /// Up to `max` keys matching `pattern` that are not fence keys, each
    /// with its type and PTTL: what a leak looks like, for stderr.
    pub async fn strays(&mut self, pattern: &str, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = 0u64;
        loop {
            let Ok((next, keys)): Result<(u64, Vec<String>), _> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut self.conn)
                .await
            else {
                return out;
            };
            for k in keys.into_iter().filter(|k| !k.ends_with(":fence")) {
                if out.len() >= max {
                    return out;
                }
                let t: String = redis::cmd("TYPE")
                    .arg(&k)
                    .query_async(&mut self.conn)
                    .await
                    .unwrap_or_default();
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&k)
                    .query_async(&mut self.conn)
                    .await
                    .unwrap_or(-3);
                out.push(format!("{k} ({t}, pttl {ttl} ms)"));
            }
            if next == 0 {
                return out;
            }
            cursor = next;
        }
    }

    /// Bytes of one key (`MEMORY USAGE key SAMPLES 0`), 0 if absent.
    pub async fn memory_usage(&mut self, key: &str) -> Result<u64, Failure> {
        let n: Option<u64> = self
            .query(
                redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(key)
                    .arg("SAMPLES")
                    .arg(0),
                "MEMORY USAGE",
            )
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// Sets the fence keys of lock names `base-0` .. `base-(k-1)` as a
    /// lock of each name would have left them (pipelined `SET ... PX`):
    /// the keyspace of a server that serves K names.
    pub async fn prefill_fences(&mut self, base: &str, k: u32) -> Result<(), Failure> {
        for start in (0..k).step_by(1_000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1_000).min(k) {
                pipe.cmd("SET")
                    .arg(format!("redbell:{{{base}-{i}}}:fence"))
                    .arg(1)
                    .arg("PX")
                    .arg(FENCE_TTL_MS)
                    .ignore();
            }
            let () = pipe
                .query_async(&mut self.conn)
                .await
                .map_err(|e| Failure::redis(&self.url, "SET (prefill)", &e))?;
        }
        Ok(())
    }

    /// Deletes the keys matching `pattern` (best effort; `UNLINK` in batches).
    pub async fn delete_keys(&mut self, pattern: &str) {
        let mut cursor = 0u64;
        loop {
            let Ok((next, keys)): Result<(u64, Vec<String>), _> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut self.conn)
                .await
            else {
                return;
            };
            if !keys.is_empty() {
                let _: Result<(), _> = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut self.conn)
                    .await;
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }

    /// Members of the sorted sets `keys`, summed (`ZCARD`, pipelined).
    pub async fn zcard_sum(&mut self, keys: &[String]) -> Result<u64, Failure> {
        let mut total = 0;
        for chunk in keys.chunks(1_000) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("ZCARD").arg(k);
            }
            let counts: Vec<u64> = pipe
                .query_async(&mut self.conn)
                .await
                .map_err(|e| Failure::redis(&self.url, "ZCARD", &e))?;
            total += counts.iter().sum::<u64>();
        }
        Ok(total)
    }
}

/// An integer field `name:value` of an `INFO` text.
pub fn field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (k, v) = line.trim().split_once(':')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// `usec` of command `name` in an `INFO commandstats` text.
pub fn usec(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?.strip_prefix(name)?;
            rest.strip_prefix(':')?
                .split(',')
                .find_map(|kv| kv.strip_prefix("usec="))?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// The script calls of an `INFO commandstats` text, and the µs the server
/// spent running them.
pub fn script_time(info: &str) -> (u64, f64) {
    let calls = script_calls(&commandstats::parse(info));
    let us = commandstats::SCRIPT_CALLS
        .iter()
        .map(|n| usec(info, n))
        .sum();
    (calls, us)
}

/// Script calls (the lock's own commands, on its keys) among `calls`.
pub fn script_calls(calls: &[(String, u64)]) -> u64 {
    calls
        .iter()
        .filter(|(n, _)| commandstats::SCRIPT_CALLS.contains(&n.as_str()))
        .map(|(_, c)| c)
        .sum()
}

/// Resident memory of process `pid` in bytes (`VmRSS` of
/// `/proc/PID/status`), or `None` where there is no `/proc`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let kib: u64 = line
            .strip_prefix("VmRSS:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    })
}

/// µs since the Unix epoch (the bench's processes share one clock).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_fields_and_rss_lines() {
        let info = "# Memory\r\nused_memory:1234\r\nused_memory_human:1.2K\r\n";
        assert_eq!(super::field(info, "used_memory"), Some(1234));
        assert_eq!(super::field(info, "nope"), None);
        assert!(super::rss_bytes(std::process::id()).is_some_and(|b| b > 0));
        let stats =
            "cmdstat_evalsha:calls=3,usec=42,usec_per_call=14\r\ncmdstat_info:calls=1,usec=9\r\n";
        assert_eq!(super::usec(stats, "info"), 9.0);
        assert_eq!(super::script_time(stats), (3, 42.0));
    }
}
