//! The Lua scripts, embedded once, and the one place their results are
//! turned into Rust values and errors.
//!
//! Each script lives in its own file under `scripts/lua/`, whose header lists
//! its KEYS, ARGV and every return value. Scripts run by `EVALSHA`; after a
//! `SCRIPT FLUSH` (or on a server that never saw them) redis-rs answers the
//! `NOSCRIPT` error by loading the script and retrying once.

use std::sync::OnceLock;

use redis::{Cmd, FromRedisValue, RedisResult, Script, ToRedisArgs};

use crate::Error;
use crate::client::{Kind, LockKeys};
use crate::conn::Conn;

const ACQUIRE_LUA: &str = include_str!("../scripts/lua/acquire.lua");
const EXTEND_LUA: &str = include_str!("../scripts/lua/extend.lua");
/// `wake_next.lua` defines the function both of these call.
const RELEASE_LUA: &str = concat!(
    include_str!("../scripts/lua/wake_next.lua"),
    include_str!("../scripts/lua/release.lua")
);
const PASS_LUA: &str = concat!(
    include_str!("../scripts/lua/wake_next.lua"),
    include_str!("../scripts/lua/pass.lua")
);

const STATUS_LUA: &str = include_str!("../scripts/lua/status.lua");
const FORCE_RELEASE_LUA: &str = concat!(
    include_str!("../scripts/lua/wake_next.lua"),
    include_str!("../scripts/lua/force_release.lua")
);

/// `fair_common.lua` defines the functions the fair scripts call.
const FAIR_ACQUIRE_LUA: &str = concat!(
    include_str!("../scripts/lua/fair_common.lua"),
    include_str!("../scripts/lua/fair_acquire.lua")
);
const FAIR_RELEASE_LUA: &str = concat!(
    include_str!("../scripts/lua/fair_common.lua"),
    include_str!("../scripts/lua/fair_release.lua")
);
const FAIR_PASS_LUA: &str = concat!(
    include_str!("../scripts/lua/fair_common.lua"),
    include_str!("../scripts/lua/fair_pass.lua")
);

const RW_READ_ACQUIRE_LUA: &str = include_str!("../scripts/lua/rw_read_acquire.lua");
const RW_WRITE_ACQUIRE_LUA: &str = include_str!("../scripts/lua/rw_write_acquire.lua");
const RW_READ_RELEASE_LUA: &str = include_str!("../scripts/lua/rw_read_release.lua");
const RW_WRITE_RELEASE_LUA: &str = include_str!("../scripts/lua/rw_write_release.lua");
const RW_READ_EXTEND_LUA: &str = include_str!("../scripts/lua/rw_read_extend.lua");
const RW_PASS_LUA: &str = include_str!("../scripts/lua/rw_pass.lua");

/// One embedded script: its name (the file's), its source (with any
/// shared code prepended) and, once first used, its SHA1.
struct Lua {
    name: &'static str,
    source: &'static str,
    script: OnceLock<Script>,
    /// The Redis Cluster variant: `PUBLISH` becomes `SPUBLISH` (sharded
    /// pub/sub, delivered only inside the lock's shard).
    sharded: OnceLock<(String, Script)>,
}

