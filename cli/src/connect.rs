//! Where Redis is, and connecting to it: one server (`--url`), a Redis
//! Cluster (`--cluster`) or a primary found through Redis Sentinel
//! (`--sentinel`, `--master`); the credentials and database; `--prefix` for
//! the keys. Every subcommand connects through [`connect`].
//!
//! Every option also comes from an environment variable (`REDBELL_URL`,
//! ...; the flag wins), read here by [`GlobalArgs::resolve`] rather than by
//! clap: clap counts a value from the environment as given, and prints it
//! in usage lines (`Usage: redbell status --url <URL> ...`) as if it were
//! required. Passwords never come from argv, where `ps` shows them: from
//! `REDBELL_PASSWORD` or `--password-file` (and the sentinels' from
//! `REDBELL_SENTINEL_PASSWORD` or `--sentinel-password-file`). They are put
//! into the URLs here, percent-encoded, so every mode takes them alike; the
//! variables that carry them are kept from the command `run` and `elect`
//! start ([`SECRET_VARS`]).

use std::path::PathBuf;

use redbell::Client;

use crate::fail::{EX_CONFIG, EX_USAGE, Failure};

/// What `-h` says of the Redis options it leaves out (`--help` shows them).
pub const REDIS_HINT: &str = "Redis options (--url, --cluster, --sentinel, --user, --password-file, --db, --tls-*, \
     --prefix; each also from an environment variable): see --help.";

/// The default server when neither `--url` nor an environment variable
/// names one.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The options every subcommand shares: where Redis is, how to log in, and
/// the key prefix. Shown by `--help` (not `-h`), under their own heading.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Redis options (every subcommand; each also from its variable)")]
pub struct GlobalArgs {
    /// Redis server URL (`redis://[user@]host:port[/db]`, `rediss://` for
    /// TLS). [env: REDBELL_URL, else REDIS_URL] [default:
    /// redis://127.0.0.1:6379]
    #[arg(long, global = true, value_name = "URL", hide_short_help = true)]
    pub url: Option<String>,

