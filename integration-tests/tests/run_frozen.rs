//! A `redbell run` or `redbell elect` that is alive but not running (SIGSTOP,
//! a hung system call, a starved runtime) still never lets its command run
//! beside the next holder's: its guardian is a dead-man timer that stops the
//! command's group before the last confirmed lease can expire (and so does
//! it for an `elect` cut off from Redis). And a command
//! that stopped itself (job control) does not hold its lock forever: a
//! forwarded signal is followed by SIGCONT, and a SIGTERM to redbell
//! escalates to SIGKILL of the group after `--kill-grace`.
//!
//! Each test failed on the code before its fix; the failures are in the
//! tests' comments. Needs `REDIS_URL` and the built binary, as `cli.rs`.

use std::path::Path;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use redbell_integration_tests::cli::{
    code, delete_lock, finish, kill, lock_exists, redbell, scratch, stderr, wait_for_file,
};
use redbell_integration_tests::{Proxy, redis_port, redis_url};

fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("run-frozen-{what}"))
}

/// The first letter of `pid`'s state in /proc (`T` stopped, `Z` zombie),
/// `None` when it is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The nanosecond timestamps of the lines `TAG <ns>` in `text`.
fn stamps(text: &str, tag: &str) -> Vec<i128> {
    text.lines()
        .filter_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
        .collect()
}

/// A command that ignores SIGTERM and appends `A <ns>` to `$OUT` every 50 ms.
const LOOP_A: &str =
    r#"trap "" TERM; while :; do echo A $(date +%s%N) >> "$OUT"; sleep 0.05; done"#;

/// A command that appends 30 lines `B <ns>` to `$OUT`, 50 ms apart.
const LINES_B: &str = r#"for i in $(seq 30); do echo B $(date +%s%N) >> "$OUT"; sleep 0.05; done"#;

/// How the first holder is kept from renewing its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGSTOP of redbell only: its guardian and its command run on.
    Freeze,
    /// Redbell runs on, but its connections to Redis (through a proxy)
    /// stop forwarding, every socket open.
    Partition,
}

/// `redbell SUBCOMMAND --ttl 3s NAME -- LOOP_A` meets `fault`; a second
/// `redbell SUBCOMMAND NAME -- LINES_B` then gets the lock (or the
/// leadership) once the lease runs out. No line of the first command may
/// come after the second's first.
fn holder_stops_its_command(subcommand: &str, fault: Fault) {
    let name = unique(&format!("{fault:?}-{subcommand}"));
    let dir = scratch();
    let file = dir.join("lines");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let proxy = runtime
        .block_on(Proxy::start(0, redis_port()))
        .expect("a proxy");
    let url = match fault {
        Fault::Freeze => redis_url(),
        Fault::Partition => proxy.url(),
    };
    let first = redbell(&[
        "--url", &url, subcommand, "--ttl", "3s", &name, "--", "sh", "-c", LOOP_A,
    ])
    .env("OUT", &file)
    .spawn()
    .expect("redbell starts");
    wait_for_file(&file, Duration::from_secs(20));
    match fault {
        Fault::Freeze => kill("STOP", first.id()),
        Fault::Partition => runtime.block_on(proxy.partition()),
    }
    let faulted = Instant::now();

    let second = redbell(&[subcommand, "--ttl", "3s", &name, "--", "sh", "-c", LINES_B])
        .env("OUT", &file)
        .spawn()
        .expect("redbell starts");
    let second = finish(second, Duration::from_secs(30), "the second holder");
    let second_ran = faulted.elapsed();
    if fault == Fault::Freeze {
        kill("CONT", first.id());
    }
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
        "{subcommand} ({fault:?}): the second holder ended {second_ran:?} after the fault; the \
         first holder's command wrote its last line {gap_ms:.1} ms before the second's first"
    );
    assert!(
        last_a < first_b,
        "{subcommand} ({fault:?}): the first holder's command ran beside the next one's: \
         {during} of its lines came after the second's first ({:.3} s of overlap)",
        -gap_ms / 1e3
    );
    assert_eq!(
        code(&first),
        75,
        "{subcommand} ({fault:?}): the first holder's command was stopped for its lease"
    );
    if subcommand == "run" {
        delete_lock(&name);
    }
}

