//! One name, one kind (issue 29): a Semaphore beside a Mutex, FairMutex or
//! RwLock (its writer, or readers only), and an Election beside a Mutex or
//! FairMutex, are refused with `Error::KindConflict` in both directions,
//! writing nothing; an election shows as one in `inspect`, and through the
//! `redbell` binary in `run` (the kind conflict, not "held elsewhere") and
//! `status`.
//!
//! The CLI tests need the binary built first (`cargo build -p redbell-cli`).

use std::time::Duration;

use redbell::{Error, LockKind};
use redbell_integration_tests::cli::{code, run, stderr, stdout};
use redbell_integration_tests::{
    LONG, client, exists, fence_key, get, intents_key, lock_key, raw, readers_key, redis_url,
    unique, waiters_key,
};
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

/// A generous bound for what takes milliseconds.
const SOON: Duration = Duration::from_secs(5);

fn holders_key(name: &str) -> String {
    format!("redbell:{{{name}}}:holders")
}

fn semaphore_keys(name: &str) -> [String; 4] {
    let base = format!("redbell:{{{name}}}");
    [
        format!("{base}:holders"),
        format!("{base}:permits"),
        format!("{base}:queue"),
        format!("{base}:queue:expiry"),
    ]
}

fn conflict<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    match r {
        Err(Error::KindConflict { .. }) => {}
        other => panic!("{what}: expected KindConflict, got {other:?}"),
    }
}

/// The state a refused attempt must leave alone: the lock key's value, the
/// fence, and whether each semaphore key exists.
async fn snapshot(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> (Option<String>, Option<String>, Vec<bool>) {
    let mut present = Vec::new();
    for key in semaphore_keys(name) {
        present.push(exists(conn, &key).await);
    }
    (
        get(conn, &lock_key(name)).await,
        get(conn, &fence_key(name)).await,
        present,
    )
}

#[tokio::test]
async fn a_semaphore_is_refused_beside_an_exclusive_lock() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    for kind in ["mutex", "fair", "writer"] {
        let name = unique(&format!("sem-after-{kind}"));
        // Hold the name as `kind` for the whole check.
        let (m, f, w) = (c.mutex(&name), c.fair_mutex(&name), c.rwlock(&name));
        let held = match kind {
            "mutex" => (Some(m.with_lease(LONG).lock().await.unwrap()), None),
            "fair" => (Some(f.with_lease(LONG).lock().await.unwrap()), None),
            _ => (None, Some(w.with_lease(LONG).write().await.unwrap())),
        };
        let before = snapshot(&mut conn, &name).await;
        let s = c.semaphore(&name, 3).with_lease(LONG);
        conflict(
            &format!("try_acquire beside a {kind}"),
            s.try_acquire().await,
        );
        let r = timeout(SOON, s.acquire())
            .await
            .expect("acquire hung instead of refusing");
        conflict(&format!("acquire beside a {kind}"), r);
        assert_eq!(
            snapshot(&mut conn, &name).await,
            before,
            "beside a {kind}: something was written"
        );
        assert_eq!(
            before.2, [false; 4],
            "beside a {kind}: semaphore keys left behind"
        );
        drop(held);
    }
}

#[tokio::test]
async fn an_exclusive_lock_is_refused_beside_a_semaphore() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("mutex-after-sem");
    let permit = c
        .semaphore(&name, 2)
        .with_lease(LONG)
        .acquire()
        .await
        .unwrap();
    let before = snapshot(&mut conn, &name).await;
    let m = c.mutex(&name).with_lease(LONG);
    conflict("Mutex::try_lock beside a semaphore", m.try_lock().await);
    let r = timeout(SOON, m.lock())
        .await
        .expect("lock hung instead of refusing");
    conflict("Mutex::lock beside a semaphore", r);
    let f = c.fair_mutex(&name).with_lease(LONG);
    conflict("FairMutex::try_lock beside a semaphore", f.try_lock().await);
    let r = timeout(SOON, f.lock())
        .await
        .expect("fair lock hung instead of refusing");
    conflict("FairMutex::lock beside a semaphore", r);
    assert_eq!(
        snapshot(&mut conn, &name).await,
        before,
        "something was written"
    );
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "a lock key was left behind"
    );
    assert!(
        !exists(&mut conn, &waiters_key(&name)).await,
        "a queue entry was left behind"
    );
    // The semaphore is untouched and still works.
    let second = c
        .semaphore(&name, 2)
        .with_lease(LONG)
        .try_acquire()
        .await
        .unwrap();
    assert!(second.is_some(), "the semaphore's second permit");
    permit.unlock().await.unwrap();
    drop(second);
    // Once nothing of the semaphore lives, the name can be a mutex.
    let gone = redbell_integration_tests::eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        let key = holders_key(&name);
        async move {
            redis::cmd("ZCARD")
                .arg(&key)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap()
                == 0
        }
    })
    .await;
    assert!(gone, "the permits were not given back");
    let g = c.mutex(&name).try_lock().await.unwrap();
    assert!(
        g.is_some(),
        "a mutex after the semaphore's permits were given back"
    );
}

/// A Semaphore on a name that RwLock readers hold (no writer, so the lock
/// key is empty): refused, and nothing of the semaphore is written; the
/// readers keep their holds.
#[tokio::test]
async fn a_semaphore_is_refused_beside_rwlock_readers() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("sem-after-readers");
    let rw = c.rwlock(&name).with_lease(LONG);
    let (r1, r2) = (rw.read().await.unwrap(), rw.read().await.unwrap());
    let readers = zcard(&mut conn, &readers_key(&name)).await;
    let before = snapshot(&mut conn, &name).await;
    let s = c.semaphore(&name, 3).with_lease(LONG);
    conflict("try_acquire beside readers", s.try_acquire().await);
    let r = timeout(SOON, s.acquire())
        .await
        .expect("acquire hung instead of refusing");
    conflict("acquire beside readers", r);
    assert_eq!(
        snapshot(&mut conn, &name).await,
        before,
        "beside readers: something was written"
    );
    assert_eq!(before.2, [false; 4], "semaphore keys left behind");
    assert_eq!(zcard(&mut conn, &readers_key(&name)).await, readers);
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
}

