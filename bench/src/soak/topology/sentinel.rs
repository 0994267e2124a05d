//! `sentinel`: `scripts/redis/sentinel.sh` on free ports (a primary, a
//! replica, three sentinels; master `mymaster`). Faults: `SENTINEL
//! FAILOVER`, and SIGKILL of the primary (the sentinels promote the
//! replica; the killed server comes back empty as a replica of the new
//! primary once they have).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{connect, free_base, script};
use crate::fail::{EX_FAILURE, Failure};

/// The Sentinel topology of one run.
pub struct Sentinel {
    pub base: u16,
    pub urls: Vec<String>,
    dir: PathBuf,
}

impl Sentinel {
    pub async fn start() -> Result<Sentinel, Failure> {
        let base = free_base(&[0, 1, 10, 11, 12])?;
        let out = script("sentinel.sh", "start", base).await?;
        let urls: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("redis://"))
            .map(str::to_owned)
            .collect();
        let dir = super::repo_root().join(format!("target/redis-sentinel/{base}"));
        Ok(Sentinel { base, urls, dir })
    }

    pub async fn stop(&self) {
        let _ = script("sentinel.sh", "stop", self.base).await;
    }

    /// The primary's port, as the first sentinel that answers names it.
    pub async fn primary(&self) -> Option<u16> {
        for url in &self.urls {
            let Ok(mut c) = connect(url).await else {
                continue;
            };
            let addr: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg("mymaster")
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

    /// Waits up to 30 s for the sentinels to name a primary other than
    /// `old`; returns it.
    async fn new_primary(&self, old: u16) -> Option<u16> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(p) = self.primary().await.filter(|&p| p != old) {
                return Some(p);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// `SENTINEL FAILOVER mymaster`; returns when the sentinels name the
    /// new primary.
    pub async fn failover(&self) -> Result<String, Failure> {
        let old = self.primary().await.unwrap_or(0);
        let mut c = connect(&self.urls[0]).await?;
        let r: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg("mymaster")
            .query_async(&mut c)
            .await;
        if let Err(e) = r {
            return Ok(format!("SENTINEL FAILOVER refused: {e}"));
        }
        Ok(match self.new_primary(old).await {
            Some(p) => format!("SENTINEL FAILOVER: primary {old} -> {p}"),
            None => format!("SENTINEL FAILOVER: {old} still the primary after 30 s"),
        })
    }

    /// SIGKILL of the primary; once the sentinels name another, the killed
    /// server starts again (empty) as its replica.
    pub async fn kill_primary(&self) -> Result<String, Failure> {
        let Some(old) = self.primary().await else {
            return Ok("no primary known to kill".into());
        };
        let name = if old == self.base {
            "primary"
        } else {
            "replica"
        };
        let pidfile = self.dir.join(format!("{name}.pid"));
        let pid = std::fs::read_to_string(&pidfile).unwrap_or_default();
        let pid = pid.trim();
        let _ = tokio::process::Command::new("kill")
            .args(["-KILL", pid])
            .status()
            .await;
        let Some(new) = self.new_primary(old).await else {
            return Ok(format!("SIGKILL primary {old}: no new primary within 30 s"));
        };
        let server =
            std::env::var("REDBELL_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let data = self.dir.join(name);
        let status = tokio::process::Command::new(server)
            .args([
                "--port",
                &old.to_string(),
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "yes",
            ])
            .arg("--pidfile")
            .arg(&pidfile)
            .arg("--logfile")
            .arg(self.dir.join(format!("{name}.log")))
            .arg("--dir")
            .arg(&data)
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--repl-diskless-sync-delay",
                "0",
            ])
            .args(["--replicaof", "127.0.0.1", &new.to_string()])
            .status()
            .await
            .map_err(|e| Failure::new(EX_FAILURE, format!("cannot restart {name}: {e}")))?;
        Ok(format!(
            "SIGKILL primary {old} (pid {pid}); sentinels promoted {new}; {old} restarted as its replica ({status})"
        ))
    }
}