    /// A Redis Cluster: some of its nodes' URLs, comma-separated (the rest
    /// are discovered). Replaces --url. [env: REDBELL_CLUSTER]
    #[arg(
        long,
        global = true,
        value_name = "URLS",
        value_delimiter = ',',
        conflicts_with = "sentinel",
        hide_short_help = true
    )]
    pub cluster: Vec<String>,

    /// Redis Sentinel: the sentinels' URLs, comma-separated; with --master,
    /// the primary they name is used, and followed across failovers.
    /// Replaces --url. [env: REDBELL_SENTINEL]
    #[arg(
        long,
        global = true,
        value_name = "URLS",
        value_delimiter = ',',
        hide_short_help = true
    )]
    pub sentinel: Vec<String>,

    /// The master name the sentinels monitor (with --sentinel). [env:
    /// REDBELL_MASTER]
    #[arg(long, global = true, value_name = "NAME", hide_short_help = true)]
    pub master: Option<String>,

    /// The ACL user to log in as (with a password: see --password-file),
    /// on the server, every cluster node, or the sentinels' primary.
    /// [env: REDBELL_USER]
    #[arg(long, global = true, value_name = "NAME", hide_short_help = true)]
    pub user: Option<String>,

    /// A file whose first line is the password of the server, of every
    /// cluster node, or of the sentinels' primary (and the replicas it may
    /// fail over to). Or set REDBELL_PASSWORD; a password is never taken
    /// from the command line. [env: REDBELL_PASSWORD_FILE]
    #[arg(long, global = true, value_name = "FILE", hide_short_help = true)]
    pub password_file: Option<PathBuf>,

    /// The database number: on the server (as `/N` in its URL), or on the
    /// sentinels' primary. [env: REDBELL_DB]
    #[arg(long, global = true, value_name = "N", hide_short_help = true)]
    pub db: Option<i64>,

    /// The sentinels' own ACL user, if they require a login. [env:
    /// REDBELL_SENTINEL_USER]
    #[arg(long, global = true, value_name = "NAME", hide_short_help = true)]
    pub sentinel_user: Option<String>,

    /// A file whose first line is the sentinels' own password
    /// (`sentinel requirepass`). Or set REDBELL_SENTINEL_PASSWORD. [env:
    /// REDBELL_SENTINEL_PASSWORD_FILE]
    #[arg(long, global = true, value_name = "FILE", hide_short_help = true)]
    pub sentinel_password_file: Option<PathBuf>,

    /// TLS: a PEM file of the CA that signed the server's certificate (for a
    /// `rediss://` URL whose server the system's roots do not know). [env:
    /// REDBELL_TLS_CA]
    #[arg(long, global = true, value_name = "FILE", hide_short_help = true)]
    pub tls_ca: Option<PathBuf>,

    /// TLS: a PEM client certificate to present (with --tls-key), for a
    /// server that requires one (`tls-auth-clients yes`). [env:
    /// REDBELL_TLS_CERT]
    #[arg(long, global = true, value_name = "FILE", hide_short_help = true)]
    pub tls_cert: Option<PathBuf>,

    /// TLS: the PEM private key of --tls-cert. [env: REDBELL_TLS_KEY]
    #[arg(long, global = true, value_name = "FILE", hide_short_help = true)]
    pub tls_key: Option<PathBuf>,

    /// TLS: do not verify the server's certificate (like `redis-cli
    /// --insecure`), for a test server with a self-signed certificate. Prints
    /// a warning: anyone on the path can then read and change the traffic.
    /// Needs rediss:// URLs (--url or --cluster); a URL ending in `#insecure`
    /// does the same. [env: REDBELL_TLS_INSECURE=1]
    #[arg(long, global = true, hide_short_help = true)]
    pub tls_insecure: bool,

    /// Prefix of every key and channel: the lock N lives at `PREFIX:{N}`.
    /// [env: REDBELL_PREFIX] [default: redbell]
    #[arg(long, global = true, value_name = "P", hide_short_help = true)]
    pub prefix: Option<String>,

    /// The password, once resolved (`REDBELL_PASSWORD`, `--password-file`).
    #[arg(skip)]
    password: Option<String>,

    /// The sentinels' password, once resolved.
    #[arg(skip)]
    sentinel_password: Option<String>,
}

/// Variables that may carry a credential: `run` and `elect` remove them
/// from their command's environment (the URL variables only when the URL
/// has a password in it: see [`strip_secrets`]).
const SECRET_VARS: [&str; 4] = [
    "REDBELL_PASSWORD",
    "REDBELL_SENTINEL_PASSWORD",
    "REDBELL_PASSWORD_FILE",
    "REDBELL_SENTINEL_PASSWORD_FILE",
];

/// Variables naming Redis by URL: removed from the command's environment
/// when a URL in them carries a password.
const URL_VARS: [&str; 4] = [
    "REDIS_URL",
    "REDBELL_URL",
    "REDBELL_CLUSTER",
    "REDBELL_SENTINEL",
];

/// Keeps credentials from a command `run` or `elect` starts: the password
/// variables, and any URL variable whose URL has a password in it.
pub fn strip_secrets(command: &mut tokio::process::Command) {
    for var in SECRET_VARS {
        command.env_remove(var);
    }
    for var in URL_VARS {
        if std::env::var(var).is_ok_and(|v| v.split(',').any(has_password)) {
            command.env_remove(var);
        }
    }
}

/// Whether `url` carries a password (`scheme://[user]:password@...`).
fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

/// The value of the environment variable `var`, if set and not empty.
fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// A comma-separated list, as `--cluster` and `--sentinel` take.
fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::to_owned).collect()
}

