//! The protocol version every script checks (`protocol.lua`, PROTOCOL.md
//! "Compatibility and versioning"): a call whose `ARGV[1]` is not the
//! version the scripts speak is refused with `REDBELL_PROTOCOL` before any
//! key is read or written, and the client maps that reply to
//! `Error::Protocol`.

use std::time::Duration;

use futures_util::StreamExt;
use redbell::{Error, PROTOCOL_VERSION};
use redbell_integration_tests::{lock_key, raw, redis_url, unique};
use redis::Value;
use redis::aio::MultiplexedConnection;

/// A connection to the shared server that waits out another test file's
/// `CLIENT PAUSE` (observe.rs pauses writes for seconds) instead of
/// failing at redis-rs's default 500 ms response timeout.
async fn patient() -> MultiplexedConnection {
    let mut conn = raw(&redis_url()).await;
    conn.set_response_timeout(Duration::from_secs(20));
    conn
}

/// A far expiry (server ms): entries that stay live for the test.
const FAR: i64 = 4_000_000_000_000;

/// One script call that acts on the state its set-up writes (takes, frees,
/// extends, queues or dequeues something) when it is sent with the version
/// the scripts speak; `None` for a read-only script, which only answers.
struct Case {
    keys: Vec<String>,
    args: Vec<String>,
    setup: Vec<redis::Cmd>,
    writes: bool,
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// The call of `script` on lock `name`, KEYS and ARGV as its `.lua` header
/// lists them (ARGV without the version, which the test puts first).
fn case(script: &str, name: &str) -> Case {
    let l = lock_key(name);
    let k = |suffix: &str| format!("{l}{suffix}");
    let prefix = k(":wake:");
    let far = FAR.to_string();
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let (keys, args, setup, writes): (Vec<String>, Vec<String>, Vec<redis::Cmd>, bool) =
        match script {
            "acquire" => (
                vec![
                    l.clone(),
                    k(":fence"),
                    k(":waiters"),
                    k(":readers"),
                    k(":holders"),
                ],
                strings(&["mA", "30000", "60000", "c:1", "2000", "1000", "100", "m"]),
                vec![],
                true,
            ),
            "release" => (
                vec![l.clone(), k(":waiters")],
                strings(&["mT", &prefix, "100"]),
                vec![
                    cmd(&["SET", &l, "mT", "PX", "30000"]),
                    cmd(&["ZADD", &k(":waiters"), &far, "c:1"]),
                ],
                true,
            ),
            "extend" => (
                vec![l.clone(), k(":waiters")],
                strings(&["60000", "mT", &prefix]),
                vec![cmd(&["SET", &l, "mT", "PX", "30000"])],
                true,
            ),
            "pass" => (
                vec![l.clone(), k(":waiters")],
                strings(&["c:1", &prefix, "100"]),
                vec![cmd(&["ZADD", &k(":waiters"), &far, "c:1"])],
                true,
            ),
            "fair_acquire" => (
                vec![
                    l.clone(),
                    k(":fence"),
                    k(":fifo"),
                    k(":handoff"),
                    k(":readers"),
                    k(":holders"),
                ],
                strings(&[
                    "qA", "30000", "60000", "c:1:qA", "2000", "1000", &prefix, "500", "",
                ]),
                vec![],
                true,
            ),
            "fair_release" | "fair_pass" => (
                vec![l.clone(), k(":fence"), k(":fifo"), k(":handoff")],
                if script == "fair_release" {
                    strings(&["qT", &prefix, "500", "60000"])
                } else {
                    strings(&["c:1:qA", &prefix, "500", "60000"])
                },
                vec![
                    cmd(&["SET", &l, "qT", "PX", "30000"]),
                    cmd(&["ZADD", &k(":fifo"), "1", "c:1:qA"]),
                ],
                true,
            ),
            "rw_read_acquire" => (
                vec![
                    l.clone(),
                    k(":readers"),
                    k(":writers"),
                    k(":fence"),
                    k(":permits"),
                    k(":holders"),
                ],
                strings(&["rA", "30000", "1000"]),
                vec![],
                true,
            ),
            "rw_write_acquire" => (
                vec![
                    l.clone(),
                    k(":readers"),
                    k(":writers"),
                    k(":fence"),
                    k(":rw"),
                    k(":permits"),
                    k(":holders"),
                ],
                strings(&["wA", "30000", "60000", "c:1", "2000", "1000"]),
                vec![],
                true,
            ),
            "rw_read_release" => (
                vec![k(":readers"), k(":rw"), k(":writers")],
                strings(&["rT", "500"]),
                vec![cmd(&["ZADD", &k(":readers"), &far, "rT"])],
                true,
            ),
            "rw_write_release" => (
                vec![l.clone(), k(":rw"), k(":writers")],
                strings(&["wT", "500"]),
                vec![cmd(&["SET", &l, "wT", "PX", "30000"])],
                true,
            ),
            "rw_read_extend" => (
                vec![k(":readers")],
                strings(&["60000", "rT", &k(":rw")]),
                vec![cmd(&["ZADD", &k(":readers"), &far, "rT"])],
                true,
            ),
            "rw_pass" => (
                vec![k(":writers"), k(":rw"), l.clone(), k(":readers")],
                strings(&["c:1"]),
                vec![cmd(&["ZADD", &k(":writers"), &far, "c:1"])],
                true,
            ),
            "inspect" => (
                vec![
                    l.clone(),
                    k(":fence"),
                    k(":waiters"),
                    k(":fifo"),
                    k(":readers"),
                    k(":writers"),
                    k(":owners"),
                    k(":leader"),
                ],
                vec![],
                vec![cmd(&["SET", &l, "mT", "PX", "30000"])],
                false,
            ),
            "break_lock" => (
                vec![
                    l.clone(),
                    k(":waiters"),
                    k(":handoff"),
                    k(":fence"),
                    k(":fifo"),
                    k(":fifo:expiry"),
                    k(":readers"),
                    k(":rw"),
                ],
                strings(&[&prefix, "100", "500", "60000"]),
                vec![cmd(&["SET", &l, "mT", "PX", "30000"])],
                true,
            ),
            "sem_acquire" => (
                vec![
                    k(":holders"),
                    k(":fence"),
                    k(":queue"),
                    k(":queue:expiry"),
                    k(":permits"),
                    l.clone(),
                    k(":readers"),
                ],
                strings(&[
                    "sA", "30000", "60000", "c:1", "2000", "1000", &prefix, "2", "500", "",
                ]),
                vec![],
                true,
            ),
            "sem_release" | "sem_pass" => (
                vec![
                    k(":holders"),
                    k(":queue"),
                    k(":queue:expiry"),
                    k(":permits"),
                ],
                if script == "sem_release" {
                    strings(&["sT", &prefix, "1", "500"])
                } else {
                    strings(&["c:1", &prefix, "1", "500"])
                },
                vec![
                    cmd(&["ZADD", &k(":holders"), &far, "sT"]),
                    cmd(&["ZADD", &k(":queue"), "1", "c:1"]),
                    cmd(&["ZADD", &k(":queue:expiry"), &far, "c:1"]),
                ],
                true,
            ),
            "sem_extend" => (
                vec![k(":holders"), k(":permits"), k(":queue")],
                strings(&["60000", "sT", &prefix]),
                vec![cmd(&["ZADD", &k(":holders"), &far, "sT"])],
                true,
            ),
            "sem_status" => (
                vec![
                    k(":holders"),
                    k(":fence"),
                    k(":queue:expiry"),
                    k(":permits"),
                ],
                vec![],
                vec![cmd(&["ZADD", &k(":holders"), &far, "sT"])],
                false,
            ),
            "elect_leader" => (
                vec![l.clone(), k(":leader")],
                vec![],
                vec![cmd(&["SET", &l, "lT", "PX", "30000"])],
                false,
            ),
            "elect_proclaim" => (
                vec![l.clone(), k(":leader")],
                strings(&["lT", "7", "v", "elected", &k(":leader:events"), "60000"]),
                vec![cmd(&["SET", &l, "lT", "PX", "30000"])],
                true,
            ),
            "elect_resign" => (
                vec![k(":leader")],
                strings(&["lT", &k(":leader:events")]),
                vec![cmd(&["HSET", &k(":leader"), "token", "lT", "term", "7"])],
                true,
            ),
            other => panic!("no case for script {other:?}: add one to tests/protocol.rs"),
        };
    Case {
        keys,
        args,
        setup,
        writes,
    }
}

/// Every key of lock `name`, with its serialized value and its PTTL.
async fn snapshot(conn: &mut MultiplexedConnection, name: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", lock_key(name)))
        .query_async(conn)
        .await
        .expect("KEYS");
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(conn)
            .await
            .expect("DUMP");
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .expect("PTTL");
        out.push((key, dump, pttl));
    }
    out
}

