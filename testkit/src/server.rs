//! [`Server`]: a redis-server child process on a free loopback port.
//!
//! Non-persistent by default (`--save '' --appendonly no`: a restart comes
//! back empty); with [`ServerOptions::aof`] it writes an AOF
//! (`appendfsync everysec`), so a SIGKILL and restart keep what reached
//! the AOF and lose up to about a second of writes. Every server logs to
//! `redis.log` in its directory ([`Server::log_tail`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{Error, Result, free_port, log_tail, node_url, poll_until, redis_server_bin};

/// How a [`Server`] is started. Default: a fresh temporary directory,
/// non-persistent, no password, no other arguments.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Its working directory, emptied first and kept afterwards. Default:
    /// a fresh directory under the system's temporary directory, removed
    /// on drop.
    pub dir: Option<PathBuf>,
    /// Write an AOF (`--appendonly yes --appendfsync everysec`). Default: no.
    pub aof: bool,
    /// Require this password (`--requirepass`). Default: none.
    pub password: Option<String>,
    /// More arguments, after the kit's. Default: none.
    pub args: Vec<String>,
}

/// A redis-server of the caller's own on a free loopback port; SIGKILLed
/// on drop.
#[derive(Debug)]
pub struct Server {
    port: u16,
    options: ServerOptions,
    /// Absolute (redis-server changes into it before opening its log).
    dir: PathBuf,
    /// Whether `dir` is the kit's own, removed on drop.
    temporary: bool,
    /// `Some` while the process runs (spawned and not yet killed).
    child: Option<Child>,
}

impl Server {
    /// Starts a server with `options` and waits until it answers PING.
    ///
    /// # Errors
    ///
    /// When no port is free, the directory cannot be made, redis-server
    /// cannot be started or does not answer within 20 s.
    pub async fn start(options: ServerOptions) -> Result<Server> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let port = free_port()?;
        let (dir, temporary) = match &options.dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let n = SEQ.fetch_add(1, Ordering::Relaxed);
                let name = format!("redbell-kit-{}-{port}-{n}", std::process::id());
                (std::env::temp_dir().join(name), true)
            }
        };
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let mut server = Server {
            port,
            options,
            dir,
            temporary,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// The URL to connect to, with the password when there is one.
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => self.url_without_password(),
        }
    }

    /// The URL without any password.
    pub fn url_without_password(&self) -> String {
        node_url(self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its working directory (data, AOF, `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of its log, headed `what`.
    pub fn log_tail(&self, what: &str) -> String {
        log_tail(what, &self.dir.join("redis.log"))
    }

    /// Whether the process runs (started and not killed).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILLs the server and waits for it to exit; a no-op when it is
    /// not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, `down` of nothing listening, then the server again on the
    /// same port and directory (from its AOF, if it writes one); returns
    /// when it answers (loading included).
    ///
    /// # Errors
    ///
    /// As [`Server::spawn`].
    pub async fn restart(&mut self, down: Duration) -> Result<()> {
        self.kill();
        tokio::time::sleep(down).await;
        self.spawn().await
    }

    /// Starts the process if it is not running, and waits (up to 20 s)
    /// until it answers PING.
    ///
    /// # Errors
    ///
    /// When redis-server cannot be started, or does not answer in time
    /// (then it is killed again).
    pub async fn spawn(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let exe = redis_server_bin();
        let mut cmd = Command::new(&exe);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "no", "--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if self.options.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "everysec"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(pw) = &self.options.password {
            cmd.arg("--requirepass").arg(pw);
        }
        cmd.args(&self.options.args);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                Error::new(format!(
                    "cannot start {exe}: {e} (install redis-server or set REDBELL_REDIS_SERVER; \
                     `scripts/redis/install.sh` installs it)"
                ))
            })?;
        self.child = Some(child);
        let url = self.url();
        let up = poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
            let url = url.clone();
            async move {
                let Ok(mut conn) = crate::connect(&url).await else {
                    return false;
                };
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                matches!(pong.as_deref(), Ok("PONG"))
            }
        })
        .await;
        if !up {
            self.kill();
            return Err(Error::new(format!(
                "redis-server on port {} did not answer PING within 20 s\n{}",
                self.port,
                self.log_tail("redis-server")
            )));
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
