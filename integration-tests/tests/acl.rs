//! ACL users: the minimal rule the README gives lets a user lock, unlock
//! and wait; a user without channel rights (Redis 7's default for new
//! users) is refused at connect with a typed error naming what is missing;
//! and the release scripts report a release that happened as one even when
//! the server refuses their wake-up `PUBLISH`.
//!
//! Each test creates users of its own (unique names, deleted on drop) on
//! the shared server.

use std::time::Duration;

use redbell::redis::{ConnectionInfo, IntoConnectionInfo};
use redbell::{Client, Error};
use redbell_integration_tests::{
    LONG, exists, hand_off, lock_key, promptly, raw, redis_url, set, unique, waiters_key,
};
use tokio::time::{Instant, sleep};

/// The README's minimal rule for a redbell user under the default prefix
/// (the `on >password` part and the user name are added).
const MINIMAL_RULE: &str = "resetchannels ~redbell:* &redbell:* -@all \
    +evalsha +eval +type +ping +subscribe +unsubscribe +publish \
    +get +set +del +exists +pttl +pexpire +time \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcount +zcard +zscore +zrank \
    +zpopmin";

/// The minimal rule of earlier releases, without `ZPOPMIN`: the fair
/// mutex's grant takes the head out of the queue with `ZRANGE` and `ZREM`
/// instead.
const RULE_WITHOUT_ZPOPMIN: &str = "resetchannels ~redbell:* &redbell:* -@all \
    +evalsha +eval +type +ping +subscribe +unsubscribe +publish \
    +get +set +del +exists +pttl +pexpire +time \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcount +zcard +zscore +zrank";

/// A user of the test's own, deleted on drop.
struct User {
    name: String,
    password: String,
}

impl User {
    /// `ACL SETUSER <unique> on >password <rules...>`.
    async fn create(rules: &str) -> User {
        let user = User {
            name: unique("acl-user"),
            password: unique("pw"),
        };
        let mut admin = raw(&redis_url()).await;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(&user.name)
            .arg("reset")
            .arg("on")
            .arg(format!(">{}", user.password));
        for rule in rules.split_whitespace() {
            cmd.arg(rule);
        }
        let ok: String = cmd.query_async(&mut admin).await.expect("ACL SETUSER");
        assert_eq!(ok, "OK");
        user
    }

    /// The shared server's address with this user's credentials.
    fn info(&self) -> ConnectionInfo {
        let info = redis_url()
            .as_str()
            .into_connection_info()
            .expect("REDIS_URL");
        let settings = info
            .redis_settings()
            .clone()
            .set_username(&self.name)
            .set_password(&self.password);
        info.set_redis_settings(settings)
    }

    async fn connect(&self) -> Result<Client, Error> {
        promptly("connect", Client::builder(self.info()).connect()).await
    }

    /// A raw connection as this user.
    async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.info())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect as the user")
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if let Ok(mut conn) = redis::Client::open(redis_url()).and_then(|c| c.get_connection()) {
            let _: redis::RedisResult<i64> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.name)
                .query(&mut conn);
        }
    }
}

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
    let source = |name: &str| {
        redbell::scripts()
            .into_iter()
            .find(|s| s.name == name)
            .expect("script")
            .source
    };

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
