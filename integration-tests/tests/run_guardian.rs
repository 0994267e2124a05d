//! The guardian of `redbell run` and `redbell elect` against faults of the
//! pair (redbell, guardian) that `run_frozen.rs` does not cover:
//!
//! - the guardian killed on its own (the OOM killer, a stray `kill -9`),
//!   then `redbell`: the command must still not run past the lease;
//! - `redbell elect` stopped (SIGSTOP) in the grace after a SIGTERM: the
//!   SIGKILL at the grace's end must still come (for `run`, the reviewer's
//!   test in `fault_edges.rs`);
//! - the guardian frozen (SIGSTOP) while `redbell` runs on, cut off from
//!   Redis: `redbell` itself must stop the command before the lease can
//!   expire, on the guardian's schedule, not only once it sees the lease
//!   lost.
//!
//! Each test failed on the code before its fix; the failures are in the
//! tests' comments. Needs `REDIS_URL` and the built binary, as `cli.rs`.

use std::thread;
use std::time::{Duration, Instant};

use redbell_integration_tests::cli::{
    code, delete_lock, finish, kill, redbell, scratch, stderr, wait_for_file,
};
use redbell_integration_tests::{Proxy, redis_url};

fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("run-guardian-{what}"))
}

/// The nanosecond timestamps of the lines `TAG <ns>` in `text`.
fn stamps(text: &str, tag: &str) -> Vec<i128> {
    text.lines()
        .filter_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
        .collect()
}

/// Now, in nanoseconds of the wall clock (as `date +%s%N` writes).
fn now_ns() -> i128 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    i128::try_from(d.as_nanos()).expect("ns")
}

/// A command that ignores SIGTERM and appends `A <ns>` to `$OUT` every 50 ms.
const LOOP_A: &str =
    r#"trap "" TERM; while :; do echo A $(date +%s%N) >> "$OUT"; sleep 0.05; done"#;

/// A command that appends 10 lines `B <ns>` to `$OUT`, 50 ms apart.
const LINES_B: &str = r#"for i in $(seq 10); do echo B $(date +%s%N) >> "$OUT"; sleep 0.05; done"#;

/// The pid of `parent`'s child running `redbell __guard`.
fn guardian_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent) && cmdline.split(|&b| b == 0).any(|arg| arg == b"__guard") {
            return Some(pid);
        }
    }
    None
}

