//! The per-kind layouts: which script each operation runs for each
//! [`Kind`], with which KEYS and ARGV (in the order each `.lua` header
//! lists), and the conversion of each reply.

use super::call::Call;
use super::registry::*;
use super::{Attempt, Owned, owned};
use crate::Error;
use crate::conn::Conn;
use crate::keys::{
    CLAIM_MS, HANDOFF_MS, INTENT_WINDOW_MS, Kind, LockKeys, Replication, SEM_RESERVE_MS, hash_slot,
};

/// How a waiting caller is queued by a failed acquire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queue<'a> {
    /// `"<client id>:<waiter id>"`.
    pub(crate) member: &'a str,
    /// How long the entry outlives the holder's PTTL.
    pub(crate) grace_ms: u64,
    /// The park on a key without expiry.
    pub(crate) park_ms: u64,
    /// FairMutex and Semaphore: when the waiter first reached the server
    /// (µs of server time, from a failed attempt it made before its turn
    /// to queue came), to queue it by that arrival rather than by now.
    pub(crate) arrival_us: Option<u64>,
}

/// One acquire attempt; a failed one queues `queue` when given. With
/// `replication`, `WAIT` follows in the same pipeline and the count of
/// replicas that acknowledged comes back beside the outcome (what to do
/// about too few is the caller's policy).
pub(crate) async fn acquire(
    conn: &Conn,
    keys: &LockKeys,
    token: &str,
    lease_ms: u64,
    queue: Option<Queue<'_>>,
    replication: Option<Replication>,
) -> Result<(Attempt, Option<u32>), Error> {
    let member = queue.map_or("", |q| q.member);
    let grace_ms = queue.map_or(0, |q| q.grace_ms);
    let park_ms = queue.map_or(0, |q| q.park_ms);
    let arrival = queue
        .and_then(|q| q.arrival_us)
        .map_or_else(String::new, |us| us.to_string());
    let mut invocation = match keys.kind {
        Kind::Plain | Kind::Election => Call::new(&ACQUIRE),
        Kind::Fair => Call::new(&FAIR_ACQUIRE),
        Kind::Read => Call::new(&RW_READ_ACQUIRE),
        Kind::Write => Call::new(&RW_WRITE_ACQUIRE),
        Kind::Semaphore => Call::new(&SEM_ACQUIRE),
    };
    match keys.kind {
        Kind::Semaphore => {
            invocation
                .key(keys.token_key())
                .key(keys.fence())
                .key(keys.queue())
                .key(keys.queue_expiry())
                .key(keys.count())
                .arg(token)
                .arg(lease_ms)
                .arg(keys.fence_ttl_ms)
                .arg(member)
                .arg(grace_ms)
                .arg(park_ms)
                .arg(keys.wake_prefix())
                .arg(keys.permits)
                .arg(SEM_RESERVE_MS)
                .arg(&arrival);
        }
        Kind::Plain | Kind::Election | Kind::Fair => {
            invocation
                .key(keys.token_key())
                .key(keys.fence())
                .key(keys.queue())
                .arg(token)
                .arg(lease_ms)
                .arg(keys.fence_ttl_ms)
                .arg(member)
                .arg(grace_ms)
                .arg(park_ms);
        }
        Kind::Read | Kind::Write => {
            invocation
                .key(keys.writer())
                .key(keys.readers())
                .key(keys.queue())
                .key(keys.fence())
                .arg(token)
                .arg(lease_ms);
        }
    }
    // The keys of the other kinds that share the name, checked only (one
    // kind per name): readers and permits beside a Mutex or FairMutex, the
    // lock key and readers beside a Semaphore, permits (the count key, read
    // with the fence, then the permits themselves) beside an RwLock.
    match keys.kind {
        Kind::Semaphore => invocation.key(keys.writer()).key(keys.readers()),
        Kind::Plain | Kind::Election => invocation
            .key(keys.readers())
            .key(keys.holders())
            .arg(HANDOFF_MS)
            .arg(keys.kind.token_tag().to_string()),
        Kind::Fair => invocation
            .key(keys.handoff())
            .key(keys.readers())
            .key(keys.holders())
            .arg(keys.wake_prefix())
            .arg(CLAIM_MS)
            .arg(&arrival),
        Kind::Read => invocation
            .key(keys.count())
            .key(keys.holders())
            .arg(park_ms),
        Kind::Write => invocation
            .key(keys.channel())
            .key(keys.count())
            .key(keys.holders())
            .arg(keys.fence_ttl_ms)
            .arg(member)
            .arg(grace_ms)
            .arg(park_ms),
    };
    // {flag, value} or, from the fair and semaphore scripts, {0, park,
    // server time in µs}.
    let (reply, acked): (Vec<i64>, _) = match invocation.run(conn, replication).await {
        Ok(reply) => reply,
        Err(e) if e.code() == Some("WRONGTYPE") => {
            return Err(Error::WrongType {
                key: foreign_key(conn, keys).await,
            });
        }
        Err(e) if e.code() == Some("WRONGKIND") => {
            return Err(Error::KindConflict {
                name: keys.name().to_owned(),
            });
        }
        Err(e) if e.code() == Some("PERMITS") => {
            return Err(Error::PermitsMismatch {
                name: keys.name().to_owned(),
                stored: e.detail().and_then(|d| d.trim().parse().ok()).unwrap_or(0),
                asked: keys.permits,
            });
        }
        Err(e) => return Err(Error::from(e)),
    };
    let value = reply.get(1).copied().unwrap_or(-1);
    let outcome = match reply.first() {
        Some(1) => Attempt::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        },
        _ => Attempt::Held {
            pttl_ms: u64::try_from(value).ok(),
            server_us: reply.get(2).and_then(|&us| u64::try_from(us).ok()),
        },
    };
    Ok((outcome, acked))
}

