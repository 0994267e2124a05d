//! ACL users: the minimal rule the README gives lets a user lock, unlock
//! and wait; a user without channel rights (Redis 7's default for new
//! users) is refused at connect with a typed error naming what is missing;
//! and the release scripts report a release that happened as one even when
//! the server refuses their wake-up `PUBLISH`.
//!
//! Each test creates users of its own (unique names, deleted on drop) on
//! the shared server.

use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::acl::User;
use redbell_integration_tests::{
    LONG, exists, hand_off, lock_key, promptly, raw, redis_url, script_source, set, unique,
    waiters_key,
};
use tokio::time::{Instant, sleep};

/// The README's minimal rule for a redbell user under the default prefix
/// (the `on >password` part and the user name are added).
const MINIMAL_RULE: &str = "resetchannels ~redbell:* &redbell:* -@all \
    +evalsha +eval +type +ping +subscribe +unsubscribe +publish \
    +get +mget +set +del +exists +pttl +pexpire +time \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcount +zcard +zscore +zmscore +zrank \
    +zpopmin";

/// The minimal rule of earlier releases, without `ZPOPMIN`: the fair
/// mutex's grant takes the head out of the queue with `ZRANGE` and `ZREM`
/// instead.
const RULE_WITHOUT_ZPOPMIN: &str = "resetchannels ~redbell:* &redbell:* -@all \
    +evalsha +eval +type +ping +subscribe +unsubscribe +publish \
    +get +mget +set +del +exists +pttl +pexpire +time \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcount +zcard +zscore +zmscore +zrank";

/// Redis 7's default for a new user: every command but the dangerous ones,
/// the keys under the prefix, and no channel (`resetchannels`, which
/// `acl-pubsub-default` gives a new user on Redis 7).
const NO_CHANNELS: &str = "resetchannels ~redbell:* +@all -@dangerous";

/// Such a user cannot `ACL DRYRUN` (it is `@dangerous`), so the client
/// probes with `PUBLISH` at connect: refused, reported as the missing
/// right, before any lock is taken.
#[tokio::test]
async fn a_user_without_channel_rights_is_refused_at_connect() {
    let user = User::create(NO_CHANNELS).await;
    match user.connect().await {
        Err(Error::NoPermission { command, detail }) => {
            eprintln!("refused at connect: {command}: {detail}");
            assert_eq!(command, "PUBLISH");
            assert!(detail.contains("channel"), "{detail}");
        }
        other => panic!("a user without channel rights connected: {other:?}"),
    }
}

/// A user that may `ACL DRYRUN` is checked command by command, scripts'
/// commands included: the first thing refused is named.
#[tokio::test]
async fn acl_dryrun_names_the_first_refused_command() {
    let no_channels = User::create("resetchannels ~redbell:* +@all").await;
    match no_channels.connect().await {
        Err(Error::NoPermission { command, detail }) => {
            assert_eq!(command, "SUBSCRIBE", "{detail}");
            assert!(detail.contains("channel"), "{detail}");
        }
        other => panic!("connected without channel rights: {other:?}"),
    }
    // A command only the scripts run.
    let no_zadd = User::create("resetchannels ~redbell:* &redbell:* +@all -zadd").await;
    match no_zadd.connect().await {
        Err(Error::NoPermission { command, .. }) => assert_eq!(command, "ZADD"),
        other => panic!("connected without ZADD: {other:?}"),
    }
    // Keys under another prefix only.
    let other_keys = User::create("resetchannels ~other:* &redbell:* +@all").await;
    match other_keys.connect().await {
        Err(Error::NoPermission { command, detail }) => {
            assert_eq!(command, "EVALSHA", "{detail}");
            assert!(detail.contains("key"), "{detail}");
        }
        other => panic!("connected without the prefix's keys: {other:?}"),
    }
}

/// The README's rule is enough: lock, unlock, a contended hand-off woken
/// by pub/sub (well within the 30 s lease), a fair hand-off, and a
/// read-write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_rule_locks_unlocks_and_waits() {
    let user = User::create(MINIMAL_RULE).await;
    let a = user
        .connect()
        .await
        .expect("connect a with the minimal rule");
    let b = user
        .connect()
        .await
        .expect("connect b with the minimal rule");
    let name = unique("acl");
    a.mutex(&name)
        .lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");

    let handoff = hand_off(&a, &b).await;
    assert!(
        handoff < Duration::from_secs(1),
        "the waiter was not woken ({handoff:?})"
    );
    // The fair lock's grant is published by its release script too.
    fair_hand_off(&a, &b).await;

    let rw = unique("acl-rw");
    let read = a.rwlock(&rw).read().await.expect("read");
    let writer = {
        let lock = b.rwlock(&rw);
        tokio::spawn(async move { lock.write().await?.unlock().await })
    };
    sleep(Duration::from_millis(200)).await;
    read.unlock().await.expect("read unlock");
    promptly("the writer", writer)
        .await
        .expect("writer task")
        .expect("the writer's lock");
}

