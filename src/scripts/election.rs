//! The leader election's scripts (`elect_*.lua`): their KEYS and ARGV, in
//! the order each header lists, and the reading of their replies.

use redis::Value;

use super::call::Call;
use super::registry::{ELECT_LEADER, ELECT_PROCLAIM, ELECT_RESIGN};
use crate::Error;
use crate::conn::Conn;

/// What `elect_leader.lua` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The leader of `term`, its value at revision `rev`, and the remaining
    /// ms of its lease (`None`: no expiry).
    Leader {
        term: u64,
        rev: u64,
        pttl_ms: Option<u64>,
        value: String,
    },
    /// No leader. `holder_pttl_ms`: the remaining ms of a holder of the lock
    /// that is not (yet) a leader, `None` when the lock is free (or its key
    /// has no expiry); every term up to `ended` has ended.
    Vacant {
        holder_pttl_ms: Option<u64>,
        ended: u64,
    },
}

/// Who leads: one atomic read of the lock key and the leader key.
pub(crate) async fn leader(conn: &Conn, lock: &str, leader: &str) -> Result<Reading, Error> {
    let reply: Vec<Value> = Call::new(&ELECT_LEADER)
        .key(lock)
        .key(leader)
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, leader))?;
    let malformed = || {
        Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected reply from elect_leader",
        )))
    };
    match reply.as_slice() {
        [flag, term, rev, pttl, value] if int(flag) == Some(1) => Ok(Reading::Leader {
            term: text(term).parse().map_err(|_| malformed())?,
            rev: text(rev).parse().unwrap_or(1),
            pttl_ms: int(pttl).and_then(|p| u64::try_from(p).ok()),
            value: text(value),
        }),
        [_, pttl, ended] => Ok(Reading::Vacant {
            holder_pttl_ms: int(pttl).and_then(|p| u64::try_from(p).ok()),
            ended: text(ended).parse().unwrap_or(0),
        }),
        _ => Err(malformed()),
    }
}

/// What a proclamation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proclaimed {
    /// Set and published, at this revision.
    Done { rev: u64 },
    /// The caller does not lead (any more): nothing was written.
    NotLeader,
}

/// The keys and arguments of one proclamation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proclamation<'a> {
    pub(crate) lock: &'a str,
    pub(crate) leader: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) token: &'a str,
    pub(crate) term: u64,
    pub(crate) value: &'a str,
    /// The first proclamation of a term (`true`) or a later one.
    pub(crate) elected: bool,
    /// Expiry of the leader key, in ms.
    pub(crate) ttl_ms: u64,
}

/// Sets the leader's value if `token` still leads, and publishes it.
pub(crate) async fn proclaim(conn: &Conn, p: Proclamation<'_>) -> Result<Proclaimed, Error> {
    let (done, rev): (i64, u64) = Call::new(&ELECT_PROCLAIM)
        .key(p.lock)
        .key(p.leader)
        .arg(p.token)
        .arg(p.term)
        .arg(p.value)
        .arg(if p.elected { "elected" } else { "proclaimed" })
        .arg(p.channel)
        .arg(p.ttl_ms)
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, p.leader))?;
    Ok(match done {
        1 => Proclaimed::Done { rev },
        _ => Proclaimed::NotLeader,
    })
}

/// Clears the leader key if it names `token`, and publishes the
/// resignation. Returns whether it did.
pub(crate) async fn resign(
    conn: &Conn,
    leader: &str,
    channel: &str,
    token: &str,
) -> Result<bool, Error> {
    let done: i64 = Call::new(&ELECT_RESIGN)
        .key(leader)
        .arg(token)
        .arg(channel)
        .invoke(conn)
        .await
        .map_err(|e| Error::from_redis(e, leader))?;
    Ok(done == 1)
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        other => text(other).parse().ok(),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}
