//! How the CLI fails: one line on stderr and a meaningful exit code, the
//! sysexits ones where one fits, so a script can tell contention from a
//! setup that no retry will mend ([`EXIT_CODES`] is the table `--help`
//! prints).
//!
//! - `2`: a usage error (clap's own exit code, also used for a malformed URL,
//!   and for a name in use as another kind of lock: `run` on a name an
//!   election leads, `--permits` on a mutex's name).
//! - `69` (`EX_UNAVAILABLE`): Redis could not be reached.
//! - `77` (`EX_NOPERM`): the server refused the login (a wrong password or
//!   user), or its ACL denied a command, key or channel.
//! - `78` (`EX_CONFIG`): a configuration no retry mends: a database the
//!   server does not have, a certificate that does not verify (an unknown
//!   CA, a wrong host name) or a TLS file that cannot be read or parsed.
//! - `1`: anything else (for `run`, including a lock held elsewhere; see
//!   `run.rs` for its other codes).
//! - `75` (`EX_TEMPFAIL`): `run` lost its lease while the command ran.
//!
//! `redbell-bench` (`bench/`) compiles this very file in by path for its
//! own failures: it uses only `std`, `redis` and `redbell`, and must stay so.

use std::fmt;

/// Exit code for "Redis could not be reached" (sysexits `EX_UNAVAILABLE`).
pub const EX_UNAVAILABLE: u8 = 69;
/// Exit code for a refused login or an ACL denial (sysexits `EX_NOPERM`).
pub const EX_NOPERM: u8 = 77;
/// Exit code for a configuration error: a bad database, a certificate that
/// does not verify, an unreadable file (sysexits `EX_CONFIG`).
pub const EX_CONFIG: u8 = 78;
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
        let text = err.to_string();
        let code = if err.kind() == redis::ErrorKind::InvalidClientConfig {
            if certificate_problem(&text) {
                EX_CONFIG // a PEM that does not parse
            } else {
                EX_USAGE
            }
        } else if is_login_or_acl(err, &text) {
            EX_NOPERM
        } else if certificate_problem(&text) || text.contains("DB index") {
            EX_CONFIG
        } else if err.is_connection_refusal()
            || err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
        {
            EX_UNAVAILABLE
        } else {
            EX_FAILURE
        };
        // What a user can do about a server certificate from an unknown CA.
        let hint = if text.contains("UnknownIssuer") {
            " (give the CA that signed it with --tls-ca, or for a test server \
             skip the check with --tls-insecure)"
        } else {
            ""
        };
        Failure::new(code, format!("{what} ({}): {err}{hint}", redact(url)))
    }

    /// A redbell error met while talking to `url`, doing `what`.
    pub fn lock(url: &str, what: &str, err: &redbell::Error) -> Failure {
        match err {
            redbell::Error::Redis(e) => Failure::redis(url, what, e),
            redbell::Error::NoPermission { .. } => {
                Failure::new(EX_NOPERM, format!("{what} ({}): {err}", redact(url)))
            }
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

/// A refused login (`WRONGPASS`, `NOAUTH`, a failed `AUTH`) or an ACL
/// denial (`NOPERM`).
fn is_login_or_acl(err: &redis::RedisError, text: &str) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || [
            "WRONGPASS",
            "NOAUTH",
            "NOPERM",
            "invalid password",
            "invalid username",
        ]
        .iter()
        .any(|s| text.contains(s))
}

/// A TLS certificate that does not verify, or a PEM that does not parse:
/// rustls's and redis-rs's words for them (the error kind is only `Io` or
/// `InvalidClientConfig`).
fn certificate_problem(text: &str) -> bool {
    [
        "certificate",
        "UnknownIssuer",
        "NotValidForName",
        "PEM",
        "private key",
    ]
    .iter()
    .any(|s| text.contains(s))
}

/// The exit codes every subcommand shares, as `redbell --help` prints them.
pub const EXIT_CODES: &str = "\
Exit codes (sysexits where one fits):
  0        success
  1        the lock is held elsewhere (run -n) or the wait timed out (run -w); any
           other failure
  2        usage error: a bad option, lock name or duration, or a name in use as
           another kind of lock
  69       Redis could not be reached (refused, timed out, dropped)
  75       run/elect: the lease or the leadership was lost while the command ran
  77       permission: the login was refused (a wrong password or user), or the
           server's ACL denied a command, key or channel
  78       configuration: a database the server does not have, a TLS certificate
           that does not verify (an unknown CA, a wrong host name), a password or
           TLS file that cannot be read
  126/127  run/elect: the command could not be started (not executable / not found)
  128+N    run/elect: the command was killed by signal N";

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