impl Lua {
    const fn new(name: &'static str, source: &'static str) -> Lua {
        Lua {
            name,
            source,
            script: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }

    /// The source and script to run on a single server or on a cluster.
    fn variant(&self, cluster: bool) -> (&str, &Script) {
        if cluster {
            let (source, script) = self.sharded.get_or_init(|| {
                let source = self.source.replace("'PUBLISH'", "'SPUBLISH'");
                let script = Script::new(&source);
                (source, script)
            });
            (source, script)
        } else {
            (self.source, self.script())
        }
    }
}

static ACQUIRE: Lua = Lua::new("acquire", ACQUIRE_LUA);
static RELEASE: Lua = Lua::new("release", RELEASE_LUA);
static EXTEND: Lua = Lua::new("extend", EXTEND_LUA);
static PASS: Lua = Lua::new("pass", PASS_LUA);
static STATUS: Lua = Lua::new("status", STATUS_LUA);
static FORCE_RELEASE: Lua = Lua::new("force_release", FORCE_RELEASE_LUA);
static FAIR_ACQUIRE: Lua = Lua::new("fair_acquire", FAIR_ACQUIRE_LUA);
static FAIR_RELEASE: Lua = Lua::new("fair_release", FAIR_RELEASE_LUA);
static FAIR_PASS: Lua = Lua::new("fair_pass", FAIR_PASS_LUA);
static RW_READ_ACQUIRE: Lua = Lua::new("rw_read_acquire", RW_READ_ACQUIRE_LUA);
static RW_WRITE_ACQUIRE: Lua = Lua::new("rw_write_acquire", RW_WRITE_ACQUIRE_LUA);
static RW_READ_RELEASE: Lua = Lua::new("rw_read_release", RW_READ_RELEASE_LUA);
static RW_WRITE_RELEASE: Lua = Lua::new("rw_write_release", RW_WRITE_RELEASE_LUA);
static RW_READ_EXTEND: Lua = Lua::new("rw_read_extend", RW_READ_EXTEND_LUA);
static RW_PASS: Lua = Lua::new("rw_pass", RW_PASS_LUA);

/// Every script, in the order [`scripts()`] lists them.
static ALL: [&Lua; 15] = [
    &ACQUIRE,
    &RELEASE,
    &EXTEND,
    &PASS,
    &STATUS,
    &FORCE_RELEASE,
    &FAIR_ACQUIRE,
    &FAIR_RELEASE,
    &FAIR_PASS,
    &RW_READ_ACQUIRE,
    &RW_WRITE_ACQUIRE,
    &RW_READ_RELEASE,
    &RW_WRITE_RELEASE,
    &RW_READ_EXTEND,
    &RW_PASS,
];

/// One of the Lua scripts redbell runs on the server.
///
/// Listed by [`scripts()`] for operators who want to pre-load them
/// (`SCRIPT LOAD`) or audit what runs on their servers. On Redis Cluster the
/// scripts that publish run in a variant with `SPUBLISH` for `PUBLISH`
/// (another SHA1); redbell loads whatever is missing itself.
#[derive(Debug, Clone, Copy)]
pub struct ScriptInfo {
    /// The operation's name, as in `scripts/lua/<name>.lua`.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// The SHA1 hex digest `EVALSHA` uses.
    pub sha1: &'static str,
}

/// Every Lua script redbell runs, with its SHA1.
pub fn scripts() -> Vec<ScriptInfo> {
    ALL.iter()
        .map(|lua| ScriptInfo {
            name: lua.name,
            source: lua.source,
            sha1: lua.script().get_hash(),
        })
        .collect()
}

/// One script call being built. Like redis-rs's `ScriptInvocation` (EVALSHA,
/// and on `NOSCRIPT` — a flushed or promoted server — load and retry once),
/// but it can also be pipelined with `WAIT` on the same connection, and its
/// errors are reported to the [`Conn`] so a moved primary is noticed.
pub(crate) struct Call {
    script: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    fn new(script: &'static Lua) -> Call {
        Call {
            script,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    fn key(&mut self, key: impl ToRedisArgs) -> &mut Call {
        key.write_redis_args(&mut self.keys);
        self
    }

    fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Call {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn eval(&self, source: &str) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(source)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    fn evalsha(&self, script: &Script) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    async fn invoke<T: FromRedisValue>(&self, conn: &Conn) -> RedisResult<T> {
        Ok(self.run(conn, None).await?.0)
    }

    /// Runs the script, followed by `WAIT` when `wait` is given; returns the
    /// reply and how many replicas acknowledged.
    async fn run<T: FromRedisValue>(
        &self,
        conn: &Conn,
        wait: Option<Replication>,
    ) -> RedisResult<(T, Option<u32>)> {
        let mut manager = conn.manager();
        let (source, script) = self.script.variant(conn.is_cluster());
        // EVALSHA first; after NOSCRIPT (a flushed, restarted or promoted
        // node) EVAL with the source, which runs it and caches it on the
        // node that owns the keys (SCRIPT LOAD would go to every node of a
        // cluster, and fail if any one is unreachable).
        let mut command = self.evalsha(script);
        let mut by_source = false;
        loop {
            let result = match wait {
                None => command
                    .query_async::<T>(&mut manager)
                    .await
                    .map(|reply| (reply, None)),
                Some(w) => redis::pipe()
                    .add_command(command.clone())
                    .cmd("WAIT")
                    .arg(w.replicas)
                    .arg(w.timeout_ms)
                    .query_async::<(T, u32)>(&mut manager)
                    .await
                    .map(|(reply, acked)| (reply, Some(acked))),
            };
            match result {
                Err(e) if e.code() == Some("NOSCRIPT") && !by_source => {
                    command = self.eval(source);
                    by_source = true;
                }
                Err(e) => {
                    conn.report(&e);
                    return Err(e);
                }
                Ok(reply) => return Ok(reply),
            }
        }
    }
}

/// `WAIT replicas timeout` after writes: see
/// [`ClientBuilder::min_replica_acks`](crate::ClientBuilder::min_replica_acks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replication {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

impl Replication {
    /// `WAIT replicas timeout`; `None` (off) for 0 replicas.
    pub(crate) fn new(replicas: u32, timeout: std::time::Duration) -> Option<Replication> {
        (replicas > 0).then(|| Replication {
            replicas,
            timeout_ms: crate::client::millis(timeout),
        })
    }
}

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The key is ours; the fencing counter is now this value.
    Acquired { fence: u64 },
    /// Someone else holds it for this many more milliseconds (`None`: the
    /// key has no expiry).
    Held { pttl_ms: Option<u64> },
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

/// How long a release reserves the free lock for the waiter it woke: long
/// enough for the wake-up and the woken waiter's attempt on a busy machine,
/// short enough that a woken client that died on the spot stalls nobody for
/// long (parked waiters retry when the reservation's PTTL ends).
const HANDOFF_MS: u64 = 100;

/// How a waiting caller is queued by a failed acquire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queue<'a> {
    /// `"<client id>:<waiter id>"`.
    pub(crate) member: &'a str,
    /// How long the entry outlives the holder's PTTL.
    pub(crate) grace_ms: u64,
    /// The park on a key without expiry.
    pub(crate) park_ms: u64,
}

/// How long a fair release's grant holds the lock for the woken waiter
/// before it confirms: a grant that never reaches its waiter costs the next
/// one this long.
pub(crate) const CLAIM_MS: u64 = 500;

/// One acquire attempt; a failed one queues `queue` when given.
pub(crate) async fn acquire(
    conn: &Conn,
    keys: &LockKeys,
    token: &str,
    lease_ms: u64,
    queue: Option<Queue<'_>>,
    replication: Option<Replication>,
) -> Result<Acquire, Error> {
    let member = queue.map_or("", |q| q.member);
    let grace_ms = queue.map_or(0, |q| q.grace_ms);
    let park_ms = queue.map_or(0, |q| q.park_ms);
    let mut invocation = match keys.kind {
        Kind::Plain => Call::new(&ACQUIRE),
        Kind::Fair => Call::new(&FAIR_ACQUIRE),
        Kind::Read => Call::new(&RW_READ_ACQUIRE),
        Kind::Write => Call::new(&RW_WRITE_ACQUIRE),
    };
    match keys.kind {
        Kind::Plain | Kind::Fair => {
            invocation
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.waiters)
                .arg(token)
                .arg(lease_ms)
                .arg(keys.fence_ttl_ms)
                .arg(member)
                .arg(grace_ms)
                .arg(park_ms);
        }
        Kind::Read | Kind::Write => {
            invocation
                .key(&keys.writer)
                .key(&keys.readers)
                .key(&keys.waiters)
                .key(&keys.fence)
                .arg(token)
                .arg(lease_ms);
        }
    }
    match keys.kind {
        Kind::Plain => invocation.key(&keys.handoff),
        Kind::Fair => invocation
            .key(&keys.expiry)
            .key(&keys.handoff)
            .arg(&keys.wake_prefix)
            .arg(CLAIM_MS),
        Kind::Read => invocation.arg(park_ms),
        Kind::Write => invocation
            .key(&keys.channel)
            .arg(keys.fence_ttl_ms)
            .arg(member)
            .arg(grace_ms)
            .arg(park_ms),
    };
    let ((flag, value), acked): ((i64, i64), _) = match invocation.run(conn, replication).await {
        Ok(reply) => reply,
        Err(e) if e.code() == Some("WRONGTYPE") => {
            return Err(Error::WrongType {
                key: foreign_key(conn, keys).await,
            });
        }
        Err(e) => return Err(Error::Redis(e)),
    };
    if let (1, Some(wanted), Some(acked)) = (flag, replication, acked) {
        if acked < wanted.replicas {
            // Not known to survive a failover: give it back, and say so.
            release(conn, keys, token).await?;
            return Err(Error::NotReplicated {
                acked,
                wanted: wanted.replicas,
            });
        }
    }
    Ok(match flag {
        1 => Acquire::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        },
        _ => Acquire::Held {
            pttl_ms: u64::try_from(value).ok(),
        },
    })
}

/// Which of the lock's keys holds data of a type redbell does not put there
/// (asked after a script failed with WRONGTYPE; one pipelined round trip).
async fn foreign_key(conn: &Conn, keys: &LockKeys) -> String {
    let expected: Vec<(&str, &str)> = match keys.kind {
        Kind::Plain => vec![
            (&keys.lock, "string"),
            (&keys.fence, "string"),
            (&keys.waiters, "zset"),
            (&keys.handoff, "string"),
        ],
        Kind::Fair => vec![
            (&keys.lock, "string"),
            (&keys.fence, "string"),
            (&keys.waiters, "zset"),
            (&keys.expiry, "zset"),
            (&keys.handoff, "string"),
        ],
        Kind::Read | Kind::Write => vec![
            (&keys.writer, "string"),
            (&keys.readers, "zset"),
            (&keys.waiters, "zset"),
            (&keys.fence, "string"),
        ],
    };
    let mut pipe = redis::pipe();
    for (key, _) in &expected {
        pipe.cmd("TYPE").arg(*key);
    }
    let types: Vec<String> = pipe
        .query_async(&mut conn.manager())
        .await
        .unwrap_or_default();
    expected
        .iter()
        .zip(&types)
        .find(|((_, want), got)| got.as_str() != "none" && got.as_str() != *want)
        .map_or_else(|| keys.lock.clone(), |((key, _), _)| (*key).to_owned())
}

/// Deletes the lock if `token` still owns it, and wakes (plain) or grants
/// the lock to (fair) the head waiter.
pub(crate) async fn release(conn: &Conn, keys: &LockKeys, token: &str) -> Result<Owned, Error> {
    let mut invocation = match keys.kind {
        Kind::Plain => Call::new(&RELEASE),
        Kind::Fair => Call::new(&FAIR_RELEASE),
        Kind::Read => Call::new(&RW_READ_RELEASE),
        Kind::Write => Call::new(&RW_WRITE_RELEASE),
    };
    match keys.kind {
        Kind::Read | Kind::Write => {
            invocation.key(&keys.lock).key(&keys.channel).arg(token);
        }
        Kind::Plain | Kind::Fair => move_queue_on(&mut invocation, keys, token),
    };
    let code: i64 = invocation
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.lock))?;
    Ok(owned(code))
}