/// Whether `after` is `before` untouched: the same keys and values, and no
/// expiry moved later or set (an expiry only counts down).
fn untouched(before: &[(String, Vec<u8>, i64)], after: &[(String, Vec<u8>, i64)]) -> bool {
    before.len() == after.len()
        && before
            .iter()
            .zip(after)
            .all(|((k1, v1, t1), (k2, v2, t2))| {
                k1 == k2 && v1 == v2 && (t1 == t2 || (*t1 >= 0 && *t2 >= 0 && t2 <= t1))
            })
}

/// Runs `script` by EVALSHA with protocol version `version` on a fresh lock
/// set up by its case; returns the reply, the keys before and after, and
/// the messages published on the lock's channels meanwhile.
async fn run(
    script: &redbell::ScriptInfo,
    version: &str,
) -> (
    redis::RedisResult<Value>,
    bool,
    Vec<(String, Vec<u8>, i64)>,
    Vec<(String, Vec<u8>, i64)>,
    Vec<String>,
) {
    let mut conn = patient().await;
    let name = unique(&format!("proto-{}", script.name));
    let case = case(script.name, &name);
    for c in &case.setup {
        let _: Value = c.query_async(&mut conn).await.expect("set-up");
    }
    let client = redis::Client::open(redis_url()).expect("client");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .psubscribe(format!("{}*", lock_key(&name)))
        .await
        .expect("PSUBSCRIBE");
    let before = snapshot(&mut conn, &name).await;
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script.source)
        .query_async(&mut conn)
        .await
        .expect("SCRIPT LOAD");
    let reply = redis::cmd("EVALSHA")
        .arg(script.sha1)
        .arg(case.keys.len())
        .arg(&case.keys)
        .arg(version)
        .arg(&case.args)
        .query_async::<Value>(&mut conn)
        .await;
    let after = snapshot(&mut conn, &name).await;
    let mut messages = Vec::new();
    let mut stream = pubsub.on_message();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), stream.next()).await {
        messages.push(format!(
            "{}: {}",
            m.get_channel_name(),
            String::from_utf8_lossy(m.get_payload_bytes())
        ));
    }
    (reply, case.writes, before, after, messages)
}