/// A fair hand-off from `a` to `b`: granted within a second of the release.
async fn fair_hand_off(a: &redbell::Client, b: &redbell::Client) {
    let fair = unique("acl-fair");
    let held = a
        .fair_mutex(&fair)
        .with_lease(LONG)
        .lock()
        .await
        .expect("the fair holder's lock");
    let waiter = {
        let lock = b.fair_mutex(&fair).with_lease(LONG);
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            let got = Instant::now();
            guard.unlock().await?;
            Ok::<_, Error>(got)
        })
    };
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    held.unlock().await.expect("the fair holder's unlock");
    let got = promptly("the fair waiter", waiter)
        .await
        .expect("waiter task")
        .expect("the fair waiter's lock");
    assert!(
        got - released < Duration::from_secs(1),
        "the fair waiter was not granted the lock ({:?})",
        got - released
    );
}

/// Under the rule of earlier releases (no `ZPOPMIN`) the fair hand-off
/// still works. Before the fallback, the grant failed with NOPERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_without_zpopmin_still_hands_a_fair_lock_over() {
    let user = User::create(RULE_WITHOUT_ZPOPMIN).await;
    let a = user.connect().await.expect("connect a");
    let b = user.connect().await.expect("connect b");
    fair_hand_off(&a, &b).await;
}

/// The fallback where `ACL DRYRUN` cannot be asked and the `PUBLISH` probe
/// passes, but `SUBSCRIBE` is refused: the waiter that needed it fails at
/// once with the typed error; it does not wait out the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_fails_the_waiter_with_the_typed_error() {
    let user =
        User::create("resetchannels ~redbell:* &redbell:* +@all -@dangerous -subscribe").await;
    let holder = redbell_integration_tests::client(&redis_url()).await;
    let waiter = user
        .connect()
        .await
        .expect("connect (SUBSCRIBE is not probed)");
    let name = unique("acl-sub");
    let _held = holder
        .mutex(&name)
        .with_lease(LONG)
        .lock()
        .await
        .expect("the holder's lock");
    let started = Instant::now();
    match waiter
        .mutex(&name)
        .lock_timeout(Duration::from_secs(5))
        .await
    {
        Err(Error::NoPermission { command, .. }) => {
            assert_eq!(command, "SUBSCRIBE");
            assert!(started.elapsed() < Duration::from_secs(2));
        }
        other => panic!("a waiter whose SUBSCRIBE is refused: {other:?}"),
    }
}

