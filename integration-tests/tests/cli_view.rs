//! What the CLI shows an operator (issue 31): every kind in `status`,
//! `status --json` and `top` (a semaphore held by `run --permits`, an
//! election led by `elect`), `unlock --force` saying whether a waiter was
//! there to wake, `elect NAME CMD...` without `--`, help wrapped and `-h`
//! without the Redis options, a usage line that does not show `--url` as
//! required, and tables aligned by display width.
//!
//! Through the real `redbell` binary against the shared server
//! (`REDIS_URL`).

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use redbell_integration_tests::cli::{
    code, finish, kill, run, scratch, spawn, stderr, stdout, wait_for_file, wait_until,
};
use serde_json::Value;

/// A name no other test uses: `view-what-<uuid>`.
fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("view-{what}"))
}

/// `redbell ARGS... -c SCRIPT` where SCRIPT writes `$var` to `file` and
/// sleeps until killed; what it wrote.
fn holding(args: &[&str], var: &str, file: &Path) -> (Child, String) {
    let script = format!("echo \"${var}\" > '{}'; exec sleep 60", file.display());
    let child = spawn(&[args, &["sh", "-c", &script]].concat());
    let text = wait_for_file(file, Duration::from_secs(30));
    (child, text.trim().to_owned())
}

/// Ends a holder with SIGTERM.
fn end(child: Child, what: &str) {
    kill("TERM", child.id());
    finish(child, Duration::from_secs(30), what);
}

/// `status --json NAME`: the lock's object.
fn status_json(name: &str) -> Value {
    let out = run(&["status", "--json", name]);
    assert_eq!(code(&out), 0, "status --json: {}", stderr(&out));
    serde_json::from_str(stdout(&out).trim()).expect("one JSON line")
}

/// The line of `text` that starts with `name`.
fn line_of<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
}