/// Takes `member` out of the lock's queue and passes on any wake-up (plain)
/// or grant (fair) it had. Returns whether another waiter was woken.
pub(crate) async fn pass(conn: &Conn, keys: &LockKeys, member: &str) -> Result<bool, Error> {
    if keys.kind == Kind::Read {
        return Ok(false); // readers never queue
    }
    let mut invocation = match keys.kind {
        Kind::Plain => Call::new(&PASS),
        Kind::Fair => Call::new(&FAIR_PASS),
        Kind::Read | Kind::Write => Call::new(&RW_PASS),
    };
    match keys.kind {
        Kind::Read | Kind::Write => {
            invocation
                .key(&keys.waiters)
                .key(&keys.channel)
                .key(&keys.writer)
                .key(&keys.readers)
                .arg(member);
        }
        Kind::Plain | Kind::Fair => move_queue_on(&mut invocation, keys, member),
    };
    let woke: i64 = invocation
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.waiters))?;
    Ok(woke == 1)
}

/// The keys and arguments of the queue-moving scripts (release and pass,
/// plain and fair): `who` is the token being released or the member leaving.
fn move_queue_on(invocation: &mut Call, keys: &LockKeys, who: &str) {
    match keys.kind {
        Kind::Fair => invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.waiters)
            .key(&keys.expiry)
            .key(&keys.handoff)
            .arg(who)
            .arg(&keys.wake_prefix)
            .arg(CLAIM_MS)
            .arg(keys.fence_ttl_ms),
        _ => invocation
            .key(&keys.lock)
            .key(&keys.waiters)
            .key(&keys.handoff)
            .arg(who)
            .arg(&keys.wake_prefix)
            .arg(HANDOFF_MS),
    };
}

