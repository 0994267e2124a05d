//! `redbell run`, `status` and `unlock --force` end to end: the built binary
//! against the test Redis.
//!
//! Needs `REDIS_URL` (set by `make test`) and the binary built first
//! (`cargo build -p redbell-cli`, which `make test` does). Every test uses
//! its own lock names and scratch directory, so they run in parallel with
//! each other and with the other suites. Timing bounds are generous: the
//! tests run on small, busy machines.

use std::collections::HashMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use redbell_integration_tests::cli::{
    code, delete_lock, finish, kill, lock_exists, redbell, redis, run, scratch, stderr, stdout,
    wait_for_file, wait_until,
};
use redbell_integration_tests::{free_port, lock_key};

/// A name no other test uses: `cli-what-<uuid>`.
fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("cli-{what}"))
}

/// The processes (any state) whose process group is `pgid`, from /proc.
fn group_members(pgid: i32) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            found.push(stat.trim().to_owned());
        }
    }
    found
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
}

/// Two pids written by a test command: `$$` (the command, leader of its
/// group) and `$!` (a background grandchild).
fn pids(path: &Path) -> (i32, i32) {
    let text = wait_for_file(path, Duration::from_secs(20));
    let mut it = text
        .split_whitespace()
        .map(|p| p.parse::<i32>().expect("a pid"));
    (it.next().expect("$$"), it.next().expect("$!"))
}

/// A flat JSON object (`{"k": "str" | number | true | false | null, ...}`),
/// parsed strictly enough to prove the output is JSON. Values are kept as
/// their JSON text, strings unquoted.
fn parse_json_object(line: &str) -> HashMap<String, String> {
    fn string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
        assert_eq!(chars.next(), Some('"'), "a string starts with a quote");
        let mut s = String::new();
        loop {
            match chars.next().expect("unterminated string") {
                '"' => return s,
                '\\' => s.push(chars.next().expect("an escape")),
                c => s.push(c),
            }
        }
    }
    let mut chars = line.trim().chars().peekable();
    let mut map = HashMap::new();
    assert_eq!(chars.next(), Some('{'), "not an object: {line}");
    if chars.peek() == Some(&'}') {
        chars.next();
    } else {
        loop {
            let k = string(&mut chars);
            assert_eq!(chars.next(), Some(':'), "no colon in {line}");
            let v = if chars.peek() == Some(&'"') {
                string(&mut chars)
            } else {
                let mut v = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '}' {
                        break;
                    }
                    v.push(c);
                    chars.next();
                }
                assert!(
                    v == "true" || v == "false" || v == "null" || v.parse::<f64>().is_ok(),
                    "bad JSON value {v:?} in {line}"
                );
                v
            };
            map.insert(k, v);
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                other => panic!("unexpected {other:?} in {line}"),
            }
        }
    }
    assert_eq!(chars.next(), None, "trailing text in {line}");
    map
}

fn status_json(names: &[&str]) -> Vec<HashMap<String, String>> {
    let mut args = vec!["status", "--json"];
    args.extend_from_slice(names);
    let out = run(&args);
    assert_eq!(code(&out), 0, "status failed");
    stdout(&out).lines().map(parse_json_object).collect()
}