/// Which of the lock's keys holds data of a type redbell does not put there
/// (asked after a script failed with WRONGTYPE; one pipelined round trip).
async fn foreign_key(conn: &Conn, keys: &LockKeys) -> String {
    let expected: Vec<(&str, &str)> = match keys.kind {
        Kind::Plain | Kind::Election => vec![
            (keys.token_key(), "string"),
            (keys.fence(), "string"),
            (keys.queue(), "zset"),
            (keys.readers(), "zset"),
            (keys.holders(), "zset"),
        ],
        Kind::Fair => vec![
            (keys.token_key(), "string"),
            (keys.fence(), "string"),
            (keys.queue(), "zset"),
            (keys.handoff(), "string"),
            (keys.readers(), "zset"),
            (keys.holders(), "zset"),
        ],
        Kind::Read | Kind::Write => vec![
            (keys.writer(), "string"),
            (keys.readers(), "zset"),
            (keys.queue(), "zset"),
            (keys.fence(), "string"),
            (keys.holders(), "zset"),
        ],
        Kind::Semaphore => vec![
            (keys.token_key(), "zset"),
            (keys.fence(), "string"),
            (keys.queue(), "zset"),
            (keys.queue_expiry(), "zset"),
            (keys.count(), "string"),
            (keys.readers(), "zset"),
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
        .map_or_else(
            || keys.token_key().to_owned(),
            |((key, _), _)| (*key).to_owned(),
        )
}

/// Deletes the lock if `token` still owns it (gives the permit back, for a
/// semaphore), and wakes (plain, semaphore) or grants the lock to (fair)
/// the head waiter(s).
pub(crate) async fn release(conn: &Conn, keys: &LockKeys, token: &str) -> Result<Owned, Error> {
    let mut invocation = match keys.kind {
        Kind::Plain | Kind::Election => Call::new(&RELEASE),
        Kind::Fair => Call::new(&FAIR_RELEASE),
        Kind::Read => Call::new(&RW_READ_RELEASE),
        Kind::Write => Call::new(&RW_WRITE_RELEASE),
        Kind::Semaphore => Call::new(&SEM_RELEASE),
    };
    match keys.kind {
        Kind::Read | Kind::Write => {
            invocation
                .key(keys.token_key())
                .key(keys.channel())
                .key(keys.queue())
                .arg(token)
                .arg(INTENT_WINDOW_MS);
        }
        Kind::Plain | Kind::Election | Kind::Fair | Kind::Semaphore => {
            move_queue_on(&mut invocation, keys, token)
        }
    };
    let code: i64 = invocation
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, keys.token_key()))?;
    Ok(owned(code))
}

