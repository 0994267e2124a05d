//! `redbell run` never lets its command run beside the lock's next holder:
//! not when it is cut off from Redis (the group is dead before the lease can
//! expire on the server), not when `redbell` itself is SIGKILLed (its
//! guardian kills the group), not past `--max-hold`. Also: bare numbers in
//! duration options are seconds.
//!
//! Each fault test failed on the code before its fix; the numbers are in
//! the test's comment. Needs `REDIS_URL` and the built binary, as `cli.rs`.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use redbell_integration_tests::cli::{
    code, delete_lock, finish, lock_exists, redbell, redis, scratch, wait_for_file,
};
use redbell_integration_tests::{Proxy, lock_key, redis_port};

fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("run-safety-{what}"))
}

/// Whether `pid` is gone: no such process, or a zombie (dead, only not
/// reaped yet by whoever inherited it).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The kit's [`Proxy`] to the test Redis, on a runtime of its own (the
/// tests here are synchronous), that drops every packet when
/// [partitioned](CutProxy::partition): forwarding stops in both directions
/// while every socket stays open, as when a network drops packets.
struct CutProxy {
    proxy: Proxy,
    runtime: tokio::runtime::Runtime,
}

impl CutProxy {
    fn start() -> CutProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let proxy = runtime
            .block_on(Proxy::start(0, redis_port()))
            .expect("a proxy");
        CutProxy { proxy, runtime }
    }

    fn url(&self) -> String {
        self.proxy.url()
    }

    fn partition(&self) {
        self.runtime.block_on(self.proxy.drop_all());
    }
}

/// The nanosecond timestamps of the lines `TAG <ns>` in `text`.
fn stamps(text: &str, tag: &str) -> Vec<i128> {
    text.lines()
        .filter_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
        .collect()
}

/// The holder is cut off from Redis and its command ignores SIGTERM. The
/// command must be dead before the lease can expire on the server, i.e.
/// before the next holder's command starts.
///
/// Before the fix (SIGTERM at the local deadline, SIGKILL --kill-grace =
/// 5 s later): the old command wrote its last line 4.92 s after the new
/// holder's first.
#[test]
fn a_partitioned_holder_stops_its_command_before_the_lease_expires() {
    let name = unique("partition");
    let dir = scratch();
    let file = dir.join("lines");
    let proxy = CutProxy::start();
    let holder = redbell(&[
        "--url",
        &proxy.url(),
        "run",
        "--ttl",
        "3s",
        &name,
        "--",
        "sh",
        "-c",
        r#"trap "" TERM; while :; do echo A $(date +%s%N) >> "$OUT"; sleep 0.05; done"#,
    ])
    .env("OUT", &file)
    .spawn()
    .expect("redbell starts");
    wait_for_file(&file, Duration::from_secs(20));

    proxy.partition();
    let cut = Instant::now();
    let next = redbell(&[
        "run",
        &name,
        "--",
        "sh",
        "-c",
        r#"echo B $(date +%s%N) >> "$OUT""#,
    ])
    .env("OUT", &file)
    .spawn()
    .expect("redbell starts");
    let out = finish(next, Duration::from_secs(30), "the next holder");
    assert_eq!(code(&out), 0);
    eprintln!(
        "the next holder ran {:?} after the partition",
        cut.elapsed()
    );
    let out = finish(holder, Duration::from_secs(30), "the cut-off holder");
    assert_eq!(code(&out), 75, "a lost lease exits 75");

    let text = std::fs::read_to_string(&file).expect("the lines");
    let a = stamps(&text, "A ");
    let b = stamps(&text, "B ");
    let (Some(&last_a), Some(&first_b)) = (a.iter().max(), b.first()) else {
        panic!("both commands must have written: {text}");
    };
    let gap_ms = (first_b - last_a) as f64 / 1e6;
    eprintln!("the old command's last line came {gap_ms:.1} ms before the new holder's first");
    assert!(
        last_a < first_b,
        "both commands ran at once for {:.3} s",
        -gap_ms / 1e3
    );
    delete_lock(&name);
}

