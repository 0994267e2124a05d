//! `redbell-bench demo` end to end: the built binary against the test
//! Redis.
//!
//! Needs `REDIS_URL` (set by `make test`) and the binaries built first
//! (`cargo build -p redbell-bench`, which `make test` does). Every run
//! uses its own key namespace, so these tests run in parallel with each
//! other and with the other suites.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use redbell_integration_tests::{built_binary, log_output, redis_url};

/// Runs `exe args...` with `REDIS_URL` set, failing the test after 120 s.
async fn run(exe: PathBuf, args: &[&str]) -> Output {
    let child = tokio::process::Command::new(&exe)
        .args(args)
        .env("REDIS_URL", redis_url())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} took over 120 s", exe.display()))
        .expect("the demo binary runs");
    log_output(&format!("{} {args:?}", exe.display()), &out);
    out
}

/// The value column of a table row (`duplicates`, `oversold`, ...): the text
/// after the row's label.
fn row(out: &Output, label: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no {label:?} row in the output:\n{stdout}"))
}

fn count(out: &Output, label: &str) -> u64 {
    let value = row(out, label);
    value
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{label:?} row is not a number: {value:?}"))
}

/// Exit 0 and a table whose every invariant holds.
fn assert_clean(out: &Output, tickets: u64) {
    assert!(out.status.success(), "the demo failed: {}", out.status);
    assert_eq!(count(out, "duplicates"), 0);
    assert_eq!(count(out, "oversold"), 0);
    assert_eq!(row(out, "fences strictly increasing"), "yes");
    assert_eq!(row(out, "total sold"), format!("{tickets} / {tickets}"));
    let per_window: u64 = (1..=5)
        .map(|w| count(out, &format!("window {w} sold")))
        .sum();
    assert_eq!(per_window, tickets);
    assert!(row(out, "result").starts_with("OK"));
}

#[tokio::test]
async fn pubsub_processes_sell_every_ticket_once() {
    let out = run(
        built_binary("redbell-bench"),
        &["demo", "--windows", "5", "--tickets", "100"],
    )
    .await;
    assert_clean(&out, 100);
    assert!(row(&out, "hand-off p50").ends_with("ms"));
}

#[tokio::test]
async fn poll_baseline_sells_every_ticket_once() {
    let args = [
        "demo",
        "--windows",
        "5",
        "--tickets",
        "100",
        "--strategy",
        "poll",
        "--poll-interval",
        "10ms",
    ];
    let out = run(built_binary("redbell-bench"), &args).await;
    assert_clean(&out, 100);
}

#[tokio::test]
async fn tasks_mode_sells_every_ticket_once() {
    let out = run(
        built_binary("redbell-bench"),
        &["demo", "--tasks", "--tickets", "50"],
    )
    .await;
    assert_clean(&out, 50);
}

/// Proof that the checks can fail: without the lock, concurrent windows
/// read the same remaining count and sell the same ticket.
#[tokio::test]
async fn a_broken_lock_is_detected() {
    let out = run(
        built_binary("redbell-bench"),
        &["demo", "--windows", "5", "--tickets", "100", "--no-lock"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "a broken run must exit 1");
    assert!(
        count(&out, "duplicates") > 0 || count(&out, "oversold") > 0,
        "the checks missed the broken lock"
    );
    assert!(row(&out, "result").starts_with("BROKEN"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invariant broken"));
}

#[tokio::test]
async fn unreachable_redis_exits_69() {
    let out = tokio::process::Command::new(built_binary("redbell-bench"))
        .args(["--url", "redis://127.0.0.1:1", "demo"])
        .output()
        .await
        .expect("the demo binary runs");
    assert_eq!(out.status.code(), Some(69));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr}");
    assert!(stderr.contains("cannot connect to Redis"), "{stderr}");
}

/// `--open 2`: five window processes, at most two open at once (a redbell
/// semaphore), and the table shows the most seen open, within the limit.
#[tokio::test]
async fn open_windows_stay_within_the_semaphore() {
    let out = run(
        built_binary("redbell-bench"),
        &["demo", "--windows", "5", "--tickets", "60", "--open", "2"],
    )
    .await;
    assert_clean(&out, 60);
    let open = row(&out, "most windows open at once");
    assert!(open.ends_with("(limit 2)"), "{open}");
    assert!(count(&out, "most windows open at once") <= 2, "{open}");
    assert!(count(&out, "openings") >= 60);
    let poll = run(
        built_binary("redbell-bench"),
        &["demo", "--strategy", "poll", "--open", "2"],
    )
    .await;
    assert_eq!(poll.status.code(), Some(2), "--open needs pubsub");
}