/// The release scripts run as a user whose wake-up `PUBLISH` is refused
/// (no channel rights), with a waiter queued so that they publish: the key
/// is deleted and the release reports 1 (ours, released), not an error.
#[tokio::test]
async fn a_refused_wake_up_does_not_fail_a_release() {
    let user = User::create(NO_CHANNELS).await;
    let mut admin = raw(&redis_url()).await;
    let mut conn = user.raw().await;
    let source = script_source;

    // Plain mutex: release.lua wakes the head of the queue.
    let name = unique("acl-release");
    let (lock, waiters) = (lock_key(&name), waiters_key(&name));
    set(&mut admin, &lock, "token").await;
    let far: i64 = 4_000_000_000_000;
    let _: i64 = redis::cmd("ZADD")
        .arg(&waiters)
        .arg(far)
        .arg("someclient:1")
        .query_async(&mut admin)
        .await
        .expect("ZADD");
    let released: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(source("release"))
        .arg(2)
        .arg(&lock)
        .arg(&waiters)
        .arg(redbell::PROTOCOL_VERSION)
        .arg("token")
        .arg(format!("{lock}:wake:"))
        .arg(100)
        .query_async(&mut conn)
        .await;
    assert!(!exists(&mut admin, &lock).await, "the key was not deleted");
    assert_eq!(
        released.as_ref().ok(),
        Some(&1),
        "release reported {released:?} for a key it deleted"
    );

    // Read-write lock: rw_write_release.lua publishes on the lock's channel.
    let name = unique("acl-rw-release");
    let lock = lock_key(&name);
    set(&mut admin, &lock, "token").await;
    let released: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(source("rw_write_release"))
        .arg(3)
        .arg(&lock)
        .arg(format!("{lock}:rw"))
        .arg(format!("{lock}:writers"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("token")
        .arg(500)
        .query_async(&mut conn)
        .await;
    assert!(
        !exists(&mut admin, &lock).await,
        "the write key was not deleted"
    );
    assert_eq!(released.as_ref().ok(), Some(&1), "{released:?}");
}

/// The same for the semaphore's release (sem_common.lua's wake-ups) and the
/// election's resignation: a refused `PUBLISH` after their writes used to
/// fail the whole script (`redis.call`), so a permit given back, or a
/// leader that stepped down, was reported as an error.
#[tokio::test]
async fn a_refused_wake_up_does_not_fail_a_semaphore_release_or_a_resignation() {
    let user = User::create(NO_CHANNELS).await;
    let mut admin = raw(&redis_url()).await;
    let mut conn = user.raw().await;
    let source = script_source;
    let far: i64 = 4_000_000_000_000;
    let zadd = |key: String, score: i64, member: &'static str| {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key).arg(score).arg(member);
        cmd
    };

    // Semaphore: one permit held, one waiter queued (so the release wakes).
    let name = unique("acl-sem-release");
    let lock = lock_key(&name);
    let (holders, queue, expiry) = (
        format!("{lock}:holders"),
        format!("{lock}:queue"),
        format!("{lock}:queue:expiry"),
    );
    for cmd in [
        zadd(holders.clone(), far, "token"),
        zadd(queue.clone(), 1, "someclient:1"),
        zadd(expiry.clone(), far, "someclient:1"),
    ] {
        let _: i64 = cmd.query_async(&mut admin).await.expect("ZADD");
    }
    let released: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(source("sem_release"))
        .arg(4)
        .arg(&holders)
        .arg(&queue)
        .arg(&expiry)
        .arg(format!("{lock}:permits"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("token")
        .arg(format!("{lock}:wake:"))
        .arg(1)
        .arg(100)
        .query_async(&mut conn)
        .await;
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(&holders)
        .arg("token")
        .query_async(&mut admin)
        .await
        .expect("ZSCORE");
    assert_eq!(score, None, "the permit was not given back");
    assert_eq!(released.as_ref().ok(), Some(&1), "{released:?}");
    for key in [&holders, &queue, &expiry] {
        let _: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut admin)
            .await
            .expect("DEL");
    }

    // Election: the leader resigns; the channel is refused.
    let name = unique("acl-resign");
    let leader = format!("{}:leader", lock_key(&name));
    let _: i64 = redis::cmd("HSET")
        .arg(&leader)
        .arg("token")
        .arg("token")
        .arg("term")
        .arg(3)
        .query_async(&mut admin)
        .await
        .expect("HSET");
    let resigned: redis::RedisResult<i64> = redis::cmd("EVAL")
        .arg(source("elect_resign"))
        .arg(1)
        .arg(&leader)
        .arg(redbell::PROTOCOL_VERSION)
        .arg("token")
        .arg(format!("{leader}:events"))
        .query_async(&mut conn)
        .await;
    let token: Option<String> = redis::cmd("HGET")
        .arg(&leader)
        .arg("token")
        .query_async(&mut admin)
        .await
        .expect("HGET");
    assert_eq!(token.as_deref(), Some(""), "the leader key still names it");
    assert_eq!(resigned.as_ref().ok(), Some(&1), "{resigned:?}");
    let _: i64 = redis::cmd("DEL")
        .arg(&leader)
        .query_async(&mut admin)
        .await
        .expect("DEL");
}

/// The acquire script runs its queue commands under `redis.pcall` and used
/// to take any refusal for foreign data under the queue key: a user whose
/// rule lacks `ZADD` got `Error::WrongType` (a permanent, misleading error)
/// instead of the server's `NOPERM`. Run as such a user on a held lock (so
/// that it queues), the script now answers with the refusal itself
/// (before: `WRONGTYPE waiter queue key holds a value that is not a redbell
/// queue`).
#[tokio::test]
async fn a_refused_queue_command_is_reported_as_the_refusal() {
    let rule = MINIMAL_RULE.replace(" +zadd", "");
    assert_ne!(rule, MINIMAL_RULE);
    let user = User::create(&rule).await;
    let mut admin = raw(&redis_url()).await;
    let mut conn = user.raw().await;
    let name = unique("acl-no-zadd");
    let lock = lock_key(&name);
    set(&mut admin, &lock, "mheld-by-someone").await;
    let source = script_source("acquire");
    let reply: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg(source)
        .arg(4)
        .arg(&lock)
        .arg(format!("{lock}:fence"))
        .arg(waiters_key(&name))
        .arg(format!("{lock}:readers"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("mmine")
        .arg(30_000)
        .arg(86_400_000)
        .arg("someclient:1")
        .arg(2_000)
        .arg(1_000)
        .arg(100)
        .query_async(&mut conn)
        .await;
    let err = reply.expect_err("ZADD is refused");
    // Redis 7.0 words a refusal inside a script as ERR, later servers as
    // NOPERM; either way the client makes it Error::NoPermission.
    assert!(
        matches!(Error::from(err.clone()), Error::NoPermission { .. }),
        "{err}"
    );
    let _: i64 = redis::cmd("DEL")
        .arg(&lock)
        .query_async(&mut admin)
        .await
        .expect("DEL");
}
