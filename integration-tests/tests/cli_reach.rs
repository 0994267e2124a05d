//! The CLI on real deployments: `--cluster`, `--sentinel --master` and
//! `--prefix`; `run` without `--`; `run -s`/`-x` (the read-write lock) and
//! `--fair`; `status` of every kind of lock with the holder's host:pid, and
//! `unlock --force` of fair and read-write locks.
//!
//! Needs `REDIS_URL` (set by `make test`) and the binary built first
//! (`make test` does). The cluster and sentinel tests start topologies of
//! their own on free ports. Timing bounds are generous: the tests run on
//! small, busy machines.

use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::Duration;

use redbell_integration_tests::cli::{
    code, finish, kill, run, scratch, spawn, stdout, wait_for_file, wait_until,
};
use redbell_integration_tests::cluster::{self, Cluster, slot_of};
use redbell_integration_tests::sentinel::{MASTER, Topology};
use redbell_integration_tests::{lock_key, redis_url};
use serde_json::Value;

/// A name no other test uses: `reach-what-<uuid>`.
fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("reach-{what}"))
}

/// `redbell [GLOBAL...] status --json NAME`: the lock's JSON object.
fn status(global: &[&str], name: &str) -> Value {
    let out = run(&[global, &["status", "--json", name]].concat());
    assert_eq!(code(&out), 0, "status failed");
    let text = stdout(&out);
    let mut lines = text.lines();
    let line = lines.next().expect("one line");
    assert!(lines.next().is_none(), "one line per lock: {text}");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// The `host:pid` `redbell run` records for its hold.
fn owner_of(child: &Child) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("the host name");
    format!("{}:{}", host.trim(), child.id())
}

/// A holder that writes its token to `token` and sleeps until killed.
fn holder(args: &[&str], token: &Path) -> (Child, String) {
    let script = [
        r#"echo "$REDBELL_TOKEN" > "#,
        &shell_quote(token),
        "; exec sleep 60",
    ]
    .concat();
    let child = spawn(&[args, &["-c", &script]].concat());
    let token = wait_for_file(token, Duration::from_secs(30))
        .trim()
        .to_owned();
    (child, token)
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display())
}

fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("{url} is reachable: {e}"))
}

fn raw() -> redis::Connection {
    connection(&redis_url())
}

fn exists(key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut raw())
        .expect("EXISTS")
        == 1
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_run_and_status() {
    let cluster = Cluster::start().await;
    let nodes = cluster.urls().join(",");
    let global = ["--cluster", nodes.as_str()];
    let name = unique("cluster");
    let dir = scratch();
    let token_file = dir.join("token");

    let (child, token) = holder(
        &[&global[..], &["run", "--ttl", "6s", &name]].concat(),
        &token_file,
    );
    // The lock lives on the primary that owns its slot.
    let primary = cluster.owner(slot_of(&name)).await;
    assert_eq!(
        cluster::get(primary, &lock_key(&name)).await.as_deref(),
        Some(token.as_str()),
        "the lock key on its shard's primary"
    );
    let s = status(&global, &name);
    assert_eq!(s["held"], true, "{s}");
    assert_eq!(s["kind"], "mutex", "{s}");
    assert_eq!(s["holder"], token.as_str(), "{s}");
    assert_eq!(s["owner"], owner_of(&child).as_str(), "{s}");
    let ttl = s["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl > 0 && ttl <= 6000, "{s}");

    // The table too, through a node given alone.
    let first = &cluster.urls()[0];
    let out = run(&["--cluster", first, "status", &name]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&token), "{}", stdout(&out));

    // SIGTERM: the command dies, the lock is released on the cluster.
    kill("TERM", child.id());
    let out = finish(child, Duration::from_secs(30), "cluster holder");
    assert_eq!(code(&out), 143);
    assert_eq!(cluster::get(primary, &lock_key(&name)).await, None);
    let s = status(&global, &name);
    assert_eq!(s["held"], false, "{s}");
    assert_eq!(s["owner"], Value::Null, "{s}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinel_run_and_status() {
    let topo = Topology::start().await;
    let sentinels = topo.sentinel_urls().join(",");
    let global = ["--sentinel", sentinels.as_str(), "--master", MASTER];
    let name = unique("sentinel");
    let dir = scratch();

    let (child, token) = holder(
        &[&global[..], &["run", "--ttl", "6s", &name]].concat(),
        &dir.join("token"),
    );
    let on_primary: Option<String> = redis::cmd("GET")
        .arg(lock_key(&name))
        .query(&mut connection(&topo.primary_url()))
        .expect("GET on the primary");
    assert_eq!(
        on_primary.as_deref(),
        Some(token.as_str()),
        "the lock key on the primary the sentinels name"
    );
    let s = status(&global, &name);
    assert_eq!(s["holder"], token.as_str(), "{s}");
    assert_eq!(s["owner"], owner_of(&child).as_str(), "{s}");

    let out = run(&[&global[..], &["run", "-n", &name, "true"]].concat());
    assert_eq!(code(&out), 1, "-n on the held lock");

    let out = run(&[&global[..], &["unlock", "--force", &name]].concat());
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&token), "{}", stdout(&out));
    let out = finish(child, Duration::from_secs(30), "sentinel holder");
    assert_eq!(code(&out), 75, "the broken holder learns of it");
}

