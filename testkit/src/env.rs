//! Where things are: the redis-server binary, the repository and its
//! `scripts/redis/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

/// The redis-server binary: `REDBELL_REDIS_SERVER`, else `redis-server` on
/// `PATH`.
pub fn redis_server_bin() -> String {
    std::env::var("REDBELL_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// The repository (the scripts' home): the working directory if it holds
/// `scripts/redis`, else the workspace this crate was built in.
pub fn repo_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    if cwd.join("scripts/redis").is_dir() {
        cwd
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
    }
}

/// `bash scripts/redis/<script> <action> <base>` without stdin, not yet
/// run (`cluster.sh start 7400`, `sentinel.sh stop 7500`).
pub fn redis_script(script: &str, action: &str, base: u16) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/redis").join(script))
        .arg(action)
        .arg(base.to_string())
        .stdin(Stdio::null());
    cmd
}

/// Runs [`redis_script`] with `options` to the end; what it printed on
/// stdout.
///
/// # Errors
///
/// When it cannot be run or fails (with its stderr).
pub async fn run_redis_script(
    script: &str,
    action: &str,
    base: u16,
    options: &[&str],
) -> Result<String> {
    let mut cmd = redis_script(script, action, base);
    cmd.args(options);
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .map_err(|e| Error::new(format!("cannot run {script}: {e}")))?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "{script} {action} {base} {options:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    String::from_utf8(out.stdout).map_err(|_| Error::new(format!("{script}: output not UTF-8")))
}

/// The last 15 lines of the log at `path`, headed `--- <what> log (last
/// lines):`, for a failed run's output.
pub fn log_tail(what: &str, path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(15).collect();
    let mut out = format!("--- {what} log (last lines):\n");
    for line in tail.iter().rev() {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// SIGKILLs the process whose pid is in `pidfile` (a script's pid file).
///
/// # Errors
///
/// When the file holds no pid or `kill` fails.
pub async fn kill_pidfile(pidfile: &Path) -> Result<String> {
    let pid = std::fs::read_to_string(pidfile)
        .map_err(|e| Error::new(format!("read {}: {e}", pidfile.display())))?;
    let pid = pid.trim().to_owned();
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::new(format!(
            "bad pid {pid:?} in {}",
            pidfile.display()
        )));
    }
    let status = tokio::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .await
        .map_err(|e| Error::new(format!("run kill: {e}")))?;
    if !status.success() {
        return Err(Error::new(format!("kill -KILL {pid}: {status}")));
    }
    Ok(pid)
}
