//! The soak's own redis-server for the single topology, with AOF
//! (`appendfsync everysec`) so that it can be SIGKILLed and restarted: a
//! restart keeps what reached the AOF and loses up to about a second of
//! writes (lock grants, renewals, releases, fences and store maxima alike).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fail::{EX_FAILURE, Failure};

/// A free port on loopback, picked by the kernel (outside the 6390–6399
/// that developers' own servers use).
pub fn free_port() -> Result<u16, Failure> {
    for _ in 0..20 {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Failure::new(EX_FAILURE, format!("no free port: {e}")))?;
        let port = l
            .local_addr()
            .map_err(|e| Failure::new(EX_FAILURE, e.to_string()))?
            .port();
        // The cluster bus needs port + 10000 too.
        if !(6390..=6399).contains(&port) && port < 55_000 {
            return Ok(port);
        }
    }
    Err(Failure::new(EX_FAILURE, "no free port below 55000"))
}

/// A redis-server child process the soak owns.
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Server {
    /// Starts redis-server (`REDBELL_REDIS_SERVER`, else on PATH) on a free
    /// port with its data in `dir`.
    pub async fn start(dir: &Path) -> Result<Server, Failure> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(EX_FAILURE, format!("cannot create {}: {e}", dir.display()))
        })?;
        // Absolute: redis-server changes into --dir before opening its log.
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        let mut server = Server {
            port: free_port()?,
            dir,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) -> Result<(), Failure> {
        let exe = std::env::var("REDBELL_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = tokio::process::Command::new(&exe)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
            ])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start {exe}: {e}")))?;
        self.child = Some(child);
        let url = self.url();
        let client = redis::Client::open(url.as_str()).map_err(|e| Failure::redis(&url, "", &e))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(Failure::new(
                    EX_FAILURE,
                    format!(
                        "redis-server on {} did not answer PING within 20 s",
                        self.port
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, then the same server again on the same port and AOF; returns
    /// when it answers (loading included).
    pub async fn restart(&mut self, down: Duration) -> Result<(), Failure> {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
        tokio::time::sleep(down).await;
        self.spawn().await
    }

    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}