/// Before the fix (the guardian acted only when redbell died): the frozen
/// holder's command wrote 30 of its lines after the second's first (1.7 s
/// of overlap, until the test continued redbell).
#[test]
fn a_frozen_redbell_run_stops_its_command_before_the_lease_expires() {
    holder_stops_its_command("run", Fault::Freeze);
}

/// Before the fix: the frozen leader's command wrote 121 of its lines after
/// the next leader's first (6.7 s of overlap: until the test continued
/// redbell, and then for elect's --kill-grace of 5 s).
#[test]
fn a_frozen_redbell_elect_stops_its_command_before_another_leads() {
    holder_stops_its_command("elect", Fault::Freeze);
}

/// A leader cut off from Redis (redbell runs on): its command is stopped
/// before the lease can expire, as `run`'s is (`run_safety.rs`), not
/// `--kill-grace` after the library's lost-leadership signal.
///
/// Before the fix: 87 of its lines came after the next leader's first
/// (4.9 s of overlap: the library reports the loss at the lease's local
/// deadline, and elect's --kill-grace of 5 s followed).
#[test]
fn a_partitioned_redbell_elect_stops_its_command_before_another_leads() {
    holder_stops_its_command("elect", Fault::Partition);
}

/// `redbell SUBCOMMAND --kill-grace GRACE NAME -- sh -c SCRIPT`, where SCRIPT
/// writes its pid to `$PIDS` and then stops itself (`kill -STOP $$`).
/// Returns redbell and the command's pid, once the command is stopped.
fn start_stopped_command(args: &[&str], script: &str, dir: &Path) -> (Child, i32) {
    let pid_file = dir.join("pid");
    let mut argv = args.to_vec();
    argv.extend(["--", "sh", "-c", script]);
    let holder = redbell(&argv)
        .env("PIDS", &pid_file)
        .env("OUT", dir.join("out"))
        .spawn()
        .expect("redbell starts");
    let pid: i32 = wait_for_file(&pid_file, Duration::from_secs(20))
        .trim()
        .parse()
        .expect("a pid");
    let started = Instant::now();
    while state(pid) != Some('T') {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the command did not stop itself: state {:?}",
            state(pid)
        );
        thread::sleep(Duration::from_millis(5));
    }
    (holder, pid)
}