#[test]
fn concurrent_runs_are_mutually_exclusive() {
    let name = unique("counter");
    let dir = scratch();
    let counter = dir.join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    // Read, sleep 5 ms, write + 1: any overlap loses an increment.
    let snippet = r#"n=$(cat "$COUNTER"); sleep 0.005; echo $((n + 1)) > "$COUNTER""#;
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let name = name.clone();
            let counter = counter.clone();
            thread::spawn(move || {
                for _ in 0..10 {
                    let child = redbell(&["run", &name, "-c", snippet])
                        .env("COUNTER", &counter)
                        .spawn()
                        .expect("redbell starts");
                    let out = finish(child, Duration::from_secs(60), "run counter");
                    assert_eq!(code(&out), 0, "a run failed");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker panicked");
    }
    let total = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(total.trim(), "60", "increments were lost: runs overlapped");
    assert!(!lock_exists(&name), "the lock is left held");
}

#[test]
fn a_held_lock_fails_fast_or_after_the_wait() {
    let name = unique("held");
    let dir = scratch();
    let marker = dir.join("ran");
    let touch = ["touch", marker.to_str().unwrap()];
    let _: () = redis::cmd("SET")
        .arg(lock_key(&name))
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query(&mut redis())
        .unwrap();

    let started = Instant::now();
    let out = run(&[&["run", "-n", &name, "--"][..], &touch].concat());
    assert_eq!(code(&out), 1);
    assert!(started.elapsed() < Duration::from_secs(2), "-n waited");

    let out = run(&[&["run", "--nonblock", "-E", "42", &name, "--"][..], &touch].concat());
    assert_eq!(code(&out), 42);

    let started = Instant::now();
    let out = run(&[&["run", "-w", "300ms", &name, "--"][..], &touch].concat());
    let waited = started.elapsed();
    assert_eq!(code(&out), 1);
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "-w 300ms gave up after {waited:?}"
    );

    let out = run(&[
        &["run", "--wait", "100ms", "-E", "7", &name, "--"][..],
        &touch,
    ]
    .concat());
    assert_eq!(code(&out), 7);

    assert!(!marker.exists(), "the command ran without the lock");
    let holder: String = redis::cmd("GET")
        .arg(lock_key(&name))
        .query(&mut redis())
        .unwrap();
    assert_eq!(holder, "someone-else", "the holder's lock was touched");
    delete_lock(&name);
}

#[test]
fn the_exit_code_passes_through() {
    let name = unique("codes");
    for (args, expected) in [
        (vec!["--", "true"], 0),
        (vec!["-c", "exit 3"], 3),
        (vec!["--", "sh", "-c", "exit 255"], 255),
        (vec!["-c", "kill -KILL $$"], 137),
        (vec!["-c", "kill -TERM $$"], 143),
    ] {
        let out = run(&[&["run", &name][..], &args].concat());
        assert_eq!(code(&out), expected, "run {args:?}");
        assert!(!lock_exists(&name), "the lock is left held after {args:?}");
    }
}

#[test]
fn sigterm_reaches_the_whole_group_and_frees_the_lock() {
    let name = unique("sigterm");
    let dir = scratch();
    let pid_file = dir.join("pids");
    // A shell that spawned a sleeping grandchild.
    let script = r#"sleep 60 & echo "$$ $!" > "$PIDS"; wait"#;
    let child = redbell(&["run", &name, "-c", script])
        .env("PIDS", &pid_file)
        .spawn()
        .expect("redbell starts");
    let (shell, grandchild) = pids(&pid_file);
    assert!(lock_exists(&name));
    assert!(alive(grandchild));

    let signalled = Instant::now();
    kill("TERM", child.id());
    let freed = wait_until(
        Duration::from_secs(1),
        "the lock freed after SIGTERM",
        || !lock_exists(&name),
    );
    let out = finish(child, Duration::from_secs(10), "run after SIGTERM");
    assert_eq!(code(&out), 143, "the shell died of the forwarded SIGTERM");
    eprintln!(
        "lock freed {freed:?}, redbell gone {:?} after SIGTERM",
        signalled.elapsed()
    );
    // redbell reaps its group before exiting: nothing of it remains.
    let left = group_members(shell);
    assert!(left.is_empty(), "processes of the group survived: {left:?}");
    assert!(!alive(grandchild), "the grandchild survived");
}

#[test]
fn a_lost_lease_terminates_then_kills_the_group() {
    let name = unique("lost");
    let dir = scratch();
    let pid_file = dir.join("pids");
    let term_file = dir.join("term");
    // The shell notes SIGTERM and carries on; its grandchild ignores
    // SIGTERM altogether. Only SIGKILL ends them.
    let script = r#"trap 'echo term >> "$TERMS"' TERM
        (trap '' TERM; exec sleep 60) &
        echo "$$ $!" > "$PIDS"
        while :; do sleep 0.05; done"#;
    // --ttl 3s: the grace is at most a third of the lease.
    let child = redbell(&[
        "run",
        "--ttl",
        "3s",
        "--kill-grace",
        "700ms",
        &name,
        "-c",
        script,
    ])
    .env("PIDS", &pid_file)
    .env("TERMS", &term_file)
    .spawn()
    .expect("redbell starts");
    let (shell, grandchild) = pids(&pid_file);

    delete_lock(&name); // an outside DEL: the lease is lost
    let deleted = Instant::now();
    let out = finish(child, Duration::from_secs(20), "run with a lost lease");
    let took = deleted.elapsed();
    assert_eq!(code(&out), 75);
    assert!(
        std::fs::read_to_string(&term_file).is_ok_and(|t| t.contains("term")),
        "the command never got SIGTERM"
    );
    assert!(
        took >= Duration::from_millis(700),
        "SIGKILL came before --kill-grace: {took:?}"
    );
    assert!(stderr(&out).contains("lost the lease"), "no explanation");
    let left = group_members(shell);
    assert!(left.is_empty(), "processes of the group survived: {left:?}");
    assert!(!alive(grandchild), "the grandchild survived unlocked");
}

#[test]
fn a_lost_lease_stops_a_command_that_obeys_sigterm() {
    let name = unique("lost-obey");
    let child = redbell(&["run", "--ttl", "1s", &name, "--", "sleep", "60"])
        .spawn()
        .expect("redbell starts");
    wait_until(Duration::from_secs(20), "the lock is taken", || {
        lock_exists(&name)
    });
    thread::sleep(Duration::from_millis(100));
    delete_lock(&name);
    let deleted = Instant::now();
    let out = finish(child, Duration::from_secs(20), "run with a lost lease");
    assert_eq!(code(&out), 75);
    // Renewal every ttl/3 notices; SIGTERM ends `sleep` long before the
    // default 5 s grace.
    assert!(
        deleted.elapsed() < Duration::from_millis(4500),
        "no SIGTERM"
    );
    assert!(!lock_exists(&name));
}

#[test]
fn the_command_gets_name_token_and_increasing_fence() {
    let name = unique("env");
    let dir = scratch();
    let mut seen = Vec::new();
    for i in 0..3 {
        let file = dir.join(format!("env{i}"));
        let child = redbell(&[
            "run",
            "-v",
            &name,
            "-c",
            r#"echo "$REDBELL_NAME $REDBELL_TOKEN $REDBELL_FENCE" > "$OUT""#,
        ])
        .env("OUT", &file)
        .spawn()
        .expect("redbell starts");
        let out = finish(child, Duration::from_secs(60), "run env");
        assert_eq!(code(&out), 0);
        assert!(stderr(&out).contains("acquired"), "-v logs the acquire");
        let text = std::fs::read_to_string(&file).unwrap();
        let fields: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
        assert_eq!(fields.len(), 3, "{text:?}");
        assert_eq!(fields[0], name);
        assert!(fields[1].len() >= 16, "a token: {:?}", fields[1]);
        let fence: u64 = fields[2].parse().expect("REDBELL_FENCE is a number");
        seen.push((fields[1].clone(), fence));
    }
    for pair in seen.windows(2) {
        assert_ne!(pair[0].0, pair[1].0, "each acquisition has its own token");
        assert!(pair[1].1 > pair[0].1, "fences must increase: {seen:?}");
    }
}

#[test]
fn status_shows_the_holder_and_force_unlock_hands_over() {
    let name = unique("status");
    let free = unique("status-free");
    let dir = scratch();
    let token_file = dir.join("token");
    let marker = dir.join("second-ran");

    // Holder A: a 3 s lease (renewed every second).
    let holder = redbell(&[
        "run",
        "--ttl",
        "3s",
        &name,
        "-c",
        r#"echo "$REDBELL_TOKEN" > "$TOKEN"; exec sleep 60"#,
    ])
    .env("TOKEN", &token_file)
    .spawn()
    .expect("redbell starts");
    let token = wait_for_file(&token_file, Duration::from_secs(20))
        .trim()
        .to_owned();

    // Plain output: a header and one row per lock.
    let out = run(&["status", &name, &free]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("no row for the lock:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "held", "{row}");
    assert_eq!(cells[2], token, "{row}");
    let ttl: f64 = cells[3].trim_end_matches('s').parse().expect("a TTL");
    assert!(ttl > 0.0 && ttl <= 3.0, "TTL {ttl} is not within the lease");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&free) && l.contains("free")),
        "{text}"
    );

    // --json: one object per line.
    let lines = status_json(&[&name, &free]);
    assert_eq!(lines.len(), 2);
    let held = &lines[0];
    assert_eq!(held["name"], name);
    assert_eq!(held["held"], "true");
    assert_eq!(held["holder"], token);
    let ttl_ms: u64 = held["ttl_ms"].parse().expect("ttl_ms");
    assert!(ttl_ms > 0 && ttl_ms <= 3000, "ttl_ms {ttl_ms}");
    assert!(
        held["fence"].parse::<u64>().is_ok(),
        "fence {}",
        held["fence"]
    );
    assert_eq!(held["waiters"], "0");
    assert_eq!(lines[1]["held"], "false");
    assert_eq!(lines[1]["holder"], "null");

    // Waiter B queues for the lock.
    let waiter = redbell(&["run", &name, "--", "touch", marker.to_str().unwrap()])
        .spawn()
        .expect("redbell starts");
    wait_until(Duration::from_secs(20), "B shows as a waiter", || {
        status_json(&[&name])[0]["waiters"] != "0"
    });
    assert!(!marker.exists());

    // Break A's lock: B proceeds at once.
    let broken = Instant::now();
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&token), "prints what it removed");
    let handed = wait_until(Duration::from_secs(2), "B ran after the unlock", || {
        marker.exists()
    });
    eprintln!("B ran {handed:?} after unlock --force");
    let out = finish(waiter, Duration::from_secs(20), "waiter B");
    assert_eq!(code(&out), 0);

    // A learns at its next renewal that the lock is gone: SIGTERM, 75.
    let out = finish(holder, Duration::from_secs(20), "holder A");
    assert_eq!(code(&out), 75);
    assert!(broken.elapsed() < Duration::from_secs(10));

    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("not held"), "{}", stdout(&out));
}

