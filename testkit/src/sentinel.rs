//! [`Sentinel`]: a primary, a replica and three sentinels started by
//! `scripts/redis/sentinel.sh` (primary BASE, replica BASE+1, sentinels
//! BASE+10..BASE+12; `sentinel monitor mymaster 127.0.0.1 BASE 2`,
//! `down-after-milliseconds 1000`, `failover-timeout 10000`), and its
//! failovers: `SENTINEL FAILOVER`, SIGKILL of a server, and the killed
//! server brought back as a replica.
//!
//! BASE+2 is free too ([`Sentinel::spare_port`]), for a proxy on the
//! replication link.

use std::path::PathBuf;
use std::time::Duration;

use crate::{
    Error, Result, command, free_base, kill_pidfile, log_tail, node_url, poll_until, query,
    redis_script, redis_server_bin, run_redis_script,
};

/// The master name the sentinels monitor.
pub const MASTER: &str = "mymaster";

/// The offsets from BASE of the layout's ports: primary, replica, spare
/// (a proxy's), three sentinels.
const LAYOUT: [u16; 6] = [0, 1, 2, 10, 11, 12];

/// How often the sentinels are polled: 50 ms.
const POLL: Duration = Duration::from_millis(50);

/// The servers by name, as the script names their pid and log files.
const NAMES: [&str; 5] = [
    "primary",
    "replica",
    "sentinel-0",
    "sentinel-1",
    "sentinel-2",
];

/// A base port whose layout ports (BASE, +1, +2, +10..+12) are free.
///
/// # Errors
///
/// As [`free_base`].
pub fn free_layout_base() -> Result<u16> {
    free_base(16, &LAYOUT, "a sentinel topology")
}

/// A topology started by `sentinel.sh start BASE`; stopped by the script on
/// drop unless [stopped](Sentinel::stop) before.
#[derive(Debug)]
pub struct Sentinel {
    base: u16,
    /// The sentinel URLs the script printed (with the sentinels' password,
    /// if any).
    urls: Vec<String>,
    /// Set by [`Sentinel::stop`]: drop does nothing more.
    stopped: bool,
}

impl Sentinel {
    /// [`Sentinel::start_at`] a [free base](free_layout_base), no options.
    ///
    /// # Errors
    ///
    /// As [`Sentinel::start_at`].
    pub async fn start() -> Result<Sentinel> {
        Sentinel::start_at(free_layout_base()?, &[]).await
    }

    /// Runs `sentinel.sh start BASE OPTIONS...` (`--requirepass PW`,
    /// `--sentinel-pass PW`), which returns once the topology is healthy:
    /// the replica's link is up and every sentinel names the primary, sees
    /// the two others and the replica, and flags nothing down.
    ///
    /// # Errors
    ///
    /// When the script fails.
    pub async fn start_at(base: u16, options: &[&str]) -> Result<Sentinel> {
        // Created first, so that a failed start is stopped too.
        let mut topo = Sentinel {
            base,
            urls: Vec::new(),
            stopped: false,
        };
        topo.urls = run_redis_script("sentinel.sh", "start", base, options)
            .await?
            .lines()
            .filter(|l| l.starts_with("redis://"))
            .map(str::to_owned)
            .collect();
        Ok(topo)
    }

    /// The base port.
    pub fn base(&self) -> u16 {
        self.base
    }

    /// The port the primary was started on: BASE.
    pub fn primary_port(&self) -> u16 {
        self.base
    }

    /// The port the replica was started on: BASE+1.
    pub fn replica_port(&self) -> u16 {
        self.base + 1
    }

    /// A port of the layout nothing listens on: BASE+2.
    pub fn spare_port(&self) -> u16 {
        self.base + 2
    }

    /// The sentinels' ports: BASE+10..BASE+12.
    pub fn sentinel_ports(&self) -> [u16; 3] {
        [self.base + 10, self.base + 11, self.base + 12]
    }

    /// The three sentinel URLs, as the script printed them.
    pub fn sentinel_urls(&self) -> &[String] {
        &self.urls
    }

    /// The server's URL on `port` (no password).
    pub fn url(&self, port: u16) -> String {
        node_url(port)
    }

    /// The script's state directory: `target/redis-sentinel/BASE`.
    pub fn dir(&self) -> PathBuf {
        crate::repo_root()
            .join("target/redis-sentinel")
            .join(self.base.to_string())
    }

    /// The tail of every process's log.
    pub fn log_tails(&self) -> String {
        NAMES
            .iter()
            .map(|name| {
                log_tail(
                    &format!("topology {} {name}", self.base),
                    &self.dir().join(format!("{name}.log")),
                )
            })
            .collect()
    }

