//! [`TlsServers`]: the two TLS servers of `scripts/redis/tls.sh` on a free
//! base port: one that takes clients without a certificate, one that
//! requires one; their certificates under `target/redis/tls/`.

use std::path::PathBuf;
use std::process::Stdio;

use crate::{Error, Result, free_base, redis_script, repo_root, run_redis_script};

/// The servers of `tls.sh start BASE`, stopped on drop.
#[derive(Debug)]
pub struct TlsServers {
    base: u16,
    /// `rediss://` URL of the server that takes clients without a certificate.
    optional: String,
    /// `rediss://` URL of the server that requires one.
    required: String,
}

impl TlsServers {
    /// Runs `tls.sh start BASE` on a free base (BASE and BASE+1).
    ///
    /// # Errors
    ///
    /// When no base is free, or the script fails or prints other than two
    /// URLs.
    pub async fn start() -> Result<TlsServers> {
        let base = free_base(2, &[0, 1], "two TLS servers")?;
        let out = run_redis_script("tls.sh", "start", base, &[]).await;
        // Built before the check, so that a failed start is stopped too.
        let mut servers = TlsServers {
            base,
            optional: String::new(),
            required: String::new(),
        };
        let urls: Vec<String> = out?.lines().map(str::to_owned).collect();
        let [optional, required] = urls.as_slice() else {
            return Err(Error::new(format!("tls.sh printed {urls:?}")));
        };
        servers.optional = optional.clone();
        servers.required = required.clone();
        Ok(servers)
    }

    /// `rediss://` URL of the server that takes clients without a
    /// certificate.
    pub fn optional_url(&self) -> &str {
        &self.optional
    }

    /// `rediss://` URL of the server that requires a client certificate.
    pub fn required_url(&self) -> &str {
        &self.required
    }

    /// Where `tls.sh` keeps the CA, the servers' and the client's
    /// certificates and keys (`ca.crt`, `client.crt`, `client.key`, ...).
    pub fn certificates_dir() -> PathBuf {
        repo_root().join("target/redis/tls")
    }
}

impl Drop for TlsServers {
    fn drop(&mut self) {
        let _ = redis_script("tls.sh", "stop", self.base)
            .stdout(Stdio::null())
            .status();
    }
}
