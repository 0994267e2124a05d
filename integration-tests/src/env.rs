//! Where things are: the shared test server, the redis-server binary, the
//! built binaries of the workspace, the scripts under `scripts/redis/`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The shared test server's URL, from `REDIS_URL`.
///
/// # Panics
///
/// When `REDIS_URL` is unset: run the tests with `make test`, or start a
/// server with `scripts/redis/start.sh` and export the URL it prints.
pub fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "REDIS_URL is not set: the integration tests need a real Redis. Run `make test`, \
             or `export REDIS_URL=$(scripts/redis/start.sh)` and then `cargo test`"
        ),
    }
}

/// The redis-server binary for [`PrivateRedis`](crate::PrivateRedis):
/// `REDBELL_REDIS_SERVER`, else `redis-server` on `PATH`.
pub fn redis_server_bin() -> String {
    std::env::var("REDBELL_REDIS_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// `<target>/debug/<name>` (`name` may be `examples/<example>`):
/// `CARGO_TARGET_DIR` if set (an absolute dir replaces the base), else the
/// workspace's `target/`.
///
/// # Panics
///
/// When it has not been built.
pub fn built_binary(name: &str) -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins --examples` first (`make test` does)",
        path.display()
    );
    path
}

/// The built `redbell` binary ([`built_binary`]).
pub fn redbell_binary() -> PathBuf {
    built_binary("redbell")
}

/// Prints a finished process's status and output to stderr, headed
/// `--- what`, for the test's log.
pub fn log_output(what: &str, out: &Output) {
    eprintln!(
        "--- {what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The repository's root (the workspace).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
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

/// Runs [`redis_script`] to the end; what it printed on stdout.
///
/// # Panics
///
/// When it cannot be run or fails (with its stderr).
pub async fn run_redis_script(script: &str, action: &str, base: u16) -> String {
    let out = tokio::process::Command::from(redis_script(script, action, base))
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {action} {base}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