/// An RwLock writer or reader on a name whose Semaphore permit is held:
/// refused, whether it waits or not, and no writer key, read hold or
/// writer intent is written; the permit stays held. Once it is given back,
/// both are taken.
#[tokio::test]
async fn an_rwlock_is_refused_beside_a_semaphore() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("rw-after-sem");
    let permit = c
        .semaphore(&name, 2)
        .with_lease(LONG)
        .acquire()
        .await
        .unwrap();
    let before = snapshot(&mut conn, &name).await;
    let rw = c.rwlock(&name).with_lease(LONG);
    conflict("RwLock::try_write beside a semaphore", rw.try_write().await);
    let r = timeout(SOON, rw.write())
        .await
        .expect("write hung instead of refusing");
    conflict("RwLock::write beside a semaphore", r);
    conflict("RwLock::try_read beside a semaphore", rw.try_read().await);
    let r = timeout(SOON, rw.read())
        .await
        .expect("read hung instead of refusing");
    conflict("RwLock::read beside a semaphore", r);
    assert_eq!(
        snapshot(&mut conn, &name).await,
        before,
        "something was written"
    );
    for key in [lock_key(&name), readers_key(&name), intents_key(&name)] {
        assert!(!exists(&mut conn, &key).await, "{key} was left behind");
    }
    assert_eq!(zcard(&mut conn, &holders_key(&name)).await, 1, "the permit");
    permit.unlock().await.unwrap();
    // Given back, the permit no longer refuses the name (the count key may
    // outlive it: only live permits count).
    let count_left = exists(&mut conn, &semaphore_keys(&name)[1]).await;
    eprintln!("count key left after the release: {count_left}");
    let w = rw.try_write().await.unwrap();
    assert!(w.is_some(), "a writer after the permit was given back");
    w.unwrap().unlock().await.unwrap();
    let r = rw.try_read().await.unwrap();
    assert!(r.is_some(), "a reader after the permit was given back");
    r.unwrap().unlock().await.unwrap();
}

async fn zcard(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_election_and_a_mutex_refuse_each_other() {
    let url = redis_url();
    let c = client(&url).await;
    let name = unique("elect-vs-mutex");
    let leadership = c.election(&name).campaign("host-a:1").await.unwrap();
    let m = c.mutex(&name).with_lease(LONG);
    conflict(
        "Mutex::try_lock while an election leads",
        m.try_lock().await,
    );
    let r = timeout(SOON, m.lock())
        .await
        .expect("lock waited on the election");
    conflict("Mutex::lock while an election leads", r);
    let f = c.fair_mutex(&name).with_lease(LONG);
    conflict(
        "FairMutex::try_lock while an election leads",
        f.try_lock().await,
    );
    let s = c.semaphore(&name, 2).with_lease(LONG);
    conflict(
        "Semaphore::try_acquire while an election leads",
        s.try_acquire().await,
    );

    // inspect (and status) tell an election, with its leader and term.
    let info = c.inspect(&name).await.unwrap();
    assert_eq!(info.kind, Some(LockKind::Election), "{info:?}");
    let leader = info.leader.as_ref().expect("the leader");
    assert_eq!(
        (leader.term, leader.value.as_str()),
        (leadership.term(), "host-a:1")
    );
    leadership.resign().await.unwrap();

    // The other way: a campaign while a Mutex holds the name.
    let name = unique("mutex-vs-elect");
    let g = c.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let r = timeout(SOON, c.election(&name).campaign("host-b:2"))
        .await
        .expect("campaign waited on a mutex");
    conflict("campaign while a Mutex holds the name", r);
    assert!(!exists(&mut raw(&url).await, &format!("redbell:{{{name}}}:leader")).await);
    g.unlock().await.unwrap();
}

/// Through the binary: while an election leads, `redbell run` reports the
/// kind conflict (not "held elsewhere"), and `status` the election.
#[tokio::test]
async fn the_cli_tells_an_election() {
    let url = redis_url();
    let c = client(&url).await;
    let name = unique("cli-elect");
    let leadership = c.election(&name).campaign("web1:4242").await.unwrap();

    let out = run(&["run", "-n", &name, "--", "true"]);
    let err = stderr(&out);
    assert!(
        err.contains("another kind") && !err.contains("held elsewhere"),
        "run beside an election: {err}"
    );
    assert_eq!(code(&out), 2, "run beside an election: exit code; {err}");

    let out = run(&["status", "--json", &name]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(json["kind"], "election", "{json}");
    assert_eq!(json["leader"]["value"], "web1:4242", "{json}");
    assert_eq!(json["leader"]["term"], leadership.term(), "{json}");

    let out = run(&["status", &name]);
    let table = stdout(&out);
    let row = table.lines().nth(1).expect("a row");
    assert!(row.contains("election"), "{table}");
    assert!(row.contains("web1:4242"), "{table}");

    let out = run(&["top", "--once", "--json", &name]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let top: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(top["locks"][0]["kind"], "election", "{top}");

    // Broken by an operator: told as an election, and the leader learns it.
    let out = run(&["unlock", "--force", &name]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("(election)"), "{}", stdout(&out));
    let r = leadership.resign().await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
}
