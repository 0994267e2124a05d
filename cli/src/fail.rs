//! How the CLI fails: one line on stderr and a meaningful exit code.
//!
//! - `2`: a usage error (clap's own exit code, also used for a malformed URL,
//!   and for a name in use as another kind of lock: `run` on a name an
//!   election leads, `--permits` on a mutex's name).
//! - `69` (`EX_UNAVAILABLE`): Redis could not be reached.
//! - `1`: anything else (for `run`, including a lock held elsewhere; see
//!   `run.rs` for its other codes).
//! - `75` (`EX_TEMPFAIL`): `run` lost its lease while the command ran.

use std::fmt;

/// Exit code for "Redis could not be reached" (sysexits `EX_UNAVAILABLE`).
pub const EX_UNAVAILABLE: u8 = 69;
/// Exit code for usage errors (as clap uses).
pub const EX_USAGE: u8 = 2;
/// Exit code for every other failure.
pub const EX_FAILURE: u8 = 1;
/// Exit code of `run` when the lease was lost while the command ran
/// (sysexits `EX_TEMPFAIL`).
pub const EX_TEMPFAIL: u8 = 75;

/// A failed command: the message for stderr and the process exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A Redis error met while talking to `url`, doing `what`.
    pub fn redis(url: &str, what: &str, err: &redis::RedisError) -> Failure {
        let code = if err.kind() == redis::ErrorKind::InvalidClientConfig {
            EX_USAGE
        } else if err.is_connection_refusal()
            || err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
        {
            EX_UNAVAILABLE
        } else {
            EX_FAILURE
        };
        Failure::new(code, format!("{what} ({}): {err}", redact(url)))
    }

    /// A redbell error met while talking to `url`, doing `what`.
    pub fn lock(url: &str, what: &str, err: &redbell::Error) -> Failure {
        match err {
            redbell::Error::Redis(e) => Failure::redis(url, what, e),
            other => Failure::new(EX_FAILURE, format!("{what}: {other}")),
        }
    }

    /// Like [`Failure::lock`], for input taken from the command line: an
    /// invalid lock name or duration, or a name in use as another kind of
    /// lock, is a usage error (`2`).
    pub fn input(url: &str, what: &str, err: &redbell::Error) -> Failure {
        match err {
            redbell::Error::InvalidName { .. }
            | redbell::Error::InvalidLease { .. }
            | redbell::Error::InvalidPermits { .. }
            | redbell::Error::PermitsMismatch { .. }
            | redbell::Error::KindConflict { .. } => {
                Failure::new(EX_USAGE, format!("{what}: {err}"))
            }
            other => Failure::lock(url, what, other),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The URL (or comma-separated URLs) with any password replaced by `***`,
/// for messages.
pub fn redact(urls: &str) -> String {
    urls.split(',')
        .map(redact_one)
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_one(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{}{masked}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}
