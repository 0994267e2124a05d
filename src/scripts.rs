//! The Lua scripts, embedded once, and the one place their results are
//! turned into Rust values and errors.
//!
//! Each script lives in its own file under `scripts/lua/`, whose header lists
//! its KEYS, ARGV and every return value. Scripts run by `EVALSHA`; after a
//! `SCRIPT FLUSH` (or on a server that never saw them) redis-rs answers the
//! `NOSCRIPT` error by loading the script and retrying once.

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionManager;

use crate::Error;
use crate::client::LockKeys;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/lua/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/lua/release.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/lua/extend.lua")));

/// One of the Lua scripts redbell runs on the server.
///
/// Listed by [`scripts()`] for operators who want to pre-load them
/// (`SCRIPT LOAD`) or audit what runs on their servers.
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
    [
        (
            "acquire",
            include_str!("../scripts/lua/acquire.lua"),
            &*ACQUIRE,
        ),
        (
            "release",
            include_str!("../scripts/lua/release.lua"),
            &*RELEASE,
        ),
        (
            "extend",
            include_str!("../scripts/lua/extend.lua"),
            &*EXTEND,
        ),
    ]
    .into_iter()
    .map(|(name, source, script)| ScriptInfo {
        name,
        source,
        sha1: script.get_hash(),
    })
    .collect()
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

pub(crate) async fn acquire(
    conn: &mut ConnectionManager,
    keys: &LockKeys,
    token: &str,
    lease_ms: u64,
    fence_ttl_ms: u64,
) -> Result<Acquire, Error> {
    let (flag, value): (i64, i64) = ACQUIRE
        .key(&keys.lock)
        .key(&keys.fence)
        .arg(token)
        .arg(lease_ms)
        .arg(fence_ttl_ms)
        .invoke_async(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.lock))?;
    Ok(match flag {
        1 => Acquire::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        },
        _ => Acquire::Held {
            pttl_ms: u64::try_from(value).ok(),
        },
    })
}

pub(crate) async fn release(
    conn: &mut ConnectionManager,
    keys: &LockKeys,
    token: &str,
) -> Result<Owned, Error> {
    let code: i64 = RELEASE
        .key(&keys.lock)
        .key(&keys.channel)
        .arg(token)
        .invoke_async(conn)
        .await
        .map_err(|e| Error::from_redis(e, &keys.lock))?;
    Ok(owned(code))
}

/// Extends every `(keys, token)` lock to `lease_ms` from now, in one script
/// call; one outcome per lock, in order.
pub(crate) async fn extend(
    conn: &mut ConnectionManager,
    locks: &[(&LockKeys, &str)],
    lease_ms: u64,
) -> Result<Vec<Owned>, Error> {
    let mut invocation = EXTEND.prepare_invoke();
    invocation.arg(lease_ms);
    for (keys, token) in locks {
        invocation.key(&keys.lock).arg(*token);
    }
    let codes: Vec<i64> = invocation.invoke_async(conn).await.map_err(|e| {
        let key = locks.first().map_or("", |(keys, _)| keys.lock.as_str());
        Error::from_redis(e, key)
    })?;
    Ok(codes.into_iter().map(owned).collect())
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
        assert_eq!(all.len(), 3);
        for s in &all {
            assert!(
                s.source.starts_with(&format!("-- {}:", s.name)),
                "{}",
                s.name
            );
            assert!(s.source.contains("KEYS[1") && s.source.contains("Returns"));
            assert_eq!(s.sha1.len(), 40);
        }
        let mut shas: Vec<_> = all.iter().map(|s| s.sha1).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), 3);
    }

    #[test]
    fn owned_codes() {
        assert_eq!(owned(1), Owned::Ours);
        assert_eq!(owned(0), Owned::Theirs);
        assert_eq!(owned(-1), Owned::Gone);
        assert!(Owned::Gone.into_result().is_err());
    }
}