/// `redbell run` waiting through a primary SIGKILL, its park ending before
/// the failover: its lock attempt is refused and it exits 69 (Redis could
/// not be reached), once its background work is done, within a second of
/// the sentinels naming the new primary. A caller that retries then gets the
/// lock there at once.
///
/// Before, it exited about 2 s after the failover: a release of the refused
/// attempt (which never reached Redis) and the pass-on of its queue entry
/// were retried on their timer (1 s, then 2 s apart), not when the client
/// moved to the new primary. In a Sentinel soak the lock sat free 5.4 s
/// across a holder's SIGKILL followed by a primary SIGKILL (bound 4.9 s).
#[tokio::test(flavor = "multi_thread")]
async fn sentinel_run_waiting_through_a_primary_kill_exits_with_the_failover() {
    let topo = Topology::start().await;
    let sentinels = topo.sentinel_urls().join(",");
    let global = ["--sentinel", sentinels.as_str(), "--master", MASTER];
    let name = unique("sentinel-kill");
    // A crashed holder's key: the waiter parks on its PTTL, which ends
    // after the kill and before the failover (down-after 1 s).
    let _: () = redis::cmd("SET")
        .arg(lock_key(&name))
        .arg("m0123456789abcdef0123456789abcdef")
        .arg("PX")
        .arg(1500)
        .query(&mut connection(&topo.primary_url()))
        .expect("SET the crashed holder's key");
    let set = std::time::Instant::now();
    let waiter = spawn(&[&global[..], &["run", "--ttl", "1500ms", &name, "true"]].concat());
    thread::sleep(Duration::from_millis(1000).saturating_sub(set.elapsed()));
    topo.kill_primary().await;
    let failover = topo.wait_for_failover().await;
    let named = std::time::Instant::now();
    let out = finish(waiter, Duration::from_secs(30), "waiter through the kill");
    let after = named.elapsed();
    eprintln!(
        "sentinels named the new primary {failover:?} after the kill; the waiter exited {after:?} later"
    );
    assert_eq!(code(&out), 69, "the waiter's attempt met the dead primary");
    assert!(
        after < Duration::from_secs(1),
        "the waiter exited {after:?} after the failover: its background work waited for its \
         retry timer"
    );
    let out = run(&[&global[..], &["run", "-n", &name, "true"]].concat());
    assert_eq!(code(&out), 0, "the lock on the new primary");
}

