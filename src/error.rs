//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong with a redbell lock.
///
/// Each variant is something a caller acts on differently: a [`Timeout`] is
/// "try later or give up", [`NotHeld`] is "your critical section may have
/// overlapped with another holder", the `Invalid*` variants are bugs in the
/// caller's input, and [`Redis`] is an infrastructure failure (see
/// [`Error::is_retryable`]).
///
/// [`Timeout`]: Error::Timeout
/// [`NotHeld`]: Error::NotHeld
/// [`Redis`]: Error::Redis
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The deadline given to a `*_timeout` call passed before the lock was
    /// acquired. Nothing is held.
    #[error("timed out waiting for the lock")]
    Timeout,

    /// The lock was no longer ours when we tried to release or extend it:
    /// the lease expired (and another client may have taken the lock since).
    #[error("the lock is no longer held by this owner (its lease expired)")]
    NotHeld,

    /// The lock name cannot be used: empty, containing `{` or `}` (which
    /// would break the cluster hash tag), containing control characters, or
    /// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (cut to its first 64 characters).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A lease (or another duration) is zero, shorter than
    /// [`MIN_LEASE`](crate::MIN_LEASE) or longer than
    /// [`MAX_LEASE`](crate::MAX_LEASE): the same rule wherever a lease is
    /// given (`with_lease`, `max_hold`, `extend`, the builder's settings).
    /// `duration` is the value given.
    #[error("invalid duration {duration:?}: {reason}")]
    InvalidLease {
        /// The offending duration.
        duration: Duration,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A key redbell uses exists in Redis with a type other than string
    /// (someone else's data is stored under the lock's name). Nothing was
    /// written.
    #[error("key {key:?} holds a value of the wrong type for a lock")]
    WrongType {
        /// The Redis key.
        key: String,
    },

    /// The lock name is in use as another kind of lock: a [`Mutex`],
    /// [`FairMutex`], [`RwLock`], [`Semaphore`] and [`Election`] on one
    /// name would not wake each other's waiters, and would not exclude
    /// each other (a `Mutex` beside readers or permits, an RwLock writer or
    /// reader beside permits, a `Mutex` taken while an election leads), so
    /// the attempt is refused, in whichever order they come: every pair of
    /// kinds, an RwLock held by its writer or by readers only. Nothing was
    /// written. One name, one kind.
    ///
    /// [`Mutex`]: crate::Mutex
    /// [`FairMutex`]: crate::FairMutex
    /// [`RwLock`]: crate::RwLock
    /// [`Semaphore`]: crate::Semaphore
    /// [`Election`]: crate::Election
    #[error(
        "lock {name:?} is in use as another kind of lock (Mutex, FairMutex, RwLock, Semaphore or Election)"
    )]
    KindConflict {
        /// The lock's name.
        name: String,
    },

    /// Redis answered with an error, or could not be reached (connection
    /// refused or dropped, authentication failed, ...). The source error is
    /// kept.
    #[error("redis error: {0}")]
    Redis(#[source] redis::RedisError),

    /// The lock was acquired on the primary, but fewer replicas than asked
    /// for (see [`min_replica_acks`](crate::ClientBuilder::min_replica_acks))
    /// acknowledged it in time, so a failover could lose it: it was released
    /// again, and nothing is held. (For a renewal: the lease is treated as
    /// not renewed.)
    #[error("only {acked} of {wanted} replicas acknowledged the write in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },

    /// The server's ACL denies this client's user something a lock needs: a
    /// command (`EVALSHA`, `SUBSCRIBE`, one the scripts run, ...), a key
    /// under the prefix (`~prefix:*`), or a channel under it
    /// (`&prefix:*`). Found at connect where the server can say (`ACL
    /// DRYRUN`, and a `PUBLISH` probe), else by the first command refused.
    /// Grant the rule in the crate docs' [ACL users](crate#acl-users)
    /// section.
    #[error("the server's ACL denies this user {command}: {detail}")]
    NoPermission {
        /// What was denied: the command, e.g. `PUBLISH` or `SUBSCRIBE`
        /// (`EVALSHA` when a script was refused and the server did not
        /// say which of its commands).
        command: String,
        /// The server's words.
        detail: String,
    },

    /// The semaphore exists in Redis with another permit count than this
    /// handle asks for (another client made it with a different `permits`).
    /// Nothing was written: the count is never resized silently. It can
    /// change only once no holder and no waiter remains and the stored count
    /// has expired with them (at most a lease after the last one left).
    #[error("semaphore {name:?} has {stored} permits in Redis, this handle asks for {asked}")]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The permit count stored in Redis.
        stored: u32,
        /// The permit count this handle was made with.
        asked: u32,
    },

    /// A semaphore was made with zero permits: nobody could ever acquire it.
    #[error("invalid permit count {permits} for semaphore {name:?}: {reason}")]
    InvalidPermits {
        /// The semaphore's name (cut to its first 64 characters).
        name: String,
        /// The offending count.
        permits: u32,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A script refused the call because the client speaks another version
    /// of the wire protocol than the script (`PROTOCOL.md`, "Compatibility
    /// and versioning"; this crate speaks
    /// [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION)). The script checks
    /// the version before it reads or writes a key: nothing was written.
    /// Every client of one namespace (one Redis deployment and key prefix)
    /// must speak the same protocol version: run one version of redbell
    /// (and of any port built from its `.lua` files) on a namespace, or
    /// give the two versions different prefixes. Retrying does not help.
    #[error(
        "the client speaks redbell protocol {client:?} but the scripts speak {scripts:?}: every client of one namespace must speak the same protocol version"
    )]
    Protocol {
        /// The version the call carried (as the script echoed it: cut to
        /// 16 characters, unusual characters shown as `?`).
        client: String,
        /// The version the script speaks.
        scripts: String,
    },

    /// The client's background machinery has shut down (the Tokio runtime
    /// is going away).
    #[error("the redbell client is closed")]
    Closed,
}