impl GlobalArgs {
    /// Fills what the flags left out from the environment, reads the
    /// password files, and checks what clap could not (the environment's
    /// values included). Call once, before [`connect`].
    pub fn resolve(&mut self) -> Result<(), Failure> {
        self.url = self
            .url
            .take()
            .or_else(|| env("REDBELL_URL"))
            .or_else(|| env("REDIS_URL"));
        if self.cluster.is_empty() && self.sentinel.is_empty() {
            if let Some(nodes) = env("REDBELL_CLUSTER") {
                self.cluster = list(&nodes);
            } else if let Some(sentinels) = env("REDBELL_SENTINEL") {
                self.sentinel = list(&sentinels);
            }
        }
        let fill = |field: &mut Option<String>, var: &str| {
            if field.is_none() {
                *field = env(var);
            }
        };
        fill(&mut self.master, "REDBELL_MASTER");
        fill(&mut self.user, "REDBELL_USER");
        fill(&mut self.sentinel_user, "REDBELL_SENTINEL_USER");
        fill(&mut self.prefix, "REDBELL_PREFIX");
        let fill_path = |field: &mut Option<PathBuf>, var: &str| {
            if field.is_none() {
                *field = env(var).map(PathBuf::from);
            }
        };
        fill_path(&mut self.password_file, "REDBELL_PASSWORD_FILE");
        fill_path(
            &mut self.sentinel_password_file,
            "REDBELL_SENTINEL_PASSWORD_FILE",
        );
        fill_path(&mut self.tls_ca, "REDBELL_TLS_CA");
        fill_path(&mut self.tls_cert, "REDBELL_TLS_CERT");
        fill_path(&mut self.tls_key, "REDBELL_TLS_KEY");
        if self.db.is_none()
            && let Some(db) = env("REDBELL_DB")
        {
            let parsed = db.parse().map_err(|_| {
                Failure::new(
                    EX_USAGE,
                    format!("REDBELL_DB={db:?} is not a database number"),
                )
            })?;
            self.db = Some(parsed);
        }
        if !self.tls_insecure
            && let Some(value) = env("REDBELL_TLS_INSECURE")
        {
            self.tls_insecure = match value.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(Failure::new(
                        EX_USAGE,
                        format!("REDBELL_TLS_INSECURE={value}: expected 1 or 0"),
                    ));
                }
            };
        }
        self.password = secret(self.password_file.as_deref(), "REDBELL_PASSWORD")?;
        self.sentinel_password = secret(
            self.sentinel_password_file.as_deref(),
            "REDBELL_SENTINEL_PASSWORD",
        )?;
        self.check()
    }

    /// The combinations clap checks for flags, for values from the
    /// environment too.
    fn check(&self) -> Result<(), Failure> {
        let usage = |m: &str| Err(Failure::new(EX_USAGE, m));
        if !self.cluster.is_empty() && !self.sentinel.is_empty() {
            return usage(
                "--cluster (REDBELL_CLUSTER) and --sentinel (REDBELL_SENTINEL) exclude each other",
            );
        }
        if self.sentinel.is_empty() != self.master.is_none() {
            return usage(
                "--sentinel (REDBELL_SENTINEL) and --master (REDBELL_MASTER) go together",
            );
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return usage(
                "--tls-cert (REDBELL_TLS_CERT) and --tls-key (REDBELL_TLS_KEY) go together",
            );
        }
        if self.sentinel.is_empty()
            && (self.sentinel_user.is_some() || self.sentinel_password.is_some())
        {
            return usage("sentinel credentials without --sentinel");
        }
        if self.user.is_some() && self.password.is_none() {
            return usage("--user needs a password: set REDBELL_PASSWORD or give --password-file");
        }
        if self.sentinel_user.is_some() && self.sentinel_password.is_none() {
            return usage(
                "--sentinel-user needs a password: set REDBELL_SENTINEL_PASSWORD or give \
                 --sentinel-password-file",
            );
        }
        if self.db.is_some() && !self.cluster.is_empty() {
            return usage("--db with --cluster: a Redis Cluster has only database 0");
        }
        if self.tls_insecure {
            if !self.sentinel.is_empty() {
                return usage(
                    "--tls-insecure (REDBELL_TLS_INSECURE) works with --url or --cluster, not \
                     --sentinel: give the CA with --tls-ca",
                );
            }
            let plain = self.urls().find(|u| !is_tls(u));
            if let Some(url) = plain {
                return Err(Failure::new(
                    EX_USAGE,
                    format!(
                        "--tls-insecure (REDBELL_TLS_INSECURE) needs rediss:// URLs; {} is not \
                         TLS",
                        crate::fail::redact(url)
                    ),
                ));
            }
        }
        // Said once, here: every connection of this run skips the check.
        if self.tls_insecure || self.urls().any(|u| u.ends_with("#insecure")) {
            eprintln!(
                "redbell: warning: TLS without certificate verification (--tls-insecure or \
                 #insecure): the server's certificate is not verified, so anyone on the path \
                 can read and change the traffic; use it for test servers only"
            );
        }
        Ok(())
    }

    /// The URLs connected to: the cluster's nodes, the sentinels, or the
    /// server.
    fn urls(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        if !self.cluster.is_empty() {
            Box::new(self.cluster.iter().map(|u| u.trim()))
        } else if !self.sentinel.is_empty() {
            Box::new(self.sentinel.iter().map(|u| u.trim()))
        } else {
            Box::new(std::iter::once(self.url()))
        }
    }

    /// The key prefix (`--prefix`, `REDBELL_PREFIX`, else `redbell`).
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or("redbell")
    }

    /// The server URL (`--url`, `REDBELL_URL`, `REDIS_URL`, else the local
    /// default).
    fn url(&self) -> &str {
        self.url.as_deref().unwrap_or(DEFAULT_URL)
    }

    /// Where Redis is, for messages (passwords masked by `Failure`).
    pub fn target(&self) -> String {
        if !self.cluster.is_empty() {
            self.cluster.join(",")
        } else if !self.sentinel.is_empty() {
            format!(
                "{} master {}",
                self.sentinel.join(","),
                self.master.as_deref().unwrap_or_default()
            )
        } else {
            self.url().to_owned()
        }
    }
}

