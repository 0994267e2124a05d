//! redis-server processes of the test's own: [`PrivateRedis`], and the
//! command line, spawning and log tails the topologies share.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{eventually, redis_server_bin, unique};

/// A redis-server of the test's own on a free loopback port, killed on drop.
///
/// Started with `--save '' --appendonly no`, so a restart comes back empty.
#[derive(Debug)]
pub struct PrivateRedis {
    port: u16,
    password: Option<String>,
    dir: PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts a server and waits until it answers PING.
    ///
    /// # Panics
    ///
    /// When redis-server cannot be started or does not answer within 10 s.
    pub async fn start() -> PrivateRedis {
        Self::start_with(None).await
    }

    /// Starts a server that requires `password` (`--requirepass`).
    pub async fn start_with_password(password: &str) -> PrivateRedis {
        Self::start_with(Some(password.to_owned())).await
    }

    async fn start_with(password: Option<String>) -> PrivateRedis {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("redbell-it-{}", unique("redis")));
        std::fs::create_dir_all(&dir).expect("create the private redis dir");
        let mut redis = PrivateRedis {
            port,
            password,
            dir,
            child: None,
        };
        redis.spawn().await;
        redis
    }

    /// The URL to connect to, with the password when there is one.
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The URL without any password.
    pub fn url_without_password(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a fresh (empty) one on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// Starts the server process if it is not running, and waits for PING.
    pub async fn spawn(&mut self) {
        assert!(self.child.is_none(), "the private redis is already running");
        let mut cmd = redis_server_command(self.port, &self.dir);
        if let Some(pw) = &self.password {
            cmd.arg("--requirepass").arg(pw);
        }
        let child = spawn_redis_server(&mut cmd);
        self.child = Some(child);
        let url = self.url();
        let up = eventually(Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                let Ok(client) = redis::Client::open(url) else {
                    return false;
                };
                let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                    return false;
                };
                let pong: redis::RedisResult<String> =
                    redis::cmd("PING").query_async(&mut conn).await;
                matches!(pong.as_deref(), Ok("PONG"))
            }
        })
        .await;
        if !up {
            self.stop();
            panic!(
                "private redis-server on port {} did not answer PING within 10 s",
                self.port
            );
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A `redis-server` command ([`redis_server_bin`]) for a throwaway server on
/// 127.0.0.1:`port`, working in `dir`: in the foreground, non-persistent
/// (`--save '' --appendonly no`). Add arguments, then
/// [`spawn_redis_server`].
pub fn redis_server_command(port: u16, dir: &Path) -> Command {
    let mut cmd = Command::new(redis_server_bin());
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--appendonly")
        .arg("no")
        .arg("--daemonize")
        .arg("no")
        .arg("--dir")
        .arg(dir);
    cmd
}

/// Spawns a redis-server command (a [`redis_server_command`], or
/// `redis-server CONF --sentinel`) without stdin, stdout or stderr.
///
/// # Panics
///
/// When it cannot be started, saying how to install redis-server.
pub fn spawn_redis_server(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e} (install redis-server or set REDBELL_REDIS_SERVER; \
             `scripts/redis/install.sh` installs it)",
                redis_server_bin()
            )
        })
}

/// Prints the last 15 lines of the log at `path` to stderr, headed
/// `--- <what> log (last lines):`, for a failed test's output.
pub fn print_log_tail(what: &str, path: &Path) {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(15).collect();
    eprintln!("--- {what} log (last lines):");
    for line in tail.iter().rev() {
        eprintln!("{line}");
    }
}