/// Whether any process of group `pgid` remains (`kill -0 -PGID`).
fn group_alive(pgid: i32) -> bool {
    std::process::Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `redbell SUBCOMMAND --ttl 3s NAME -- LOOP_A`; its guardian gets SIGKILL
/// (as from the OOM killer), then, 500 ms later, redbell itself. The lease
/// can expire 3 s after that; a second `redbell SUBCOMMAND NAME -- LINES_B`
/// then gets the lock (or the leadership). The first command must write
/// nothing after the lease can have expired, nor after the second's first
/// line.
fn guardian_killed_then_redbell(subcommand: &str) {
    let name = unique(&format!("oom-{subcommand}"));
    let dir = scratch();
    let file = dir.join("lines");
    let pgid_file = dir.join("pgid");
    let script = format!(r#"echo $$ > "$PGID"; {LOOP_A}"#);
    let mut first = redbell(&[subcommand, "--ttl", "3s", &name, "--", "sh", "-c", &script])
        .env("OUT", &file)
        .env("PGID", &pgid_file)
        .spawn()
        .expect("redbell starts");
    wait_for_file(&file, Duration::from_secs(20));
    let pgid: i32 = wait_for_file(&pgid_file, Duration::from_secs(5))
        .trim()
        .parse()
        .expect("a pgid");
    let guardian = guardian_of(first.id()).expect("redbell's guardian");
    kill("KILL", guardian);
    let guardian_killed = now_ns();
    thread::sleep(Duration::from_millis(500));
    let redbell_ended_first = first.try_wait().expect("try_wait").is_some();
    let _ = first.kill(); // SIGKILL, unless it has exited already
    let killed = now_ns();
    let first_status = first.wait().expect("wait");
    let lease_end = killed + 3_000_000_000;

    let second = redbell(&[subcommand, "--ttl", "3s", &name, "--", "sh", "-c", LINES_B])
        .env("OUT", &file)
        .spawn()
        .expect("redbell starts");
    let second = finish(second, Duration::from_secs(30), "the second holder");
    // Let a surviving first command show itself, then end it, whatever the
    // outcome.
    thread::sleep(Duration::from_millis(500));
    let survived = group_alive(pgid);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
    assert_eq!(code(&second), 0, "{}", stderr(&second));

    let text = std::fs::read_to_string(&file).expect("the lines");
    let a = stamps(&text, "A ");
    let b = stamps(&text, "B ");
    let (Some(&last_a), Some(&first_b)) = (a.iter().max(), b.first()) else {
        panic!("both commands must have written: {text}");
    };
    let after_lease = a.iter().filter(|&&t| t > lease_end).count();
    let after_b = a.iter().filter(|&&t| t >= first_b).count();
    eprintln!(
        "{subcommand}: guardian SIGKILLed; redbell {} 500 ms later ({first_status}); the \
         command's last line {:.1} ms after the guardian's death, {after_lease} lines past the \
         lease, {after_b} after the next holder's first; group alive at the end: {survived}",
        if redbell_ended_first {
            "had exited"
        } else {
            "SIGKILLed"
        },
        (last_a - guardian_killed) as f64 / 1e6,
    );
    assert!(
        after_lease == 0 && last_a < first_b && !survived,
        "{subcommand}: the command outlived redbell and its guardian: {after_lease} of its lines \
         came after the lease could expire, {after_b} after the next holder's first (still \
         running at the end: {survived})"
    );
    if subcommand == "run" {
        delete_lock(&name);
    }
}

/// Before the fix (redbell never noticed its guardian's death): "run: the
/// command outlived redbell and its guardian: 9 of its lines came after
/// the lease could expire, 19 after the next holder's first (still running
/// at the end: true)".
#[test]
fn a_run_command_dies_with_a_killed_guardian_before_the_lease_expires() {
    guardian_killed_then_redbell("run");
}

/// Before the fix: "elect: the command outlived redbell and its guardian:
/// 9 of its lines came after the lease could expire, 19 after the next
/// holder's first (still running at the end: true)".
#[test]
fn an_elect_command_dies_with_a_killed_guardian_before_the_lease_expires() {
    guardian_killed_then_redbell("elect");
}

/// `redbell elect --ttl 30s --kill-grace 2s` of a command that ignores
/// SIGTERM; SIGTERM to `redbell`, then SIGSTOP of it 100 ms later, in the
/// grace. The bound: the command has ended within the grace + 2 s = 4 s of
/// the SIGTERM (its last stamp is read 6 s after it; asserted: 5 s).
///
/// Before the fix (the SIGKILL after the grace lived only in redbell):
/// "the command still ran 6.081828694s after the SIGTERM to a redbell elect
/// stopped in its 2 s grace" (it would have run to the lease's deadline −
/// grace − margin, as `run` did).
#[test]
fn an_elect_stopped_during_the_grace_still_ends_its_command() {
    let name = unique("grace-elect");
    let dir = scratch();
    let out = dir.join("lines");
    let holder = redbell(&[
        "elect",
        "--ttl",
        "30s",
        "--kill-grace",
        "2s",
        &name,
        "--",
        "sh",
        "-c",
        LOOP_A,
    ])
    .env("OUT", &out)
    .spawn()
    .expect("redbell starts");
    wait_for_file(&out, Duration::from_secs(20));
    thread::sleep(Duration::from_millis(500));
    let pid = holder.id();
    let term_ns = now_ns();
    kill("TERM", pid);
    thread::sleep(Duration::from_millis(100));
    kill("STOP", pid);
    let stopped = Instant::now();
    thread::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed()));
    let last = stamps(&std::fs::read_to_string(&out).expect("lines"), "A ")
        .into_iter()
        .max()
        .expect("a line");
    // Clean up before asserting: let redbell go on (it sends SIGKILL).
    kill("CONT", pid);
    let _ = finish(holder, Duration::from_secs(40), "the holder");
    let ran_on = Duration::from_nanos(u64::try_from(last - term_ns).unwrap_or(0));
    eprintln!(
        "SIGSTOP of redbell elect in the grace: the command's last line {ran_on:?} after the \
         SIGTERM (bound 4 s)"
    );
    assert!(
        ran_on <= Duration::from_secs(5),
        "the command still ran {ran_on:?} after the SIGTERM to a redbell elect stopped in its \
         2 s grace (bound: grace + 2 s = 4 s)"
    );
}