#[test]
fn unreachable_redis_exits_69_with_one_line() {
    // A port nobody listens on.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let dir = scratch();
    let marker = dir.join("ran");
    for args in [
        vec!["run", "x", "--", "touch", marker.to_str().unwrap()],
        vec!["status", "x"],
        vec!["unlock", "--force", "x"],
    ] {
        let out = run(&[&["--url", &url][..], &args].concat());
        assert_eq!(code(&out), 69, "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "one line on stderr: {err:?}");
        assert!(err.starts_with("redbell: "), "{err:?}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"));
    }
    // REDIS_URL is read when --url is absent.
    let out = redbell(&["status", "x"])
        .env("REDIS_URL", &url)
        .output()
        .expect("redbell runs");
    assert_eq!(code(&out), 69);
    assert!(!marker.exists());
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["run", "x"],                                 // no command
        vec!["run", "a{b", "--", "true"],                 // invalid name
        vec!["run", "-n", "-w", "1s", "x", "--", "true"], // conflicting options
        vec!["run", "--ttl", "0s", "x", "--", "true"],
        vec!["run", "-w", "soon", "x", "--", "true"],
        vec!["run", "-c", "true", "x", "--", "true"], // both -c and argv
        vec!["unlock", "x"],                          // no --force
        vec!["status", "a}b"],
        vec!["status"],
    ] {
        let out = run(&args);
        assert_eq!(code(&out), 2, "{args:?}");
    }
}