/// The password from the file `path` (its first line), else from the
/// variable `var`.
fn secret(path: Option<&std::path::Path>, var: &str) -> Result<Option<String>, Failure> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::new(
                    EX_CONFIG,
                    format!("cannot read the password file {}: {e}", path.display()),
                )
            })?;
            let line = text.lines().next().unwrap_or("");
            if line.is_empty() {
                return Err(Failure::new(
                    EX_CONFIG,
                    format!("the password file {} is empty", path.display()),
                ));
            }
            Ok(Some(line.to_owned()))
        }
        None => Ok(env(var)),
    }
}

/// Connects to the Redis the global options name, with their prefix.
pub async fn connect(global: &GlobalArgs) -> Result<Client, Failure> {
    connect_with(global, |builder| builder).await
}

/// As [`connect`], with more settings made by `configure`.
pub async fn connect_with(
    global: &GlobalArgs,
    configure: impl FnOnce(redbell::ClientBuilder) -> redbell::ClientBuilder,
) -> Result<Client, Failure> {
    let target = global.target();
    let urls = |list: &[String], user: Option<&str>, password: Option<&str>| {
        let urls: Vec<String> = list
            .iter()
            .map(|u| u.trim())
            .filter(|u| !u.is_empty())
            .map(|u| with_login(u, user, password))
            .map(|u| insecure(u, global.tls_insecure))
            .collect();
        if urls.is_empty() {
            return Err(Failure::new(EX_USAGE, "no URL given"));
        }
        Ok(urls)
    };
    let (user, password) = (global.user.as_deref(), global.password.as_deref());
    let builder = if !global.cluster.is_empty() {
        let nodes = urls(&global.cluster, user, password)?;
        Client::cluster_builder(&nodes)
    } else if !global.sentinel.is_empty() {
        let sentinels = urls(
            &global.sentinel,
            global.sentinel_user.as_deref(),
            global.sentinel_password.as_deref(),
        )?;
        let master = global.master.as_deref().unwrap_or_default();
        let mut builder = Client::sentinel_builder(&sentinels, master);
        if let Some(password) = password {
            builder = builder.primary_password(password);
            if let Some(user) = user {
                builder = builder.primary_username(user);
            }
        }
        if let Some(db) = global.db {
            builder = builder.primary_db(db);
        }
        builder
    } else {
        let url = with_login(global.url(), user, password);
        let url = match global.db {
            Some(db) => with_db(&url, db)?,
            None => url,
        };
        let url = insecure(url, global.tls_insecure);
        Client::builder(url.as_str())
    };
    let builder = match tls(global)? {
        Some(certificates) => builder.tls(certificates),
        None => builder,
    };
    configure(builder.prefix(global.prefix()))
        .connect()
        .await
        .map_err(|e| {
            let what = match e {
                redbell::Error::InvalidName { .. } => "invalid --prefix",
                _ => "cannot connect to Redis",
            };
            Failure::input(&target, what, &e)
        })
}

