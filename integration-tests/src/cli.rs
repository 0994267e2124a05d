//! Running the `redbell` binary from tests: the command with `REDIS_URL`
//! set, waiting for it with a bound, reading its output, and the small
//! process and file helpers the CLI tests share.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::{lock_key, log_output, redbell_binary, redis_url, unique};

/// A fresh scratch directory.
pub fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("cli-dir"));
    std::fs::create_dir_all(&dir).expect("create a scratch dir");
    dir
}

/// `redbell ARGS...` with `REDIS_URL` set, no stdin, output piped.
pub fn redbell(args: &[&str]) -> Command {
    let mut cmd = Command::new(redbell_binary());
    cmd.args(args)
        .env("REDIS_URL", redis_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Starts `redbell ARGS...`.
///
/// # Panics
///
/// When it cannot start.
pub fn spawn(args: &[&str]) -> Child {
    redbell(args).spawn().expect("redbell starts")
}

/// Waits for `child` at most `limit`, killing it and failing the test
/// after that. Returns its output (also logged, headed `what`).
///
/// # Panics
///
/// When it takes longer than `limit`.
pub fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let end = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() >= end {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            log_output(what, &out);
            panic!("{what} took over {limit:?}");
        }
        thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("wait");
    log_output(what, &out);
    out
}

/// Runs `redbell ARGS...` to completion (at most 60 s).
pub fn run(args: &[&str]) -> Output {
    finish(
        spawn(args),
        Duration::from_secs(60),
        &format!("redbell {args:?}"),
    )
}

/// The exit code.
///
/// # Panics
///
/// When a signal killed the process.
pub fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("redbell itself was killed: {}", out.status))
}

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits until `path` exists with a complete line, and returns its text.
///
/// # Panics
///
/// When it does not within `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let end = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            Instant::now() < end,
            "{} did not appear within {limit:?}",
            path.display()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `cond` holds; how long it took.
///
/// # Panics
///
/// When it does not within `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

/// Sends `kill -SIG pid`.
///
/// # Panics
///
/// When `kill` fails.
pub fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

/// A blocking connection to the test Redis (`REDIS_URL`), for the CLI
/// tests' synchronous checks.
///
/// # Panics
///
/// When Redis cannot be reached.
pub fn redis() -> redis::Connection {
    redis::Client::open(redis_url())
        .and_then(|c| c.get_connection())
        .expect("the test Redis is reachable")
}

/// Whether the lock `name`'s key exists.
pub fn lock_exists(name: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(lock_key(name))
        .query::<i64>(&mut redis())
        .expect("EXISTS")
        == 1
}

/// Deletes the lock `name`'s key.
pub fn delete_lock(name: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key(name))
        .query(&mut redis())
        .expect("DEL");
}
