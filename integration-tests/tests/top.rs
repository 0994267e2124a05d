//! `redbell top` end to end: the built binary against real servers.
//!
//! - On the shared test server, locks of three kinds held with waiters
//!   under a key prefix of the test's own: `top --once --json` shows each
//!   one's kind, holder and waiters.
//! - On a private server (exact command counts): the commands each refresh
//!   sends stay within the bound the help text states (`--max-scans` SCAN
//!   calls and `--max-locks` inspect calls), counted by the server
//!   (`INFO commandstats`), and the capped reads rotate over every lock.
//!
//! Needs `REDIS_URL` (set by `make test`) and the binary built first
//! (`cargo build -p redbell-cli`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::cli::{code, finish, redbell, run, stderr, stdout};
use redbell_integration_tests::{
    LONG, PrivateRedis, commandstats, eventually, raw, redis_url, reset_stats, unique,
};
use serde_json::Value;

/// A client whose keys live under `prefix`.
async fn client_with_prefix(url: &str, prefix: &str) -> Client {
    Client::builder(url)
        .prefix(prefix)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Waits until `redbell status`'s view of `name` (through `c`) has
/// `waiters` waiters.
async fn wait_for_waiters(c: &Client, name: &str, waiters: u64) {
    let queued = eventually(Duration::from_secs(10), || async {
        c.inspect(name).await.map(|i| i.waiters).unwrap_or(0) == waiters
    })
    .await;
    assert!(queued, "{name}: {waiters} waiters did not queue");
}

/// The `locks` of one `--json` document, by name.
fn locks(doc: &Value) -> HashMap<String, Value> {
    doc["locks"]
        .as_array()
        .expect("a locks array")
        .iter()
        .map(|l| (l["name"].as_str().expect("a name").to_owned(), l.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_json_shows_kind_holder_and_waiters() {
    let url = redis_url();
    let prefix = unique("top");
    let holder = client_with_prefix(&url, &prefix).await;
    let waiting = client_with_prefix(&url, &prefix).await;

    // A mutex held, two waiters queued (of two clients: a client queues
    // one waiter per lock at a time).
    let mutex = holder.mutex("jobs").with_lease(LONG).lock().await.unwrap();
    let mut tasks = Vec::new();
    let waiting_too = client_with_prefix(&url, &prefix).await;
    for c in [&waiting, &waiting_too] {
        let m = c.mutex("jobs").with_lease(LONG);
        tasks.push(tokio::spawn(async move { m.lock().await.map(drop) }));
    }
    // A fair mutex held, one waiter queued.
    let fair = holder
        .fair_mutex("turns")
        .with_lease(LONG)
        .lock()
        .await
        .unwrap();
    {
        let f = waiting.fair_mutex("turns").with_lease(LONG);
        tasks.push(tokio::spawn(async move { f.lock().await.map(drop) }));
    }
    // A read-write lock read by two, a writer waiting.
    let r1 = holder
        .rwlock("catalog")
        .with_lease(LONG)
        .read()
        .await
        .unwrap();
    let r2 = holder
        .rwlock("catalog")
        .with_lease(LONG)
        .read()
        .await
        .unwrap();
    {
        let w = waiting.rwlock("catalog").with_lease(LONG);
        tasks.push(tokio::spawn(async move { w.write().await.map(drop) }));
    }
    // A lock used once and free now.
    holder
        .mutex("idle")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    wait_for_waiters(&holder, "jobs", 2).await;
    wait_for_waiters(&holder, "turns", 1).await;
    wait_for_waiters(&holder, "catalog", 1).await;

    // A full SCAN pass of the shared server: every key of the test's prefix.
    let args = [
        "--prefix",
        &prefix,
        "top",
        "--once",
        "--json",
        "--max-scans",
        "100000",
    ];
    let child = redbell(&args).spawn().expect("redbell top starts");
    let out = tokio::task::spawn_blocking(move || {
        finish(child, Duration::from_secs(60), "redbell top --once --json")
    })
    .await
    .unwrap();
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one document: {text}");
    let doc: Value = serde_json::from_str(text.trim()).expect("JSON");
    let locks = locks(&doc);
    assert_eq!(locks.len(), 4, "{text}");
    let jobs = &locks["jobs"];
    assert_eq!(jobs["kind"], "mutex", "{jobs}");
    assert_eq!(jobs["holder"], mutex.token(), "{jobs}");
    assert_eq!(jobs["waiters"], 2, "{jobs}");
    assert_eq!(jobs["fence"], mutex.fence(), "{jobs}");
    assert!(jobs["ttl_ms"].as_u64().unwrap() > 20_000, "{jobs}");
    assert_eq!(jobs["handoffs_per_s"], Value::Null, "one read: no rate");
    let turns = &locks["turns"];
    assert_eq!(turns["kind"], "fair", "{turns}");
    assert_eq!(turns["holder"], fair.token(), "{turns}");
    assert_eq!(turns["waiters"], 1, "{turns}");
    let catalog = &locks["catalog"];
    assert_eq!(catalog["kind"], "rwlock", "{catalog}");
    assert_eq!(catalog["holder"], Value::Null, "{catalog}");
    assert_eq!(catalog["readers"], 2, "{catalog}");
    assert_eq!(catalog["waiters"], 1, "{catalog}");
    let idle = &locks["idle"];
    assert_eq!(idle["held"], false, "{idle}");
    assert_eq!(idle["waiters"], 0, "{idle}");
    // Busiest first: the mutex with two waiters leads, the idle lock is last.
    let order: Vec<&str> = doc["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(order.first(), Some(&"jobs"), "{order:?}");
    assert_eq!(order.last(), Some(&"idle"), "{order:?}");
    assert_eq!(doc["commands"]["inspect"], 4, "{doc}");

    mutex.unlock().await.unwrap();
    fair.unlock().await.unwrap();
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every waiter got its turn")
            .unwrap()
            .unwrap();
    }
}

/// `top` without names, 30 locks, at most 2 SCANs of COUNT 10 and 10
/// inspect calls per refresh: the server executed no more SCAN and script
/// calls than the refreshes printed allow (one refresh more, cut short by
/// the kill), each document reports within the bound, and the capped reads
/// rotate over every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_commands_per_refresh_stay_within_the_stated_bound() {
    let server = PrivateRedis::start().await;
    let url = server.url();
    let prefix = unique("top-bound");
    let c = client_with_prefix(&url, &prefix).await;
    let mut names = HashSet::new();
    for i in 0..30 {
        let name = format!("lock{i:02}");
        c.mutex(&name).lock().await.unwrap().unlock().await.unwrap();
        names.insert(name);
    }
    let held = c.mutex("lock00").with_lease(LONG).lock().await.unwrap();
    // The inspect script loaded, so no refresh needs a second call per lock.
    c.inspect("lock00").await.unwrap();
    let mut admin = raw(&url).await;
    reset_stats(&mut admin).await;

    let (max_scans, max_locks) = (2u64, 10u64);
    let mut cmd = redbell(&[
        "--prefix",
        &prefix,
        "top",
        "--json",
        "--limit",
        "100",
        "--max-scans",
        &max_scans.to_string(),
        "--scan-count",
        "10",
        "--max-locks",
        &max_locks.to_string(),
        "--interval",
        "250ms",
    ]);
    cmd.env("REDIS_URL", &url);
    let child = cmd.spawn().expect("redbell top starts");
    let pid = child.id();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    redbell_integration_tests::cli::kill("TERM", pid);
    let out = tokio::task::spawn_blocking(move || {
        finish(child, Duration::from_secs(10), "redbell top --json")
    })
    .await
    .unwrap();
    let stats = commandstats(&mut admin).await;
    let docs: Vec<Value> = stdout(&out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    let refreshes = docs.len() as u64;
    assert!(refreshes >= 4, "only {refreshes} refreshes in 2.5 s");

    let mut seen = HashSet::new();
    let (mut scans, mut inspects) = (0, 0);
    for doc in &docs {
        let (s, i) = (
            doc["commands"]["scan"].as_u64().unwrap(),
            doc["commands"]["inspect"].as_u64().unwrap(),
        );
        assert!(s <= max_scans && i <= max_locks, "{doc}");
        scans += s;
        inspects += i;
        seen.extend(locks(doc).into_keys());
    }
    // Once the first SCANs found 10 names, every refresh reads the cap.
    assert!(
        docs.iter()
            .skip(2)
            .all(|d| d["commands"]["inspect"] == max_locks),
        "{docs:?}"
    );
    let get = |name: &str| stats.get(name).copied().unwrap_or(0);
    let server_scans = get("scan");
    let server_scripts = get("evalsha") + get("eval");
    eprintln!(
        "{refreshes} refreshes: server saw {server_scans} SCAN, {server_scripts} script calls; \
         the documents report {scans} and {inspects}"
    );
    assert!(
        server_scans >= scans && server_scripts >= inspects,
        "{stats:?}"
    );
    let allowed = refreshes + 1;
    assert!(server_scans <= allowed * max_scans, "{server_scans} SCANs");
    assert!(
        server_scripts <= allowed * max_locks,
        "{server_scripts} script calls for {refreshes} refreshes"
    );
    assert_eq!(seen, names, "the capped reads rotate over every lock");
    held.unlock().await.unwrap();
}

/// Exit codes as the other subcommands: 69 when Redis is unreachable, 2 for
/// an invalid lock name and for a Redis Cluster without names (it cannot be
/// scanned).
#[test]
fn top_exit_codes() {
    let out = run(&["--url", "redis://127.0.0.1:1", "top", "--once"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let out = run(&["top", "--once", "bad{name"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let out = run(&["--cluster", "redis://127.0.0.1:1", "top", "--once"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("name the locks"), "{}", stderr(&out));
}
