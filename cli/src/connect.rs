//! Where Redis is, and connecting to it: one server (`--url`, `REDIS_URL`),
//! a Redis Cluster (`--cluster`) or a primary found through Redis Sentinel
//! (`--sentinel`, `--master`); `--prefix` for the keys. Every subcommand
//! connects through [`connect`].

use redbell::Client;

use crate::fail::{EX_USAGE, Failure};

/// The options every subcommand shares: where Redis is, and the key prefix.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Redis options (every subcommand)")]
pub struct GlobalArgs {
    /// Redis server URL (`redis://[:password@]host:port[/db]`).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub url: String,

    /// A Redis Cluster: some of its nodes' URLs, comma-separated (the rest
    /// are discovered). Replaces --url.
    #[arg(
        long,
        global = true,
        value_name = "URLS",
        value_delimiter = ',',
        conflicts_with = "sentinel"
    )]
    pub cluster: Vec<String>,

    /// Redis Sentinel: the sentinels' URLs, comma-separated; with --master,
    /// the primary they name is used, and followed across failovers.
    /// Replaces --url.
    #[arg(
        long,
        global = true,
        value_name = "URLS",
        value_delimiter = ',',
        requires = "master"
    )]
    pub sentinel: Vec<String>,

    /// The master name the sentinels monitor (with --sentinel).
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel")]
    pub master: Option<String>,

    /// TLS: a PEM file of the CA that signed the server's certificate (for a
    /// `rediss://` URL whose server the system's roots do not know).
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// TLS: a PEM client certificate to present (with --tls-key), for a
    /// server that requires one (`tls-auth-clients yes`).
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// TLS: the PEM private key of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// Prefix of every key and channel: the lock N lives at `PREFIX:{N}`.
    #[arg(long, global = true, value_name = "P", default_value = "redbell")]
    pub prefix: String,
}

impl GlobalArgs {
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
            self.url.clone()
        }
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
    let urls = |list: &[String]| -> Result<Vec<String>, Failure> {
        let urls: Vec<String> = list
            .iter()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(Failure::new(EX_USAGE, "no URL given"));
        }
        Ok(urls)
    };
    let builder = if !global.cluster.is_empty() {
        let nodes = urls(&global.cluster)?;
        Client::cluster_builder(&nodes.iter().map(String::as_str).collect::<Vec<_>>())
    } else if !global.sentinel.is_empty() {
        let sentinels = urls(&global.sentinel)?;
        let master = global.master.as_deref().unwrap_or_default();
        Client::sentinel_builder(
            &sentinels.iter().map(String::as_str).collect::<Vec<_>>(),
            master,
        )
    } else {
        Client::builder(global.url.as_str())
    };
    let builder = match tls(global)? {
        Some(certificates) => builder.tls(certificates),
        None => builder,
    };
    configure(builder.prefix(&global.prefix))
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

/// The certificates `--tls-ca`, `--tls-cert` and `--tls-key` name, if any.
fn tls(global: &GlobalArgs) -> Result<Option<redbell::redis::TlsCertificates>, Failure> {
    if global.tls_ca.is_none() && global.tls_cert.is_none() {
        return Ok(None);
    }
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| Failure::new(EX_USAGE, format!("cannot read {}: {e}", path.display())))
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