#[test]
fn a_held_semaphore_shows_in_status_and_top() {
    let name = unique("sem");
    let dir = scratch();
    let (child, token) = holding(
        &["run", "--permits", "2", "--ttl", "9s", &name],
        "REDBELL_TOKEN",
        &dir.join("token"),
    );

    let out = run(&["status", &name]);
    assert_eq!(code(&out), 0);
    let line = line_of(&stdout(&out), &name).to_owned();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells.get(1),
        Some(&"held"),
        "STATE of a held semaphore: {line}"
    );
    assert!(line.contains("1/2 permits"), "holders/permits: {line}");
    assert!(cells.contains(&"semaphore"), "KIND: {line}");

    let s = status_json(&name);
    assert_eq!(s["kind"], "semaphore", "{s}");
    assert_eq!(s["held"], true, "{s}");
    assert_eq!(s["permits"], 2, "{s}");
    assert_eq!(s["holders"][0]["token"], token.as_str(), "{s}");
    let ttl = s["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl > 0 && ttl <= 9000, "{s}");

    // top, as a named lock and as one found by SCAN under the prefix.
    let out = run(&["top", "--once", &name]);
    assert_eq!(code(&out), 0);
    let line = line_of(&stdout(&out), &name).to_owned();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells.get(1..3),
        Some(&["semaphore", "1/2"][..]),
        "top: {line}"
    );
    let out = run(&["top", "--once", "--json", "--match", &name]);
    assert_eq!(code(&out), 0);
    let frame: Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    let lock = &frame["locks"][0];
    assert_eq!(lock["name"], name.as_str(), "{frame}");
    assert_eq!(lock["kind"], "semaphore", "{frame}");
    assert_eq!(lock["permits_held"], 1, "{frame}");
    assert_eq!(lock["permits"], 2, "{frame}");

    // A semaphore is not broken by unlock --force, and says so.
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 1, "unlock --force of a semaphore");
    assert!(
        stdout(&out).contains("a semaphore (1/2 permits)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(status_json(&name)["held"], true, "the permit is still held");
    end(child, "semaphore holder");
    let s = status_json(&name);
    assert_eq!(s["held"], false, "released: {s}");
}

#[test]
fn an_election_takes_its_command_without_dashes_and_shows_its_leader() {
    let name = unique("elect");
    let dir = scratch();
    // `elect NAME sh -c ...`, as `run` takes it.
    let (child, term) = holding(
        &["elect", "--value", "web1:8080", "--ttl", "9s", &name],
        "REDBELL_TERM",
        &dir.join("term"),
    );
    assert!(term.parse::<u64>().is_ok(), "REDBELL_TERM {term:?}");

    let s = status_json(&name);
    assert_eq!(s["kind"], "election", "{s}");
    assert_eq!(s["leader"]["value"], "web1:8080", "{s}");
    assert_eq!(s["leader"]["term"].to_string(), term, "{s}");
    let out = run(&["status", &name]);
    let line = line_of(&stdout(&out), &name).to_owned();
    assert!(line.contains(&format!("web1:8080 (term {term})")), "{line}");
    let out = run(&["top", "--once", &name]);
    let line = line_of(&stdout(&out), &name).to_owned();
    assert_eq!(
        line.split_whitespace().nth(1),
        Some("election"),
        "top: {line}"
    );
    end(child, "leader");
}

#[test]
fn unlock_force_says_whether_a_waiter_was_woken() {
    let name = unique("unlock");
    let dir = scratch();
    let (first, _) = holding(
        &["run", "--ttl", "9s", &name],
        "REDBELL_TOKEN",
        &dir.join("first"),
    );
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    let said = stdout(&out);
    assert!(
        said.contains("no waiter was queued") && !said.contains("woken"),
        "nobody waited: {said}"
    );
    assert_eq!(code(&finish(first, Duration::from_secs(30), "first")), 75);

    // A holder and a waiter: the waiter is woken and runs.
    let (holder, _) = holding(
        &["run", "--ttl", "9s", &name],
        "REDBELL_TOKEN",
        &dir.join("second"),
    );
    let next = dir.join("next");
    let script = format!("echo \"$REDBELL_TOKEN\" > '{}'", next.display());
    let waiter = spawn(&["run", "--ttl", "9s", &name, "-c", &script]);
    wait_until(Duration::from_secs(30), "the waiter queued", || {
        status_json(&name)["waiters"] == 1
    });
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    let said = stdout(&out);
    assert!(
        said.contains("1 waiter was queued: the next woken"),
        "{said}"
    );
    wait_for_file(&next, Duration::from_secs(10));
    assert_eq!(code(&finish(waiter, Duration::from_secs(30), "waiter")), 0);
    assert_eq!(code(&finish(holder, Duration::from_secs(30), "holder")), 75);
}

#[test]
fn help_is_wrapped_short_and_its_usage_line_honest() {
    let long = stdout(&run(&["run", "--help"]));
    let widest = long.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    eprintln!("run --help: widest line {widest} characters");
    assert!(
        widest <= 100,
        "run --help not wrapped: a line of {widest} characters"
    );
    assert!(
        long.contains("--tls-ca") && long.contains("REDBELL_URL"),
        "{long}"
    );

    let short = stdout(&run(&["run", "-h"]));
    for option in [
        "--url <",
        "--tls-ca <",
        "--cluster <",
        "--master <",
        "--prefix <",
    ] {
        assert!(
            !short.contains(option),
            "`run -h` repeats {option}...:\n{short}"
        );
    }
    assert!(
        short.contains("see --help"),
        "`run -h` does not point to them:\n{short}"
    );

    // REDIS_URL is set (by the helper): still not shown as a required flag.
    let out = run(&["status"]);
    assert_eq!(code(&out), 2);
    let usage = stderr(&out);
    assert!(!usage.contains("--url"), "usage line shows --url: {usage}");
}

/// Display columns of `text`: two for a CJK ideograph or a full-width form.
fn columns(text: &str) -> usize {
    text.chars()
        .map(|c| match u32::from(c) {
            0x1100..=0x115F
            | 0x2E80..=0xA4CF
            | 0xAC00..=0xD7A3
            | 0xF900..=0xFAFF
            | 0xFF00..=0xFF60 => 2,
            _ => 1,
        })
        .sum()
}

#[test]
fn tables_align_wide_names() {
    let wide = unique("锁锁锁锁");
    let narrow = unique("lock");
    let dir = scratch();
    let (a, _) = holding(
        &["run", "--ttl", "9s", &wide],
        "REDBELL_TOKEN",
        &dir.join("a"),
    );
    let (b, _) = holding(
        &["run", "--ttl", "9s", &narrow],
        "REDBELL_TOKEN",
        &dir.join("b"),
    );
    let out = run(&["status", &wide, &narrow]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    // Where the STATE column starts, in display columns, on each line.
    let state_at = |line: &str| {
        let at = line.find("  held").map(|i| i + 2).expect("a held row");
        columns(&line[..at])
    };
    let (w, n) = (
        state_at(line_of(&text, &wide)),
        state_at(line_of(&text, &narrow)),
    );
    assert_eq!(
        w, n,
        "STATE starts at column {w} after the wide name, {n} after the other:\n{text}"
    );
    end(a, "wide");
    end(b, "narrow");
}