#[test]
fn help_explains_options_exit_codes_and_environment() {
    let top = stdout(&run(&["--help"]));
    for needle in ["run", "status", "unlock", "REDIS_URL", "69", "75"] {
        assert!(top.contains(needle), "--help lacks {needle:?}:\n{top}");
    }
    let help = stdout(&run(&["run", "--help"]));
    for needle in [
        "--nonblock",
        "--wait",
        "--conflict-exit-code",
        "--ttl",
        "--kill-grace",
        "--max-hold",
        "--verbose",
        "guardian",
        "REDBELL_NAME",
        "REDBELL_TOKEN",
        "REDBELL_FENCE",
        "REDIS_URL",
        "128+N",
        "69",
        "75",
    ] {
        assert!(
            help.contains(needle),
            "run --help lacks {needle:?}:\n{help}"
        );
    }
    let help = stdout(&run(&["status", "--help"]));
    assert!(
        help.contains("--json") && help.contains("WAITERS"),
        "{help}"
    );
    let help = stdout(&run(&["unlock", "--help"]));
    assert!(help.contains("--force") && help.contains("69"), "{help}");
}

/// `run --permits 2`: six workers, three runs each, never more than two
/// commands at once (each counts the commands inside, by their marker
/// files); `status --semaphore` shows the holders; a zero or mismatched
/// count is a usage error.
#[test]
fn run_with_permits_runs_at_most_n_commands_at_once() {
    let name = unique("permits");
    let dir = scratch();
    let inside = dir.join("inside");
    std::fs::create_dir_all(&inside).unwrap();
    let log = dir.join("log");
    let snippet =
        r#"touch "$INSIDE/$$"; ls "$INSIDE" | wc -l >> "$LOG"; sleep 0.05; rm "$INSIDE/$$""#;
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (name, inside, log) = (name.clone(), inside.clone(), log.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let child = redbell(&["run", "--permits", "2", &name, "-c", snippet])
                        .env("INSIDE", &inside)
                        .env("LOG", &log)
                        .spawn()
                        .expect("redbell starts");
                    let out = finish(child, Duration::from_secs(60), "run --permits");
                    assert_eq!(code(&out), 0, "a run failed: {}", stderr(&out));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker panicked");
    }
    let counts: Vec<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 18);
    assert!(
        counts.iter().all(|&n| n <= 2),
        "more than 2 at once: {counts:?}"
    );

    let holder = redbell(&["run", "--permits", "2", &name, "--", "sleep", "30"])
        .spawn()
        .expect("redbell starts");
    let mut status = String::new();
    wait_until(Duration::from_secs(10), "the holder shows", || {
        status = stdout(&run(&["status", "--semaphore", "--json", &name]));
        status.contains("\"ttl_ms\"")
    });
    assert!(status.contains("\"permits\":2"), "{status}");
    let mismatch = run(&["run", "--permits", "3", "-n", &name, "--", "true"]);
    assert_eq!(code(&mismatch), 2, "{}", stderr(&mismatch));
    assert!(
        stderr(&mismatch).contains("2 permits"),
        "{}",
        stderr(&mismatch)
    );
    kill("TERM", holder.id());
    let out = finish(holder, Duration::from_secs(30), "the holder");
    assert_ne!(code(&out), 0);
    assert_eq!(
        code(&run(&["run", "--permits", "0", &name, "--", "true"])),
        2
    );
}