/// Every script, sent with a version it does not speak ("2", and none at
/// all), answers `REDBELL_PROTOCOL client speaks <x>, scripts speak 1`, and
/// leaves every key of the lock as it was and publishes nothing, although
/// the same call with version "1" acts (or, for a read-only script,
/// answers): the check runs before the script touches anything.
#[tokio::test]
async fn every_script_refuses_another_version_and_touches_nothing() {
    assert_eq!(PROTOCOL_VERSION, "1");
    let scripts = redbell::scripts();
    assert_eq!(scripts.len(), 23, "a new script needs a case here");
    for script in &scripts {
        // The control: the version the scripts speak is served.
        let (reply, writes, before, after, _) = run(script, PROTOCOL_VERSION).await;
        assert!(
            reply.is_ok(),
            "{}: version 1 failed: {reply:?}",
            script.name
        );
        if writes {
            assert!(
                !untouched(&before, &after),
                "{}: the control call changed nothing, so the test below \
                 could not tell a refused call from a served one",
                script.name
            );
        }
        for version in ["2", "0.9"] {
            let (reply, _, before, after, messages) = run(script, version).await;
            let err = match reply {
                Err(e) => e,
                Ok(v) => panic!(
                    "{}: version {version} was served: {v:?}; keys before {before:?}, after \
                     {after:?}",
                    script.name
                ),
            };
            assert_eq!(
                err.code(),
                Some("REDBELL_PROTOCOL"),
                "{}: {err}",
                script.name
            );
            assert_eq!(
                err.detail(),
                Some(format!("client speaks {version}, scripts speak 1").as_str()),
                "{}",
                script.name
            );
            assert!(
                untouched(&before, &after),
                "{}: version {version} changed keys: before {before:?}, after {after:?}",
                script.name
            );
            assert!(
                messages.is_empty(),
                "{}: version {version} published {messages:?}",
                script.name
            );
            let mapped = Error::from(err);
            assert!(
                matches!(&mapped, Error::Protocol { client, scripts }
                    if client == version && scripts == PROTOCOL_VERSION),
                "{}: {mapped:?}",
                script.name
            );
        }
    }
}

/// A call with no ARGV at all, and one whose version holds characters a
/// reply must not carry, are refused the same way, the version echoed
/// safely.
#[tokio::test]
async fn a_missing_or_odd_version_is_refused_and_echoed_safely() {
    let mut conn = patient().await;
    let acquire = redbell::scripts()
        .into_iter()
        .find(|s| s.name == "acquire")
        .expect("acquire");
    let name = unique("proto-odd");
    let lock = lock_key(&name);
    for (args, echoed) in [
        (vec![], "none"),
        (
            vec!["1\r\n+OK a very long version string".to_owned()],
            "1???OK?a?very?lo",
        ),
    ] {
        let err = redis::cmd("EVAL")
            .arg(acquire.source)
            .arg(1)
            .arg(&lock)
            .arg(&args)
            .query_async::<Value>(&mut conn)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), Some("REDBELL_PROTOCOL"), "{err}");
        assert_eq!(
            err.detail(),
            Some(format!("client speaks {echoed}, scripts speak 1").as_str())
        );
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&lock)
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0);
}

/// The client sends the version it speaks: its calls are served.
#[tokio::test]
async fn the_client_speaks_the_scripts_version() {
    // Patient, as above: another file's CLIENT PAUSE only delays it.
    let client = redbell::Client::builder(redis_url().as_str())
        .response_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect");
    let guard = client
        .mutex(&unique("proto-client"))
        .lock()
        .await
        .expect("lock");
    guard.unlock().await.expect("unlock");
}
