//! `redbell run`'s safety options and their input. Bare numbers in
//! duration options are seconds.
//!
//! Each fault test failed on the code before its fix; the numbers are in
//! the test's comment. Needs `REDIS_URL` and the built binary, as `cli.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redbell_integration_tests::{lock_key, log_output, redbell_binary, redis_url};

fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("run-safety-{what}"))
}

fn redis() -> redis::Connection {
    redis::Client::open(redis_url())
        .and_then(|c| c.get_connection())
        .expect("the test Redis is reachable")
}

fn del(name: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key(name))
        .query(&mut redis())
        .expect("DEL");
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("dir"));
    std::fs::create_dir_all(&dir).expect("create a scratch dir");
    dir
}

/// `redbell ARGS...` with `REDIS_URL` set and no stdin.
fn redbell(args: &[&str]) -> Command {
    let mut cmd = Command::new(redbell_binary());
    cmd.args(args)
        .env("REDIS_URL", redis_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` at most `limit` (killing it and failing after that).
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
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

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("redbell itself was killed: {}", out.status))
}

/// Waits until `path` holds a complete line, and returns its text.
fn wait_for_file(path: &Path, limit: Duration) -> String {
    let end = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(Instant::now() < end, "{} did not appear", path.display());
        thread::sleep(Duration::from_millis(5));
    }
}

/// Bare numbers are seconds (as flock(1)), decimals allowed; units still work.
///
/// Before the fix: `-w 1`, `-w 0.3` and `--ttl 2` were usage errors (exit 2).
#[test]
fn bare_numbers_are_seconds() {
    let name = unique("seconds");
    let _: () = redis::cmd("SET")
        .arg(lock_key(&name))
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query(&mut redis())
        .unwrap();
    for (wait, at_least) in [("1", 1000), ("0.3", 300), ("300ms", 300)] {
        let started = Instant::now();
        let child = redbell(&["run", "-w", wait, &name, "--", "true"])
            .spawn()
            .expect("redbell starts");
        let out = finish(child, Duration::from_secs(20), "run -w");
        let waited = started.elapsed();
        assert_eq!(code(&out), 1, "-w {wait} times out");
        assert!(
            waited >= Duration::from_millis(at_least) && waited < Duration::from_secs(3),
            "-w {wait} gave up after {waited:?}"
        );
    }
    del(&name);

    let dir = scratch();
    let file = dir.join("ran");
    let child = redbell(&[
        "run",
        "--ttl",
        "2",
        "--kill-grace",
        "0.5",
        &name,
        "-c",
        r#"echo ran > "$OUT"; sleep 0.5"#,
    ])
    .env("OUT", &file)
    .spawn()
    .expect("redbell starts");
    wait_for_file(&file, Duration::from_secs(20));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key(&name))
        .query(&mut redis())
        .expect("PTTL");
    let out = finish(child, Duration::from_secs(20), "run --ttl 2");
    assert_eq!(code(&out), 0);
    assert!(
        pttl > 1000 && pttl <= 2000,
        "--ttl 2 set a PTTL of {pttl} ms"
    );

    for bad in ["1e3", "-1", "1.2.3", ".", "0", "nan"] {
        let out = finish(
            redbell(&["run", "--ttl", bad, &name, "--", "true"])
                .spawn()
                .expect("redbell starts"),
            Duration::from_secs(20),
            "run --ttl BAD",
        );
        assert_eq!(code(&out), 2, "--ttl {bad:?} is a usage error");
    }
}
