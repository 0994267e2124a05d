//! Leader election from the command line: `redbell elect` holding the
//! leadership while its command runs, `redbell leader` naming it, and
//! `redbell elect --requeue` taking turns.

use std::process::Stdio;
use std::time::Duration;

use redbell_integration_tests::{eventually, redbell_binary, redis_url, unique};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::time::timeout;

use redbell_integration_tests::scenes::election::*;

/// `redbell elect` runs its command only while leader, with the term in
/// `REDBELL_TERM`; `redbell leader` prints the leader, and `--watch` each
/// change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_elect_and_leader() {
    let url = redis_url();
    let name = unique("elect-cli");
    let mut watch = Command::new(redbell_binary())
        .args(["--url", &url, "leader", &name, "--watch"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn leader --watch");
    let mut watched = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let line = timeout(SOON, watched.next_line()).await.expect("in time");
    assert_eq!(line.expect("read").as_deref(), Some("no leader"));

    let out = Command::new(redbell_binary())
        .args(["--url", &url, "elect", &name, "--value", "cli-1", "--"])
        .args(["sh", "-c", "echo term=$REDBELL_TERM; redbell_leader=$($0 --url \"$1\" leader \"$2\"); echo \"$redbell_leader\"; exit 3"])
        .arg(redbell_binary())
        .arg(&url)
        .arg(&name)
        .output()
        .await
        .expect("run elect");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "elect: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "the command's exit code");
    let term: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("term="))
        .and_then(|t| t.parse().ok())
        .expect("REDBELL_TERM");
    assert!(
        stdout.contains(&format!("leader: cli-1 (term {term})")),
        "leader printed while elect ran: {stdout}"
    );
    // --watch saw it elected, then resigned.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = timeout(SOON, watched.next_line()).await.expect("in time");
        seen.push(line.expect("read").expect("a line"));
    }
    assert_eq!(
        seen,
        [
            format!("leader: cli-1 (term {term})"),
            "no leader".to_owned()
        ]
    );
    let out = Command::new(redbell_binary())
        .args(["--url", &url, "leader", &name])
        .output()
        .await
        .expect("run leader");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no leader");
    assert_eq!(out.status.code(), Some(1), "no leader exits 1");
    let _ = watch.start_kill();
}

/// `redbell elect --requeue` campaigns again after its command exits; two
/// of them take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_elect_requeue_takes_turns() {
    let url = redis_url();
    let name = unique("elect-requeue");
    let dir = std::env::temp_dir().join(unique("elect-requeue"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log = dir.join("terms");
    let spawn = |value: &str| {
        Command::new(redbell_binary())
            .args([
                "--url",
                &url,
                "elect",
                &name,
                "--value",
                value,
                "--requeue",
                "--",
            ])
            .args([
                "sh",
                "-c",
                "echo \"$REDBELL_TERM $REDBELL_VALUE\" >> \"$0\"; sleep 0.1",
            ])
            .arg(&log)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn elect")
    };
    let mut a = spawn("a");
    let mut b = spawn("b");
    let enough = eventually(Duration::from_secs(20), || {
        let log = log.clone();
        async move { std::fs::read_to_string(&log).is_ok_and(|s| s.lines().count() >= 6) }
    })
    .await;
    let _ = a.start_kill();
    let _ = b.start_kill();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(enough, "too few terms: {text}");
    let terms: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    assert!(
        text.contains(" a") && text.contains(" b"),
        "both led: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