/// The port of the test Redis (`redis://[auth@]host:port[/db]`).
fn redis_port() -> u16 {
    let url = redis_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or(rest);
    let port = host_port.rsplit_once(':').map_or("6379", |(_, p)| p);
    port.parse().expect("a port in REDIS_URL")
}

/// `redbell SUBCOMMAND --ttl 3s NAME -- LOOP_A` through a proxy; its
/// guardian is frozen (SIGSTOP), then the proxy stops forwarding (every
/// socket open): `redbell` runs on, cut off from Redis, with nobody else to
/// stop its command. A second `redbell SUBCOMMAND NAME -- LINES_B` gets the
/// lock (or the leadership) once the lease expires on the server. No line
/// of the first command may come after the second's first.
fn frozen_guardian_and_partition(subcommand: &str) {
    let name = unique(&format!("frozen-guardian-{subcommand}"));
    let dir = scratch();
    let file = dir.join("lines");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let proxy = runtime
        .block_on(Proxy::start(0, redis_port()))
        .expect("a proxy");
    let first = redbell(&[
        "--url",
        &proxy.url(),
        subcommand,
        "--ttl",
        "3s",
        &name,
        "--",
        "sh",
        "-c",
        LOOP_A,
    ])
    .env("OUT", &file)
    .spawn()
    .expect("redbell starts");
    wait_for_file(&file, Duration::from_secs(20));
    let guardian = guardian_of(first.id()).expect("redbell's guardian");
    kill("STOP", guardian);
    runtime.block_on(proxy.partition());
    let cut = Instant::now();

    let second = redbell(&[subcommand, "--ttl", "3s", &name, "--", "sh", "-c", LINES_B])
        .env("OUT", &file)
        .spawn()
        .expect("redbell starts");
    let second = finish(second, Duration::from_secs(30), "the second holder");
    let second_ran = cut.elapsed();
    kill("CONT", guardian);
    let first = finish(first, Duration::from_secs(30), "the first holder");
    assert_eq!(code(&second), 0, "{}", stderr(&second));

    let text = std::fs::read_to_string(&file).expect("the lines");
    let a = stamps(&text, "A ");
    let b = stamps(&text, "B ");
    let (Some(&last_a), Some(&first_b)) = (a.iter().max(), b.first()) else {
        panic!("both commands must have written: {text}");
    };
    let during = a.iter().filter(|&&t| t >= first_b).count();
    let gap_ms = (first_b - last_a) as f64 / 1e6;
    eprintln!(
        "{subcommand}, guardian frozen, cut off: the second holder ended {second_ran:?} after \
         the cut; the first command's last line came {gap_ms:.1} ms before the second's first"
    );
    assert!(
        last_a < first_b,
        "{subcommand}: with its guardian frozen, a redbell cut off from Redis let its command \
         run beside the next one's: {during} of its lines came after the second's first \
         ({:.3} s of overlap)",
        -gap_ms / 1e3
    );
    assert_eq!(code(&first), 75, "{subcommand}: {}", stderr(&first));
    if subcommand == "run" {
        delete_lock(&name);
    }
}

/// `run` stopped its command by the lease's deadline before this test (its
/// supervisor keeps the guardian's schedule); it guards the shared frame.
#[test]
fn a_partitioned_run_with_a_frozen_guardian_stops_its_command_in_time() {
    frozen_guardian_and_partition("run");
}

/// Before the fix (elect's own loop acted only on the library's lost
/// leadership, at the lease's local deadline, then gave --kill-grace; the
/// overlap ended only when the test continued the guardian): "elect: with
/// its guardian frozen, a redbell cut off from Redis let its command run
/// beside the next one's: 10 of its lines came after the second's first
/// (0.510 s of overlap)".
#[test]
fn a_partitioned_elect_with_a_frozen_guardian_stops_its_command_in_time() {
    frozen_guardian_and_partition("elect");
}