/// Takes `member` out of the lock's queue and passes on any wake-up (plain)
/// or grant (fair) it had. Returns whether another waiter was woken.
pub(crate) async fn pass(conn: &Conn, keys: &LockKeys, member: &str) -> Result<bool, Error> {
    if keys.kind == Kind::Read {
        return Ok(false); // readers never queue
    }
    let mut invocation = match keys.kind {
        Kind::Plain | Kind::Election => Call::new(&PASS),
        Kind::Fair => Call::new(&FAIR_PASS),
        Kind::Read | Kind::Write => Call::new(&RW_PASS),
        Kind::Semaphore => Call::new(&SEM_PASS),
    };
    match keys.kind {
        Kind::Read | Kind::Write => {
            invocation
                .key(keys.queue())
                .key(keys.channel())
                .key(keys.writer())
                .key(keys.readers())
                .arg(member);
        }
        Kind::Plain | Kind::Election | Kind::Fair | Kind::Semaphore => {
            move_queue_on(&mut invocation, keys, member)
        }
    };
    let woke: i64 = invocation
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, keys.queue()))?;
    Ok(woke == 1)
}

/// The keys and arguments of the queue-moving scripts (release and pass,
/// plain, fair and semaphore): `who` is the token being released or the
/// member leaving.
fn move_queue_on(invocation: &mut Call, keys: &LockKeys, who: &str) {
    match keys.kind {
        Kind::Semaphore => invocation
            .key(keys.token_key())
            .key(keys.queue())
            .key(keys.queue_expiry())
            .key(keys.count())
            .arg(who)
            .arg(keys.wake_prefix())
            .arg(keys.permits)
            .arg(SEM_RESERVE_MS),
        Kind::Fair => invocation
            .key(keys.token_key())
            .key(keys.fence())
            .key(keys.queue())
            .key(keys.handoff())
            .arg(who)
            .arg(keys.wake_prefix())
            .arg(CLAIM_MS)
            .arg(keys.fence_ttl_ms),
        _ => invocation
            .key(keys.token_key())
            .key(keys.queue())
            .arg(who)
            .arg(keys.wake_prefix())
            .arg(HANDOFF_MS),
    };
}

