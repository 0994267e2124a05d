//! Reading many locks at once, at a cost the caller bounds: finding lock
//! names with `SCAN`, and inspecting many locks in one pipeline (what
//! `redbell top` does once a second).

use crate::admin::owners_key;
use crate::keys::Kind;
use crate::{Client, Error, LockInfo, scripts};

/// One page of lock names from [`Client::scan_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockScan {
    /// Where the next page starts; `0` when the pass over the keyspace is
    /// complete.
    pub cursor: u64,
    /// The lock names found on this page (possibly none, and a name may
    /// come again in a later page of the same pass, as `SCAN` allows).
    pub names: Vec<String>,
    /// Those of `names` found by a key only a
    /// [`Semaphore`](crate::Semaphore) has (`P:{N}:holders`, `:queue` or
    /// `:permits`): read them with
    /// [`semaphore_status`](Client::semaphore_status), as
    /// [`inspect`](Client::inspect) does not read a semaphore's keys.
    pub semaphores: Vec<String>,
}

impl Client {
    /// One page of the names of locks under the client's prefix: one
    /// `SCAN cursor MATCH P:{pattern}* COUNT count`, each key found turned
    /// into its lock's name (the part between the braces). Every lock of
    /// any kind keeps a key while it is held or waited for, and its fence
    /// key from its first exclusive acquisition until the fence expiry
    /// ([`ClientBuilder::fence_ttl`](crate::ClientBuilder::fence_ttl),
    /// 7 days by default) after its last, so this finds every lock in use
    /// and every one used lately. Semaphores and elections under the same
    /// prefix are found too. `pattern` is a Redis glob on the names (`*`
    /// for all); `count` is the `SCAN` hint of how many keys the server
    /// looks at (it may return more or fewer). Start with cursor `0`, and
    /// pass each page's [`cursor`](LockScan::cursor) to the next call
    /// until it is `0` again; a lock with several keys comes once per page.
    ///
    /// Cost: one command, which examines about `count` keys on the server.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when Redis fails, or on a Redis Cluster (whose keys
    /// are spread over its primaries: name the locks instead), with the
    /// kind [`InvalidClientConfig`](redis::ErrorKind::InvalidClientConfig).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn scan_locks(
        &self,
        cursor: u64,
        pattern: &str,
        count: u32,
    ) -> Result<LockScan, Error> {
        let conn = &self.0.conn;
        if conn.is_cluster() {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "scan_locks cannot scan a Redis Cluster",
                "name the locks instead".to_owned(),
            ))));
        }
        let prefix = glob_escape(&self.0.config.prefix);
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:{{{pattern}}}*"))
            .arg("COUNT")
            .arg(count.max(1))
            .query_async(&mut conn.manager())
            .await
            .map_err(|e| {
                conn.report(&e);
                Error::from(e)
            })?;
        let head = format!("{}:{{", self.0.config.prefix);
        let mut names: Vec<String> = Vec::new();
        let mut semaphores: Vec<String> = Vec::new();
        for key in &keys {
            let Some((name, rest)) = key.strip_prefix(&head).and_then(|k| k.split_once('}')) else {
                continue;
            };
            if name.is_empty() || name.contains('{') {
                continue;
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
            let semaphore_key = matches!(rest, ":holders" | ":queue" | ":permits");
            if semaphore_key && !semaphores.iter().any(|n| n == name) {
                semaphores.push(name.to_owned());
            }
        }
        Ok(LockScan {
            cursor: next,
            names,
            semaphores,
        })
    }

    /// [`inspect`](Client::inspect) for each of `names`, in one round trip:
    /// one pipeline of the inspect script's calls (on a Redis Cluster,
    /// whose pipelines go to one node, one call per lock instead). Each
    /// lock's answer is its own: a bad name or a key of foreign data fails
    /// that lock only.
    ///
    /// Cost: one script call per name, each a snapshot taken atomically on
    /// the server (a few reads of the lock's keys).
    ///
    /// # Errors
    ///
    /// The outer [`Error::Redis`] when Redis fails (nothing was read); per
    /// lock, as [`inspect`](Client::inspect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect_many(
        &self,
        names: &[&str],
    ) -> Result<Vec<Result<LockInfo, Error>>, Error> {
        let keys: Vec<Result<_, Error>> = names
            .iter()
            .map(|name| self.keys(name, Kind::Plain))
            .collect();
        let valid: Vec<_> = keys
            .iter()
            .filter_map(|k| k.as_ref().ok())
            .map(|k| (k, owners_key(k)))
            .collect();
        let mut read = scripts::inspect_many(&self.0.conn, &valid)
            .await?
            .into_iter();
        Ok(keys
            .into_iter()
            .map(|k| {
                let keys = k?;
                let snapshot = read.next().unwrap_or(Err(Error::Closed))?;
                Ok(LockInfo::of(keys.name().to_owned(), snapshot))
            })
            .collect())
    }
}

/// `text` with Redis's glob characters escaped, so a prefix matches only
/// itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_escapes_only_glob_characters() {
        assert_eq!(glob_escape("redbell"), "redbell");
        assert_eq!(glob_escape("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
    }
}