#[test]
fn prefix_names_other_keys() {
    let name = unique("prefix");
    let prefix = unique("app");
    let dir = scratch();
    let global = ["--prefix", prefix.as_str()];
    let (child, token) = holder(
        &[&global[..], &["run", "--ttl", "6s", &name]].concat(),
        &dir.join("token"),
    );
    let key = format!("{prefix}:{{{name}}}");
    assert!(exists(&key), "{key} holds the lock");
    assert!(!exists(&lock_key(&name)), "the default prefix is untouched");
    assert_eq!(status(&global, &name)["holder"], token.as_str());
    assert_eq!(
        status(&[], &name)["held"],
        false,
        "another prefix, another lock"
    );
    // Another prefix does not exclude.
    let out = run(&["run", "-n", &name, "true"]);
    assert_eq!(code(&out), 0);

    let out = run(&[&global[..], &["unlock", "--force", &name]].concat());
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&token), "{}", stdout(&out));
    assert!(!exists(&key));
    let out = finish(child, Duration::from_secs(30), "prefixed holder");
    assert_eq!(code(&out), 75);

    // An invalid prefix is a usage error.
    let out = run(&["--prefix", "a{b", "status", &name]);
    assert_eq!(code(&out), 2);
}

#[test]
fn run_takes_the_command_without_double_dash() {
    let name = unique("argv");
    let out = run(&["run", &name, "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3);
    // Options after the command's first word are the command's.
    let out = run(&["run", &name, "printf", "%s|", "-n", "--ttl", "x", "--"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "-n|--ttl|x|--|");
    // `--` still works, and options still go before NAME.
    let out = run(&[
        "run", "-n", "--ttl", "5s", &name, "--", "printf", "%s|", "-v",
    ]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "-v|");
    assert!(!exists(&lock_key(&name)), "released");
}

#[test]
fn shared_readers_hold_together_and_exclude_a_writer() {
    let name = unique("rw");
    let dir = scratch();
    let writer_ran = dir.join("writer-ran");
    // Each reader announces itself, then holds until the other did too (at
    // most 30 s): both are in at once, or neither finishes.
    let reader = |me: &str, other: &str| {
        let script = format!(
            "touch '{d}/{me}'; i=0; while [ ! -e '{d}/{other}' ]; do \
             i=$((i+1)); [ $i -gt 3000 ] && exit 9; sleep 0.01; done; \
             while [ ! -e '{d}/go' ]; do sleep 0.01; done",
            d = dir.display()
        );
        spawn(&["run", "-s", "--ttl", "9s", &name, "-c", &script])
    };
    let a = reader("a", "b");
    let b = reader("b", "a");
    wait_until(Duration::from_secs(30), "both readers in", || {
        dir.join("a").exists() && dir.join("b").exists()
    });

    // status: a read-write lock with two readers, each with its host:pid.
    let s = status(&[], &name);
    assert_eq!(s["kind"], "rwlock", "{s}");
    assert_eq!(s["held"], true, "{s}");
    assert_eq!(s["holder"], Value::Null, "no writer: {s}");
    let readers = s["readers"].as_array().expect("readers");
    assert_eq!(readers.len(), 2, "{s}");
    let mut owners: Vec<&str> = readers
        .iter()
        .map(|r| r["owner"].as_str().unwrap())
        .collect();
    owners.sort_unstable();
    let mut expected = vec![owner_of(&a), owner_of(&b)];
    expected.sort_unstable();
    assert_eq!(owners, expected, "{s}");
    for r in readers {
        assert!(r["token"].as_str().unwrap().starts_with('r'), "{s}");
        assert!(r["ttl_ms"].as_u64().unwrap() <= 9000, "{s}");
    }
    let out = run(&["status", &name]);
    let shared = stdout(&out)
        .lines()
        .filter(|l| l.starts_with(&name) && l.contains("shared") && l.contains("rwlock"))
        .count();
    assert_eq!(shared, 2, "one line per reader:\n{}", stdout(&out));

    // A writer is excluded while they hold.
    let out = run(&["run", "-x", "-n", &name, "true"]);
    assert_eq!(code(&out), 1, "-x -n while readers hold");
    let writer = spawn(&["run", "-x", &name, "touch", writer_ran.to_str().unwrap()]);
    wait_until(Duration::from_secs(30), "the writer's intent shows", || {
        status(&[], &name)["waiters"] == 1
    });
    // A waiting writer holds new readers back (writer preference).
    let out = run(&["run", "-s", "-n", &name, "true"]);
    assert_eq!(code(&out), 1, "a new reader while a writer waits");
    assert!(!writer_ran.exists(), "the writer ran beside readers");

    std::fs::write(dir.join("go"), "").unwrap();
    for (child, what) in [(a, "reader a"), (b, "reader b")] {
        assert_eq!(code(&finish(child, Duration::from_secs(30), what)), 0);
    }
    assert_eq!(code(&finish(writer, Duration::from_secs(30), "writer")), 0);
    assert!(writer_ran.exists());

    // A writer excludes readers, and shows as the holder.
    let (w, token) = holder(&["run", "-x", "--ttl", "9s", &name], &dir.join("wtoken"));
    let s = status(&[], &name);
    assert_eq!(s["holder"], token.as_str(), "{s}");
    assert_eq!(s["owner"], owner_of(&w).as_str(), "{s}");
    assert_eq!(s["kind"], "rwlock", "{s}");
    let out = run(&["run", "-s", "-n", &name, "true"]);
    assert_eq!(code(&out), 1, "-s -n while a writer holds");
    // A name is one kind of lock: the plain mutex is refused, as a usage
    // error (2, a kind conflict), not as "held elsewhere" (1).
    let out = run(&["run", "-n", &name, "true"]);
    assert_eq!(code(&out), 2);
    kill("TERM", w.id());
    assert_eq!(code(&finish(w, Duration::from_secs(30), "writer")), 143);
    assert_eq!(status(&[], &name)["held"], false);
}

#[test]
fn fair_runs_take_turns_in_arrival_order() {
    let name = unique("fair");
    let dir = scratch();
    let order = dir.join("order");
    let (first, token) = holder(&["run", "--fair", "--ttl", "9s", &name], &dir.join("token"));
    let s = status(&[], &name);
    assert_eq!(s["kind"], "fair", "{s}");
    assert_eq!(s["holder"], token.as_str(), "{s}");
    assert!(token.starts_with('q'), "{token}");
    assert_eq!(s["owner"], owner_of(&first).as_str(), "{s}");

    // Three waiters queue one after the other.
    let mut waiters = Vec::new();
    for i in 1..=3 {
        let script = format!("echo {i} >> '{}'", order.display());
        waiters.push(spawn(&["run", "--fair", &name, "-c", &script]));
        wait_until(Duration::from_secs(30), "the waiter is queued", || {
            status(&[], &name)["waiters"] == i
        });
    }
    kill("TERM", first.id());
    assert_eq!(code(&finish(first, Duration::from_secs(30), "first")), 143);
    for (i, w) in waiters.into_iter().enumerate() {
        assert_eq!(
            code(&finish(w, Duration::from_secs(30), &format!("waiter {i}"))),
            0
        );
    }
    let text = std::fs::read_to_string(&order).unwrap();
    assert_eq!(text, "1\n2\n3\n", "the turns follow arrival");
}

#[test]
fn unlock_force_grants_a_fair_lock_to_its_next_waiter() {
    let name = unique("fair-break");
    let dir = scratch();
    let marker = dir.join("second-ran");
    // A 9 s lease: the queued waiter parks for the holder's PTTL, so a
    // break that merely deleted the key would leave it waiting seconds.
    let (first, token) = holder(&["run", "--fair", "--ttl", "9s", &name], &dir.join("token"));
    let second = spawn(&["run", "--fair", &name, "touch", marker.to_str().unwrap()]);
    wait_until(Duration::from_secs(30), "the waiter is queued", || {
        status(&[], &name)["waiters"] == 1
    });
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.contains(&token) && text.contains("fair"), "{text}");
    let took = wait_until(Duration::from_secs(3), "the next waiter ran", || {
        marker.exists()
    });
    eprintln!("the next waiter ran {took:?} after unlock --force");
    assert_eq!(code(&finish(second, Duration::from_secs(30), "second")), 0);
    // The broken holder learns at its next renewal: SIGTERM, 75.
    assert_eq!(code(&finish(first, Duration::from_secs(30), "first")), 75);
    let out = run(&["unlock", "--force", &name]);
    assert!(stdout(&out).contains("not held"), "{}", stdout(&out));
}

#[test]
fn unlock_force_breaks_a_read_write_lock() {
    let name = unique("rw-break");
    let dir = scratch();
    let marker = dir.join("writer-ran");
    let (r1, t1) = holder(&["run", "-s", "--ttl", "9s", &name], &dir.join("t1"));
    let (r2, t2) = holder(&["run", "-s", "--ttl", "9s", &name], &dir.join("t2"));
    let writer = spawn(&["run", "-x", &name, "touch", marker.to_str().unwrap()]);
    wait_until(Duration::from_secs(30), "the writer waits", || {
        status(&[], &name)["waiters"] == 1
    });
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(
        text.contains(&t1) && text.contains(&t2),
        "both readers: {text}"
    );
    // The waiting writer is woken (its park would last the readers' lease).
    let took = wait_until(Duration::from_secs(3), "the writer ran", || marker.exists());
    eprintln!("the writer ran {took:?} after unlock --force");
    assert_eq!(code(&finish(writer, Duration::from_secs(30), "writer")), 0);
    for (r, what) in [(r1, "reader 1"), (r2, "reader 2")] {
        assert_eq!(code(&finish(r, Duration::from_secs(30), what)), 75);
    }

    // A writer is broken too; a waiting reader then gets in.
    let reader_ran = dir.join("reader-ran");
    let (w, token) = holder(&["run", "-x", "--ttl", "9s", &name], &dir.join("w"));
    let reader = spawn(&["run", "-s", &name, "touch", reader_ran.to_str().unwrap()]);
    thread::sleep(Duration::from_millis(300));
    assert!(!reader_ran.exists(), "a reader ran beside the writer");
    let out = run(&["unlock", "--force", &name]);
    assert!(stdout(&out).contains(&token), "{}", stdout(&out));
    wait_until(Duration::from_secs(3), "the reader ran", || {
        reader_ran.exists()
    });
    assert_eq!(code(&finish(reader, Duration::from_secs(30), "reader")), 0);
    assert_eq!(code(&finish(w, Duration::from_secs(30), "writer")), 75);
}

#[test]
fn reach_options_are_checked_and_documented() {
    for args in [
        vec!["--master", MASTER, "status", "x"], // no --sentinel
        vec!["--sentinel", "redis://127.0.0.1:1", "status", "x"], // no --master
        vec![
            "--cluster",
            "redis://127.0.0.1:1",
            "--sentinel",
            "redis://127.0.0.1:2",
            "--master",
            MASTER,
            "status",
            "x",
        ],
        vec!["run", "-s", "-x", "x", "true"],
        vec!["run", "-s", "--fair", "x", "true"],
        vec!["run", "-x", "--fair", "x", "true"],
    ] {
        let out = run(&args);
        assert_eq!(code(&out), 2, "{args:?}");
    }
    let top = stdout(&run(&["--help"]));
    for needle in ["--cluster", "--sentinel", "--master", "--prefix", "--url"] {
        assert!(top.contains(needle), "--help lacks {needle:?}:\n{top}");
    }
    let help = stdout(&run(&["run", "--help"]));
    for needle in ["--shared", "--exclusive", "--fair", "--cluster"] {
        assert!(
            help.contains(needle),
            "run --help lacks {needle:?}:\n{help}"
        );
    }
    let help = stdout(&run(&["status", "--help"]));
    assert!(help.contains("KIND") && help.contains("OWNER"), "{help}");
}