/// Extends every `(keys, token)` lock to `lease_ms` from now: one script
/// call per family (readers' holds and semaphore permits live in sorted
/// sets and need scripts of their own) and, on a cluster, per slot (a
/// script's keys must share one).
/// One outcome per lock, in order: a group whose call failed (or was not
/// acknowledged by enough replicas) gives that error for its locks only, so
/// a stalled shard cannot cost the locks of the others their leases.
pub(crate) async fn extend(
    conn: &Conn,
    locks: &[(&LockKeys, &str)],
    lease_ms: u64,
    replication: Option<Replication>,
) -> Vec<Result<Owned, Error>> {
    let mut groups: Vec<((Family, u16), Vec<usize>)> = Vec::new();
    for (i, (keys, _)) in locks.iter().enumerate() {
        let slot = if conn.is_cluster() {
            hash_slot(keys.token_key())
        } else {
            0
        };
        let family = match keys.kind {
            Kind::Read => Family::Readers,
            Kind::Semaphore => Family::Permits,
            Kind::Plain | Kind::Election | Kind::Fair | Kind::Write => Family::Keys,
        };
        let group = (family, slot);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    let mut out: Vec<Result<Owned, Error>> = (0..locks.len()).map(|_| Err(Error::Closed)).collect();
    for ((kind, _), family) in groups {
        let mut call = Call::new(match kind {
            Family::Keys => &EXTEND,
            Family::Readers => &RW_READ_EXTEND,
            Family::Permits => &SEM_EXTEND,
        });
        call.arg(lease_ms);
        // Each lock's keys and its channel, in the order of the script's
        // header: a shortened lease tells the waiters.
        for &i in &family {
            let (keys, token) = locks[i];
            // The RwLock's channel is shared; the others' is a prefix.
            let channel = match keys.kind {
                Kind::Read | Kind::Write => keys.channel(),
                _ => keys.wake_prefix(),
            };
            match kind {
                Family::Keys => call
                    .key(keys.token_key())
                    .key(keys.queue())
                    .arg(token)
                    .arg(channel),
                Family::Readers => call.key(keys.token_key()).arg(token).arg(channel),
                Family::Permits => call
                    .key(keys.token_key())
                    .key(keys.count())
                    .key(keys.queue())
                    .arg(token)
                    .arg(channel),
            };
        }
        match call.run::<Vec<i64>>(conn, replication).await {
            Ok((codes, acked)) => {
                let short = match (replication, acked) {
                    (Some(wanted), Some(acked)) if acked < wanted.replicas() => {
                        Some((acked, wanted))
                    }
                    _ => None,
                };
                for (&i, code) in family.iter().zip(codes) {
                    out[i] = match short {
                        Some((acked, wanted)) => Err(Error::NotReplicated {
                            acked,
                            wanted: wanted.replicas(),
                        }),
                        None => Ok(owned(code)),
                    };
                }
            }
            Err(e) => {
                for &i in &family {
                    out[i] = Err(Error::from_redis(e.clone(), locks[i].0.token_key()));
                }
            }
        }
    }
    out
}

/// Which extend script renews a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// The token is a key's value (`extend.lua`).
    Keys,
    /// A reader's token in the readers set (`rw_read_extend.lua`).
    Readers,
    /// A permit's token in the holders set (`sem_extend.lua`).
    Permits,
}

/// The raw snapshot of `sem_status.lua`: the stored permit count ("" =
/// none), the last fence ("" = none), live waiters, and each live holder's
/// token and remaining lease in ms.
pub(crate) async fn semaphore_status(
    conn: &Conn,
    keys: &LockKeys,
) -> Result<(String, String, u64, Vec<(String, u64)>), Error> {
    let reply: Vec<redis::Value> = Call::new(&SEM_STATUS)
        .key(keys.token_key())
        .key(keys.fence())
        .key(keys.queue_expiry())
        .key(keys.count())
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, keys.token_key()))?;
    let text = |v: Option<&redis::Value>| -> String {
        v.and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            .unwrap_or_default()
    };
    let number = |v: Option<&redis::Value>| -> u64 {
        v.and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0)
    };
    let holders = reply
        .get(3..)
        .unwrap_or_default()
        .chunks(2)
        .map(|pair| (text(pair.first()), number(pair.get(1))))
        .collect();
    Ok((
        text(reply.first()),
        text(reply.get(1)),
        number(reply.get(2)),
        holders,
    ))
}

/// The raw snapshot of `inspect.lua`, for a lock of any kind.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The token in `P:{N}` ("" = none).
    pub(crate) holder: String,
    /// Its PTTL (-2: none, -1: no expiry).
    pub(crate) pttl: i64,
    /// The last fence ("" = none).
    pub(crate) fence: String,
    /// Live entries of the Mutex queue, the FairMutex queue, the RwLock
    /// writer intents.
    pub(crate) waiters: u64,
    pub(crate) fair: u64,
    pub(crate) intents: u64,
    /// The holder's owner note ("" = none).
    pub(crate) note: String,
    /// Live read holds: token, remaining ms, note ("" = none).
    pub(crate) readers: Vec<(String, u64, String)>,
    /// An Election's leader, when the holder has proclaimed itself: its
    /// term ("" = no leader) and value.
    pub(crate) term: String,
    pub(crate) value: String,
}