    /// The primary's port as the first sentinel that answers names it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`); `None` when none answers.
    pub async fn primary(&self) -> Option<u16> {
        for url in &self.urls {
            let Ok(mut c) = crate::connect(url).await else {
                continue;
            };
            let addr: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER)
                .query_async(&mut c)
                .await;
            if let Ok(a) = addr
                && let Some(port) = a.get(1).and_then(|p| p.parse().ok())
            {
                return Some(port);
            }
        }
        None
    }

    /// Waits up to `within` until every sentinel names `primary` as the
    /// master and `primary` reports the master role; whether they did.
    pub async fn wait_for_primary(&self, primary: u16, within: Duration) -> bool {
        let sentinels = self.sentinel_ports();
        poll_until(within, POLL, || async move {
            for s in sentinels {
                if master_port(s).await != Some(primary) {
                    return false;
                }
            }
            crate::replication_field(primary, "role").await.as_deref() == Some("master")
        })
        .await
    }

    /// Waits up to 30 s until the first sentinel that answers names a
    /// primary other than `old`; that one.
    pub async fn new_primary(&self, old: u16) -> Option<u16> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(p) = self.primary().await.filter(|&p| p != old) {
                return Some(p);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `SENTINEL FAILOVER mymaster`, asked of sentinel `via` (an index);
    /// returns once it agreed (the failover goes on without the caller).
    ///
    /// # Errors
    ///
    /// When the sentinel refuses or cannot be reached.
    pub async fn ask_failover(&self, via: usize) -> Result<()> {
        let port = self.sentinel_ports()[via % 3];
        let ok: String = command(port, redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER)).await?;
        if ok == "OK" {
            Ok(())
        } else {
            Err(Error::new(format!("SENTINEL FAILOVER: {ok}")))
        }
    }

    /// SIGKILLs the server on `port` (the primary's or the replica's, by
    /// the script's pid file) and waits (up to 5 s) until it no longer
    /// answers; its pid.
    ///
    /// # Errors
    ///
    /// When `port` is neither server's, or the kill fails or does not take.
    pub async fn kill(&self, port: u16) -> Result<String> {
        let pid = kill_pidfile(&self.dir().join(format!("{}.pid", self.name_of(port)?))).await?;
        let gone = poll_until(Duration::from_secs(5), POLL, || async move {
            query::<String>(port, &redis::cmd("PING")).await.is_none()
        })
        .await;
        if gone {
            Ok(pid)
        } else {
            Err(Error::new(format!(
                "server {port} still answers after SIGKILL"
            )))
        }
    }

    /// Starts the (killed) server on `port` again, empty, as a replica of
    /// `primary`, daemonized with the script's pid and log files (so
    /// `sentinel.sh stop` stops it).
    ///
    /// # Errors
    ///
    /// When redis-server cannot be run.
    pub async fn restart_as_replica(&self, port: u16, primary: u16) -> Result<()> {
        let name = self.name_of(port)?;
        let dir = self.dir();
        let status = tokio::process::Command::new(redis_server_bin())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "yes"])
            .arg("--pidfile")
            .arg(dir.join(format!("{name}.pid")))
            .arg("--logfile")
            .arg(dir.join(format!("{name}.log")))
            .arg("--dir")
            .arg(dir.join(name))
            .args(["--save", "", "--appendonly", "no"])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--replicaof", "127.0.0.1", &primary.to_string()])
            .status()
            .await
            .map_err(|e| Error::new(format!("cannot restart {name}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::new(format!("restart {name}: {status}")))
        }
    }

    /// The script's name for the server on `port`.
    fn name_of(&self, port: u16) -> Result<&'static str> {
        match port {
            p if p == self.primary_port() => Ok("primary"),
            p if p == self.replica_port() => Ok("replica"),
            _ => Err(Error::new(format!(
                "{port} is no server of topology {}",
                self.base
            ))),
        }
    }

    /// Runs `sentinel.sh stop BASE` (once stopped, drop does nothing).
    ///
    /// # Errors
    ///
    /// When the script fails.
    pub async fn stop(&mut self) -> Result<()> {
        self.stopped = true;
        run_redis_script("sentinel.sh", "stop", self.base, &[])
            .await
            .map(drop)
    }
}

impl Drop for Sentinel {
    /// Stops the processes, printing their log tails first when the thread
    /// is panicking (a failed test).
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        if std::thread::panicking() {
            eprint!("{}", self.log_tails());
            eprintln!("(logs in {})", self.dir().display());
        }
        let _ = redis_script("sentinel.sh", "stop", self.base)
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// The port of the master a sentinel names (`SENTINEL
/// get-master-addr-by-name`), `None` when it cannot tell (or names a host
/// other than 127.0.0.1).
pub async fn master_port(sentinel: u16) -> Option<u16> {
    let addr: Option<Vec<String>> = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER),
    )
    .await?;
    let addr = addr?;
    (addr.first().map(String::as_str) == Some("127.0.0.1")).then_some(())?;
    addr.get(1)?.parse().ok()
}

/// Whether a sentinel sees a healthy master on `primary`: that address,
/// flags exactly `master` (no `s_down`/`o_down`, no failover in progress),
/// the two other sentinels and one replica.
pub async fn sentinel_agrees(sentinel: u16, primary: u16) -> bool {
    if master_port(sentinel).await != Some(primary) {
        return false;
    }
    let Some(fields): Option<Vec<String>> =
        query(sentinel, redis::cmd("SENTINEL").arg("master").arg(MASTER)).await
    else {
        return false;
    };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv.get(1))
            .map(String::as_str)
    };
    field("flags") == Some("master")
        && field("num-other-sentinels") == Some("2")
        && field("num-slaves") == Some("1")
}