impl Error {
    /// Whether retrying the same call later may succeed: true for timeouts,
    /// for connection-level Redis failures (refused, dropped, timed out) and
    /// for a server that cannot take writes for now (`READONLY`: a primary
    /// demoted in a failover; `NOREPLICAS`, `LOADING`, `MASTERDOWN`, `TRYAGAIN`,
    /// `CLUSTERDOWN`); false for invalid input, wrong key types,
    /// authentication failures and [`Error::NotHeld`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Timeout | Error::NotReplicated { .. } => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || matches!(
                        e.code(),
                        Some(
                            "READONLY"
                                | "NOREPLICAS"
                                | "LOADING"
                                | "MASTERDOWN"
                                | "TRYAGAIN"
                                | "CLUSTERDOWN"
                        )
                    )
            }
            _ => false,
        }
    }

    /// Maps an error from a script or command that touched `key`: the
    /// server's `WRONGTYPE` becomes [`Error::WrongType`], an ACL refusal
    /// [`Error::NoPermission`], the rest [`Error::Redis`].
    pub(crate) fn from_redis(err: redis::RedisError, key: &str) -> Error {
        if err.code() == Some("WRONGTYPE") {
            Error::WrongType {
                key: key.to_owned(),
            }
        } else {
            Error::from(err)
        }
    }
}

impl From<redis::RedisError> for Error {
    /// [`Error::NoPermission`] for an ACL refusal, [`Error::Protocol`] for
    /// a script's refusal of the protocol version, else [`Error::Redis`].
    fn from(err: redis::RedisError) -> Self {
        if let Some(refused) = protocol(&err) {
            return refused;
        }
        match denied(&err) {
            Some(command) => Error::NoPermission {
                command,
                detail: err.detail().unwrap_or_default().to_owned(),
            },
            None => Error::Redis(err),
        }
    }
}

/// The [`Error::Protocol`] a script's `REDBELL_PROTOCOL client speaks <x>,
/// scripts speak <y>` error reply becomes (`protocol.lua`).
fn protocol(err: &redis::RedisError) -> Option<Error> {
    if err.code() != Some("REDBELL_PROTOCOL") {
        return None;
    }
    let detail = err.detail().unwrap_or_default();
    let (client, scripts) = detail
        .strip_prefix("client speaks ")
        .and_then(|rest| rest.split_once(", scripts speak "))
        .unwrap_or(("", detail));
    Some(Error::Protocol {
        client: client.trim().to_owned(),
        scripts: scripts.trim().to_owned(),
    })
}

/// When `err` is an ACL refusal, what was refused. A command refuses with
/// `NOPERM`; a command inside a script, on Redis 7.0, with `ERR The user
/// executing the script can't ...` (later servers say `NOPERM` there too).
fn denied(err: &redis::RedisError) -> Option<String> {
    let detail = err.detail().unwrap_or_default();
    let refused = match err.code() {
        Some("NOPERM") => true,
        Some("ERR") => {
            detail.contains("user executing the script") || detail.contains("no permissions")
        }
        _ => false,
    };
    if !refused {
        return None;
    }
    let lower = detail.to_ascii_lowercase();
    // "... to run the 'publish' command", "... can't publish to the channel"
    let named = lower
        .split_once("run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(cmd, _)| cmd.to_ascii_uppercase());
    Some(named.unwrap_or_else(|| {
        if lower.contains("publish") || lower.contains("channel") {
            "PUBLISH".to_owned()
        } else if lower.contains("script") {
            "EVALSHA".to_owned()
        } else {
            "a command".to_owned()
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
    }

    /// The error a server reply `-CODE detail` becomes.
    fn server(code: &str, detail: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn acl_refusals_are_no_permission() {
        let e = Error::from(server(
            "NOPERM",
            "this user has no permissions to run the 'subscribe' command",
        ));
        assert!(
            matches!(&e, Error::NoPermission { command, .. } if command == "SUBSCRIBE"),
            "{e}"
        );
        let e = Error::from(server(
            "ERR",
            "The user executing the script can't publish to the channel mentioned in the command",
        ));
        assert!(
            matches!(&e, Error::NoPermission { command, .. } if command == "PUBLISH"),
            "{e}"
        );
        assert!(!e.is_retryable());
        let e = Error::from(server("ERR", "unknown command 'FOO'"));
        assert!(matches!(e, Error::Redis(_)), "{e}");
    }

    #[test]
    fn a_refused_protocol_version_is_protocol() {
        let e = Error::from(server(
            "REDBELL_PROTOCOL",
            "client speaks 2, scripts speak 1",
        ));
        assert!(
            matches!(&e, Error::Protocol { client, scripts } if client == "2" && scripts == "1"),
            "{e:?}"
        );
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("same protocol version"), "{e}");
        // Through the mapping of a script call on a key, too.
        let e = Error::from_redis(
            server("REDBELL_PROTOCOL", "client speaks none, scripts speak 1"),
            "redbell:{n}",
        );
        assert!(
            matches!(&e, Error::Protocol { client, .. } if client == "none"),
            "{e:?}"
        );
    }
}
