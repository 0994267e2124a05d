//! The topology as `scripts/redis/sentinel.sh` starts it.

use std::path::PathBuf;
use std::process::Stdio;

use crate::{redis_script, repo_root, run_redis_script};

/// A topology started by `scripts/redis/sentinel.sh start BASE`; stopped by
/// the script on drop if the test has not [stopped](ScriptTopology::stop)
/// it.
#[derive(Debug)]
pub struct ScriptTopology {
    base: u16,
    stopped: bool,
}

impl ScriptTopology {
    /// Runs `sentinel.sh start BASE`; the topology and the sentinel URLs the
    /// script printed.
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub async fn start(base: u16) -> (ScriptTopology, Vec<String>) {
        Self::start_with(base, &[]).await
    }

    /// Runs `sentinel.sh start BASE OPTIONS...` (e.g. `--requirepass PW`);
    /// the topology and the sentinel URLs the script printed.
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub async fn start_with(base: u16, options: &[&str]) -> (ScriptTopology, Vec<String>) {
        // Created first, so that a failed start is stopped too.
        let topo = ScriptTopology {
            base,
            stopped: false,
        };
        let mut cmd = redis_script("sentinel.sh", "start", base);
        cmd.args(options);
        let out = tokio::process::Command::from(cmd)
            .output()
            .await
            .expect("run sentinel.sh");
        assert!(
            out.status.success(),
            "sentinel.sh start {base} {options:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let urls = String::from_utf8(out.stdout)
            .expect("utf-8 output")
            .lines()
            .map(str::to_owned)
            .collect();
        (topo, urls)
    }

    /// The script's state directory for BASE: `target/redis-sentinel/BASE`.
    pub fn dir(&self) -> PathBuf {
        repo_root()
            .join("target/redis-sentinel")
            .join(self.base.to_string())
    }

    /// Runs `sentinel.sh stop BASE` (once stopped, drop does nothing).
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub async fn stop(&mut self) {
        run_redis_script("sentinel.sh", "stop", self.base).await;
        self.stopped = true;
    }
}

impl Drop for ScriptTopology {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = redis_script("sentinel.sh", "stop", self.base)
                .stdout(Stdio::null())
                .status();
        }
    }
}