/// Reads every kind's state of the lock `keys` names (any kind's keys: the
/// base name is what counts) in one atomic call; `owners` is the owner-note
/// hash.
pub(crate) async fn inspect(conn: &Conn, keys: &LockKeys, owners: &str) -> Result<Snapshot, Error> {
    inspect_call(keys, owners)
        .invoke::<InspectReply>(conn)
        .await
        .map(snapshot)
        .map_err(|e| Error::from_redis(e, keys.writer()))
}

/// The inspect script's reply, as it comes.
type InspectReply = (
    String,
    i64,
    String,
    u64,
    u64,
    u64,
    String,
    Vec<String>,
    String,
    String,
);

fn inspect_call(keys: &LockKeys, owners: &str) -> Call {
    let base = keys.writer();
    let mut call = Call::new(&INSPECT);
    call.key(base)
        .key(keys.fence())
        .key(format!("{base}:waiters"))
        .key(format!("{base}:fifo"))
        .key(keys.readers())
        .key(format!("{base}:writers"))
        .key(owners)
        .key(format!("{base}:leader"));
    call
}

fn snapshot(reply: InspectReply) -> Snapshot {
    let (holder, pttl, fence, waiters, fair, intents, note, flat, term, value) = reply;
    let readers = flat
        .chunks_exact(3)
        .map(|r| (r[0].clone(), r[1].parse().unwrap_or(0), r[2].clone()))
        .collect();
    Snapshot {
        holder,
        pttl,
        fence,
        waiters,
        fair,
        intents,
        note,
        readers,
        term,
        value,
    }
}

/// [`inspect`] for many locks (each with its owner-notes key): on one
/// server, one pipeline of `EVALSHA`s (any that finds the script missing
/// runs again alone, by [`inspect`], which loads it); on a cluster, whose
/// pipelines go to one node, one call per lock. The outer error: the
/// pipeline itself failed (Redis unreachable).
pub(crate) async fn inspect_many(
    conn: &Conn,
    locks: &[(&LockKeys, String)],
) -> Result<Vec<Result<Snapshot, Error>>, Error> {
    if conn.is_cluster() {
        let mut out = Vec::with_capacity(locks.len());
        for (keys, owners) in locks {
            out.push(inspect(conn, keys, owners).await);
        }
        return Ok(out);
    }
    if locks.is_empty() {
        return Ok(Vec::new());
    }
    let calls: Vec<Call> = locks
        .iter()
        .map(|(keys, owners)| inspect_call(keys, owners))
        .collect();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in &calls {
        pipe.add_command(call.evalsha_cmd(conn));
    }
    let replies: Vec<redis::RedisResult<InspectReply>> =
        pipe.query_async(&mut conn.manager()).await.map_err(|e| {
            conn.report(&e);
            Error::from(e)
        })?;
    let mut out = Vec::with_capacity(locks.len());
    for ((call, (keys, _)), reply) in calls.iter().zip(locks).zip(replies) {
        let reply = match reply {
            Err(e) if e.code() == Some("NOSCRIPT") => call.invoke::<InspectReply>(conn).await,
            other => other,
        };
        out.push(
            reply
                .map(snapshot)
                .map_err(|e| Error::from_redis(e, keys.writer())),
        );
    }
    Ok(out)
}

/// Breaks the lock whatever its kind and moves it on as a release would;
/// returns `[kind, removed tokens...]` (kind "" when nothing was held).
pub(crate) async fn break_lock(conn: &Conn, keys: &LockKeys) -> Result<Vec<String>, Error> {
    let base = keys.writer();
    Call::new(&BREAK_LOCK)
        .key(base)
        .key(format!("{base}:waiters"))
        .key(keys.handoff())
        .key(keys.fence())
        .key(format!("{base}:fifo"))
        .key(format!("{base}:fifo:expiry"))
        .key(keys.readers())
        .key(format!("{base}:rw"))
        .arg(keys.wake_prefix())
        .arg(HANDOFF_MS)
        .arg(CLAIM_MS)
        .arg(keys.fence_ttl_ms)
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, base))
}