/// Waits for `child` until `limit` after `start`; how long after `start` it
/// exited, `None` if it has not by then.
fn exited_within(child: &mut Child, start: Instant, limit: Duration) -> Option<Duration> {
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Ends what a failed test left: SIGKILL to redbell (its guardian then
/// kills the group) and to the command, in case.
fn clean_up(holder: &mut Child, command: i32) {
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = Command::new("kill")
        .args(["-KILL", &command.to_string()])
        .status();
}

/// The command stops itself and ignores SIGTERM; redbell gets SIGTERM (as
/// from `timeout 5 redbell ...`). It must end, and the lock be free, within
/// the grace (1 s) + 2 s.
fn sigterm_ends_a_stopped_command(args: &[&str], lock: Option<&str>) {
    let dir = scratch();
    let script = r#"trap "" TERM; echo $$ > "$PIDS"; kill -STOP $$; sleep 60"#;
    let (mut holder, command) = start_stopped_command(args, script, &dir);
    let sent = Instant::now();
    kill("TERM", holder.id());
    let took = exited_within(&mut holder, sent, Duration::from_secs(3));
    let Some(took) = took else {
        let seen = state(command);
        clean_up(&mut holder, command);
        panic!(
            "{}: still running 3 s after SIGTERM, the command in state {seen:?}",
            args[0]
        );
    };
    let out = finish(holder, Duration::from_secs(5), "the SIGTERMed holder");
    eprintln!("{}: ended {took:?} after SIGTERM", args[0]);
    assert_eq!(code(&out), 137, "the group got SIGKILL");
    if let Some(name) = lock {
        assert!(!lock_exists(name), "the lock is free once redbell ended");
    }
}

/// Before the fix: still running 3 s after SIGTERM, the command in state
/// `T` (the issue saw 610 s).
#[test]
fn sigterm_to_redbell_run_ends_a_stopped_command_within_the_grace() {
    let name = unique("stopped-run");
    let args = ["run", "--kill-grace", "1s", &name];
    sigterm_ends_a_stopped_command(&args, Some(&name));
}

/// Before the fix: as for `run`.
#[test]
fn sigterm_to_redbell_elect_ends_a_stopped_command_within_the_grace() {
    let name = unique("stopped-elect");
    sigterm_ends_a_stopped_command(&["elect", "--kill-grace", "1s", &name], None);
}

/// A stopped command that handles SIGTERM: the forwarded SIGTERM is followed
/// by SIGCONT, so its handler runs and it exits on its own (code 3), long
/// before the grace (10 s) would have SIGKILLed it.
fn forwarded_sigterm_continues_a_stopped_command(args: &[&str]) {
    let dir = scratch();
    let script =
        r#"trap 'echo handled >> "$OUT"; exit 3' TERM; echo $$ > "$PIDS"; kill -STOP $$; sleep 60"#;
    let (mut holder, command) = start_stopped_command(args, script, &dir);
    let sent = Instant::now();
    kill("TERM", holder.id());
    let took = exited_within(&mut holder, sent, Duration::from_secs(5));
    let Some(took) = took else {
        let seen = state(command);
        clean_up(&mut holder, command);
        panic!(
            "{}: still running 5 s after SIGTERM, the command in state {seen:?}",
            args[0]
        );
    };
    let out = finish(holder, Duration::from_secs(5), "the SIGTERMed holder");
    eprintln!(
        "{}: the continued command ended {took:?} after SIGTERM",
        args[0]
    );
    assert_eq!(code(&out), 3, "the command's own handler ended it");
    let handled = std::fs::read_to_string(dir.join("out")).unwrap_or_default();
    assert_eq!(handled, "handled\n");
}

/// Before the fix: still running 5 s after SIGTERM, in state `T`.
#[test]
fn a_forwarded_sigterm_continues_a_stopped_run_command() {
    let name = unique("continued-run");
    forwarded_sigterm_continues_a_stopped_command(&["run", "--kill-grace", "10s", &name]);
    assert!(!lock_exists(&name), "the lock is free once redbell ended");
}

/// Before the fix: as for `run`.
#[test]
fn a_forwarded_sigterm_continues_a_stopped_elect_command() {
    let name = unique("continued-elect");
    forwarded_sigterm_continues_a_stopped_command(&["elect", "--kill-grace", "10s", &name]);
}

/// The dead-man timer is moved on while redbell runs: a command that runs
/// through several leases (5 s under a 2 s lease) is not stopped, for `run`
/// (fed each renewal) and for `elect` (fed the leadership's deadline).
fn a_long_command_is_not_stopped(args: &[&str]) {
    let dir = scratch();
    let file = dir.join("out");
    let mut argv = args.to_vec();
    argv.extend([
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        r#"sleep 5; echo done > "$OUT""#,
    ]);
    let out = finish(
        redbell(&argv)
            .env("OUT", &file)
            .spawn()
            .expect("redbell starts"),
        Duration::from_secs(30),
        "a long command",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), "done\n");
}

/// A check that the timer does not stop a healthy command. It passed
/// before the fix too, which had no timer; with the feeds taken out of
/// `run/lease.rs` and `elect.rs`, both failed (the guardian stopped the
/// command, exit 75).
#[test]
fn a_command_outliving_its_lease_runs_on_while_run_renews() {
    let name = unique("long-run");
    a_long_command_is_not_stopped(&["run", &name]);
    assert!(!lock_exists(&name), "the lock is released");
}

/// As for `run`.
#[test]
fn a_command_outliving_its_lease_runs_on_while_elect_leads() {
    let name = unique("long-elect");
    a_long_command_is_not_stopped(&["elect", &name]);
}