/// Extends every `(keys, token)` lock to `lease_ms` from now: one script
/// call per family (readers' holds live in a sorted set and need their own
/// script) and, on a cluster, per slot (a script's keys must share one).
/// One outcome per lock, in order: a group whose call failed (or was not
/// acknowledged by enough replicas) gives that error for its locks only, so
/// a stalled shard cannot cost the locks of the others their leases.
pub(crate) async fn extend(
    conn: &Conn,
    locks: &[(&LockKeys, &str)],
    lease_ms: u64,
    replication: Option<Replication>,
) -> Vec<Result<Owned, Error>> {
    let mut groups: Vec<((bool, u16), Vec<usize>)> = Vec::new();
    for (i, (keys, _)) in locks.iter().enumerate() {
        let slot = if conn.is_cluster() {
            hash_slot(&keys.lock)
        } else {
            0
        };
        let group = (keys.kind == Kind::Read, slot);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    let mut out: Vec<Result<Owned, Error>> = (0..locks.len()).map(|_| Err(Error::Closed)).collect();
    for ((readers, _), family) in groups {
        let script = if readers { &RW_READ_EXTEND } else { &EXTEND };
        let mut call = Call::new(script);
        call.arg(lease_ms);
        for &i in &family {
            call.key(&locks[i].0.lock).arg(locks[i].1);
        }
        match call.run::<Vec<i64>>(conn, replication).await {
            Ok((codes, acked)) => {
                let short = match (replication, acked) {
                    (Some(wanted), Some(acked)) if acked < wanted.replicas => Some((acked, wanted)),
                    _ => None,
                };
                for (&i, code) in family.iter().zip(codes) {
                    out[i] = match short {
                        Some((acked, wanted)) => Err(Error::NotReplicated {
                            acked,
                            wanted: wanted.replicas,
                        }),
                        None => Ok(owned(code)),
                    };
                }
            }
            Err(e) => {
                for &i in &family {
                    out[i] = Err(Error::from_redis(e.clone(), &locks[i].0.lock));
                }
            }
        }
    }
    out
}

/// The raw snapshot of `status.lua`: holder ("" = free), pttl, fence
/// ("" = none), live waiters.
pub(crate) async fn status(
    conn: &Conn,
    keys: &LockKeys,
) -> Result<(String, i64, String, u64), Error> {
    Call::new(&STATUS)
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.waiters)
        .key(format!("{}:fifo:expiry", keys.lock))
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.lock))
}

/// Deletes the lock whoever holds it and wakes the head waiter; returns the
/// removed token ("" if the lock was free).
pub(crate) async fn force_release(conn: &Conn, keys: &LockKeys) -> Result<String, Error> {
    Call::new(&FORCE_RELEASE)
        .key(&keys.lock)
        .key(&keys.waiters)
        .key(&keys.handoff)
        .arg(&keys.wake_prefix)
        .arg(HANDOFF_MS)
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.lock))
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its `{hash tag}` if
/// it has a non-empty one, else of the whole key, modulo 16384.
fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
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

    #[test]
    fn every_script_has_a_header_and_a_distinct_sha() {
        let all = scripts();
        assert_eq!(all.len(), 15);
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
        assert_eq!(shas.len(), 15);
    }

    #[test]
    fn hash_slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("redbell:{foo}:fence"), 12182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    }

    #[test]
    fn owned_codes() {
        assert_eq!(owned(1), Owned::Ours);
        assert_eq!(owned(0), Owned::Theirs);
        assert_eq!(owned(-1), Owned::Gone);
        assert!(Owned::Gone.into_result().is_err());
    }
}