/// `redbell` is SIGKILLed (as by the OOM killer) while its command runs:
/// the command and its whole group must be gone within a second.
///
/// Before the fix: the shell and its `sleep` were still running 1 s after
/// redbell's death (and a second `redbell run` would have run beside them
/// once the 2 s lease expired).
#[test]
fn a_sigkilled_redbell_takes_its_command_group_with_it() {
    let name = unique("sigkill");
    sigkill_takes_the_group(&["run", "--ttl", "2s", &name]);
    delete_lock(&name);
}

/// The same for `redbell elect`, which runs its command while it leads:
/// SIGKILLed, it leaves no command running without a leader.
///
/// Before the fix (no guardian in `elect`): `sh` and `sleep` still ran 1 s
/// after redbell's death.
#[test]
fn a_sigkilled_redbell_elect_takes_its_command_group_with_it() {
    let name = unique("sigkill-elect");
    sigkill_takes_the_group(&["elect", "--ttl", "2s", &name]);
}

/// Starts `redbell ARGS -- sh -c ...` (a shell with a `sleep` child),
/// SIGKILLs redbell once both run, and checks both are gone within 1 s.
fn sigkill_takes_the_group(args: &[&str]) {
    let dir = scratch();
    let pid_file = dir.join("pids");
    let mut argv = args.to_vec();
    argv.extend([
        "--",
        "sh",
        "-c",
        r#"sleep 60 & echo "$$ $!" > "$PIDS"; wait"#,
    ]);
    let mut holder = redbell(&argv)
        .env("PIDS", &pid_file)
        .spawn()
        .expect("redbell starts");
    let text = wait_for_file(&pid_file, Duration::from_secs(20));
    let pids: Vec<i32> = text
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2, "{text:?}");
    assert!(pids.iter().all(|&p| !gone(p)), "the command runs");

    holder.kill().expect("SIGKILL redbell");
    holder.wait().expect("reap redbell");
    let killed = Instant::now();
    while !pids.iter().all(|&p| gone(p)) && killed.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(5));
    }
    let survivors: Vec<i32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
    for &pid in &survivors {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        survivors.is_empty(),
        "{}: still running 1 s after redbell's death: {survivors:?} (sh, sleep: {pids:?})",
        args[0]
    );
    eprintln!(
        "{}: the command's group was gone {:?} after redbell",
        args[0],
        killed.elapsed()
    );
}

/// `--max-hold 1s` ends a command that would hold the lock for 30 s: it is
/// stopped as for a lost lease, and redbell exits 75.
///
/// Before the fix: exit 2 (no such option).
#[test]
fn max_hold_stops_the_command_and_exits_75() {
    let name = unique("max-hold");
    let started = Instant::now();
    let child = redbell(&["run", "--max-hold", "1s", &name, "--", "sleep", "30"])
        .spawn()
        .expect("redbell starts");
    let out = finish(child, Duration::from_secs(20), "run --max-hold 1s");
    let took = started.elapsed();
    assert_eq!(code(&out), 75, "past --max-hold is a lost lease");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "--max-hold 1s ended the run after {took:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--max-hold"),
        "no explanation"
    );
    assert!(!lock_exists(&name), "the lock is released");
}

/// Bare numbers are seconds (as flock(1)), decimals allowed; units still work.
///
/// Before the fix: `-w 1`, `-w 0.3` and `--ttl 2` were usage errors (exit 2).
/// (`--max-hold 1.5` is checked too, but the option is newer.)
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
    delete_lock(&name);

    let dir = scratch();
    let file = dir.join("ran");
    let child = redbell(&[
        "run",
        "--ttl",
        "2",
        "--kill-grace",
        "0.5",
        "--max-hold",
        "1.5",
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