/// `url` with the user and password given (each percent-encoded) in place
/// of its own; `url` itself when neither is given.
fn with_login(url: &str, user: Option<&str>, password: Option<&str>) -> String {
    if user.is_none() && password.is_none() {
        return url.to_owned();
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned(); // not a URL: the connect reports it
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (old_user, old_password, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p), host),
            None => (userinfo, None, host),
        },
        None => ("", None, authority),
    };
    let user = user.map_or_else(|| old_user.to_owned(), percent_encode);
    let password = password
        .map(percent_encode)
        .or(old_password.map(str::to_owned));
    let userinfo = match password {
        Some(p) => format!("{user}:{p}@"),
        None if user.is_empty() => String::new(),
        None => format!("{user}@"),
    };
    format!("{scheme}://{userinfo}{host}{tail}")
}

/// `url` (a `redis://` or `rediss://` URL) with the database `db` as its
/// path.
fn with_db(url: &str, db: i64) -> Result<String, Failure> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(url.to_owned());
    };
    if !matches!(scheme, "redis" | "rediss" | "valkey" | "valkeys") {
        return Err(Failure::new(
            EX_USAGE,
            "--db needs a redis:// or rediss:// URL (for a socket, put ?db=N in the URL)",
        ));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let query = tail.find(['?', '#']).map_or("", |at| &tail[at..]);
    Ok(format!("{scheme}://{authority}/{db}{query}"))
}

/// Whether `url` is a TLS one (`rediss://`, `valkeys://`).
fn is_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| matches!(scheme, "rediss" | "valkeys"))
}

/// `url` ending in `#insecure` (redis-rs: no certificate check) when
/// `--tls-insecure` is on and it has no fragment yet; `url` itself
/// otherwise (`check` made sure it is a TLS URL).
fn insecure(url: String, on: bool) -> String {
    if on && !url.contains('#') {
        url + "#insecure"
    } else {
        url
    }
}

/// Every byte but the URL's unreserved characters as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The certificates `--tls-ca`, `--tls-cert` and `--tls-key` name, if any.
fn tls(global: &GlobalArgs) -> Result<Option<redbell::redis::TlsCertificates>, Failure> {
    if global.tls_ca.is_none() && global.tls_cert.is_none() {
        return Ok(None);
    }
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| Failure::new(EX_CONFIG, format!("cannot read {}: {e}", path.display())))
    };
    let root_cert = global.tls_ca.as_deref().map(read).transpose()?;
    let client_tls = match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Some(redbell::redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    Ok(Some(redbell::redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_and_databases_go_into_urls() {
        assert_eq!(with_login("redis://h:1", None, None), "redis://h:1");
        assert_eq!(
            with_login("redis://h:1/2", None, Some("p@ss:w/rd")),
            "redis://:p%40ss%3Aw%2Frd@h:1/2"
        );
        assert_eq!(
            with_login("redis://old:x@h:1", Some("app"), Some("pw")),
            "redis://app:pw@h:1"
        );
        assert_eq!(
            with_login("redis://u:x@h:1", None, Some("y")),
            "redis://u:y@h:1"
        );
        assert_eq!(
            with_db("redis://h:1", 3).ok().as_deref(),
            Some("redis://h:1/3")
        );
        assert_eq!(
            with_db("rediss://:p@h:1/0?protocol=resp3", 5)
                .ok()
                .as_deref(),
            Some("rediss://:p@h:1/5?protocol=resp3")
        );
        assert!(with_db("redis+unix:///tmp/s", 1).is_err());
        assert!(has_password("redis://:pw@h:1"));
        assert!(!has_password("redis://user@h:1"));
        assert!(!has_password("redis://h:1/0?a=b@c:d"));
    }
}
