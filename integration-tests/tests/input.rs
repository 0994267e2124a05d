//! Bad input and hostile server state: every case gives its typed error (or
//! works), returns promptly, and nothing panics.

use std::time::Duration;

use redbell::{Client, Error, MAX_LEASE, MAX_NAME_LEN};
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, client, del, exists, fails_promptly, fence_key, free_port,
    get, gone_within, hgetall, hset, lock_key, pttl, raw, redis_url, set, unique,
};
use tokio::time::{Instant, timeout};

/// Runs lock(), try_lock() and lock_timeout() on `mutex` and hands each
/// error to `check` (none may succeed or hang).
async fn all_fail(mutex: &redbell::Mutex, check: impl Fn(&str, Error)) {
    check("lock", fails_promptly("lock()", mutex.lock()).await);
    check(
        "try_lock",
        fails_promptly("try_lock()", mutex.try_lock()).await,
    );
    let e = fails_promptly("lock_timeout()", mutex.lock_timeout(Duration::from_secs(1))).await;
    check("lock_timeout", e);
}

#[tokio::test]
async fn invalid_names_are_rejected() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let huge = "x".repeat(1 << 20);
    let braces = format!("{{{}}}", unique("braced"));
    let bad = [
        String::new(),
        format!("{}{{", unique("open")),
        format!("{}}}", unique("close")),
        braces.clone(),
        format!("{}\nline", unique("ctl")),
        "y".repeat(MAX_NAME_LEN + 1),
        huge,
    ];
    for name in &bad {
        let mutex = c.mutex(name);
        assert!(
            mutex.name().len() <= 4 * 64,
            "Mutex::name() keeps a 1 MiB name"
        );
        all_fail(&mutex, |op, e| {
            assert!(
                matches!(e, Error::InvalidName { .. }),
                "{op} on a name of {} bytes: {e:?}",
                name.len()
            );
            assert!(!e.is_retryable());
            assert!(
                e.to_string().len() < 1000,
                "the error message embeds the whole name"
            );
        })
        .await;
    }
    assert!(!exists(&mut conn, &format!("redbell:{braces}")).await);

    // The longest allowed name works.
    let longest = format!("{}{}", unique("long"), "z".repeat(MAX_NAME_LEN - 37));
    assert_eq!(longest.len(), MAX_NAME_LEN);
    let g = c.mutex(&longest).lock().await.expect("a 512-byte name");
    assert!(exists(&mut conn, &lock_key(&longest)).await);
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn invalid_leases_are_rejected() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("lease");
    for lease in [
        Duration::ZERO,
        MAX_LEASE + Duration::from_secs(1),
        Duration::MAX,
    ] {
        all_fail(&c.mutex(&name).with_lease(lease), |op, e| {
            assert!(
                matches!(e, Error::InvalidLease { .. }),
                "{op} with lease {lease:?}: {e:?}"
            );
        })
        .await;
    }
    assert!(!exists(&mut conn, &lock_key(&name)).await);

    let g = c.mutex(&name).with_lease(LONG).lock().await.unwrap();
    for lease in [Duration::ZERO, MAX_LEASE + Duration::from_secs(1)] {
        let r = g.extend(lease).await;
        assert!(
            matches!(r, Err(Error::InvalidLease { .. })),
            "extend({lease:?}): {r:?}"
        );
    }
    let ttl = pttl(&mut conn, &lock_key(&name)).await;
    assert!(
        ttl > 20_000 && ttl <= 30_000,
        "a rejected extend changed the lease: {ttl}"
    );
    g.unlock().await.unwrap();

    // MAX_LEASE itself is accepted.
    let g = c
        .mutex(&name)
        .with_lease(MAX_LEASE)
        .lock()
        .await
        .expect("MAX_LEASE");
    assert!(pttl(&mut conn, &lock_key(&name)).await > 3_600_000);
    g.unlock().await.unwrap();
}

/// Fractional milliseconds round up, never down (a lease under 1 ms is
/// refused: see input_lease.rs).
#[tokio::test]
async fn fractional_milliseconds_round_up() {
    let url = redis_url();
    let monitor = Monitor::start(&url).await;
    let c = client(&url).await;
    let mut conn = raw(&url).await;

    let name = unique("frac-ms");
    let g = c
        .mutex(&name)
        .with_lease(Duration::from_micros(1300))
        .lock()
        .await
        .expect("a 1.3 ms lease");
    drop(g);
    let name2 = unique("frac-ms-part");
    let g = c
        .mutex(&name2)
        .with_lease(Duration::new(5, 300_000))
        .lock()
        .await
        .expect("a 5.0003 s lease");
    let ttl = pttl(&mut conn, &lock_key(&name2)).await;
    assert!(ttl > 0 && ttl <= 5001, "pttl {ttl}");
    // 2 ms on the server; the lease is over by the time the reply is read,
    // so the guard may already call it lost.
    let r = g.extend(Duration::from_micros(1001)).await;
    assert!(
        matches!(r, Ok(()) | Err(redbell::Error::NotHeld)),
        "extend by 1.001 ms: {r:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !exists(&mut conn, &lock_key(&name2)).await,
        "a 2 ms extend did not expire"
    );

    monitor.sync().await;
    let set = monitor.matching_since(0, &["\"set\"", &lock_key(&name), "\"nx\""]);
    assert_eq!(set.len(), 1, "{set:#?}");
    assert!(
        set[0].to_ascii_lowercase().ends_with("\"px\" \"2\""),
        "{}",
        set[0]
    );
    let set = monitor.matching_since(0, &["\"set\"", &lock_key(&name2), "\"nx\""]);
    assert!(
        set[0].to_ascii_lowercase().ends_with("\"px\" \"5001\""),
        "{}",
        set[0]
    );
    // A renewal tries GT first; the 2 ms extend shortens, so LT sets it.
    let ext = monitor.matching_since(0, &["\"pexpire\"", &lock_key(&name2)]);
    assert!(ext.iter().any(|e| e.ends_with("\"2\" \"LT\"")), "{ext:?}");

    // The 2 ms key expired on its own: the name is free again.
    let g = timeout(PROMPT, c.mutex(&name).lock())
        .await
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn lock_key_of_the_wrong_type() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("hash-lock");
    let key = lock_key(&name);
    hset(&mut conn, &key, "owner", "someone else").await;
    all_fail(&c.mutex(&name).with_lease(LONG), |op, e| match e {
        Error::WrongType { key: k } => assert_eq!(k, key, "{op}"),
        e => panic!("{op}: expected WrongType, got {e:?}"),
    })
    .await;
    let v = hgetall(&mut conn, &key).await;
    assert_eq!(v, ["owner", "someone else"], "the hash was modified");
    assert_eq!(pttl(&mut conn, &key).await, -1, "the hash got an expiry");
    assert!(
        !exists(&mut conn, &fence_key(&name)).await,
        "a fence was advanced"
    );
    del(&mut conn, &[&key]).await;
}

#[tokio::test]
async fn fence_key_of_the_wrong_type() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("hash-fence");
    let fence = fence_key(&name);
    hset(&mut conn, &fence, "f", "v").await;
    all_fail(&c.mutex(&name).with_lease(LONG), |op, e| {
        assert!(matches!(e, Error::WrongType { .. }), "{op}: {e:?}");
    })
    .await;
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "a lock key was left behind"
    );
    let v = hgetall(&mut conn, &fence).await;
    assert_eq!(v, ["f", "v"]);
    del(&mut conn, &[&fence]).await;
}

/// The WrongType error should name the key that actually has the wrong type.
#[tokio::test]
async fn wrong_type_error_names_the_fence_key() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("hash-fence-name");
    let fence = fence_key(&name);
    hset(&mut conn, &fence, "f", "v").await;
    let e = c
        .mutex(&name)
        .try_lock()
        .await
        .expect_err("a hash fence key");
    del(&mut conn, &[&fence]).await;
    match e {
        Error::WrongType { key } => assert_eq!(
            key, fence,
            "the error blames the lock key, which does not even exist; the fence key is the hash"
        ),
        e => panic!("expected WrongType, got {e:?}"),
    }
}

/// A lock key that is a string without expiry (not written by redbell): the
/// waiter parks in bounded steps and times out; the key is untouched.
#[tokio::test]
async fn foreign_key_without_expiry() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("no-expiry");
    let key = lock_key(&name);
    set(&mut conn, &key, "manual").await;
    let mutex = c.mutex(&name).with_lease(LONG);
    assert!(matches!(mutex.try_lock().await, Ok(None)));
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(10),
        mutex.lock_timeout(Duration::from_millis(1500)),
    )
    .await
    .expect("lock_timeout hung on a key without expiry");
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some("manual"));
    assert_eq!(pttl(&mut conn, &key).await, -1);
    // Deleted by hand (no PUBLISH): a waiter notices within its bounded park.
    let waiter = tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    del(&mut conn, &[&key]).await;
    let deleted_at = Instant::now();
    let g = waiter
        .await
        .unwrap()
        .expect("lock after the foreign key was deleted");
    assert!(
        deleted_at.elapsed() < Duration::from_secs(3),
        "{:?}",
        deleted_at.elapsed()
    );
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_at_connect() {
    let port = free_port();
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(10),
        Client::connect(format!("redis://127.0.0.1:{port}")),
    )
    .await
    .expect("connect hung on a closed port");
    match r {
        Err(e @ Error::Redis(_)) => assert!(e.is_retryable(), "refused should be retryable: {e}"),
        other => panic!("expected Error::Redis, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    for url in [
        "not a url",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:99999",
    ] {
        let r = timeout(Duration::from_secs(10), Client::connect(url))
            .await
            .expect("connect hung on a bad url");
        assert!(matches!(r, Err(Error::Redis(_))), "{url}: {r:?}");
    }
}

#[tokio::test]
async fn bad_builder_settings() {
    let url = redis_url();
    for prefix in ["", "a{b", "a}b", "tab\there"] {
        let r = Client::builder(url.as_str()).prefix(prefix).connect().await;
        assert!(
            matches!(r, Err(Error::InvalidName { .. })),
            "prefix {prefix:?}: {r:?}"
        );
    }
    for lease in [Duration::ZERO, Duration::MAX] {
        let r = Client::builder(url.as_str())
            .default_lease(lease)
            .connect()
            .await;
        assert!(
            matches!(r, Err(Error::InvalidLease { .. })),
            "default_lease {lease:?}: {r:?}"
        );
    }

    // A custom prefix and default lease are used.
    let prefix = unique("prefix");
    let c = Client::builder(url.as_str())
        .prefix(&prefix)
        .default_lease(Duration::from_secs(7))
        .renew_every(Duration::from_secs(2))
        .subscription_linger(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&url).await;
    let g = c.mutex("job").lock().await.unwrap();
    let key = format!("{prefix}:{{job}}");
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some(g.token()));
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 5_000 && ttl <= 7_000, "pttl {ttl}");
    g.unlock().await.unwrap();
    del(&mut conn, &[&format!("{prefix}:{{job}}:fence")]).await;
}

#[tokio::test]
async fn wrong_password() {
    let redis = PrivateRedis::start_with_password("s3cret-pw").await;
    let port = redis.port();
    let r = timeout(
        Duration::from_secs(10),
        Client::connect(format!("redis://:wrong@127.0.0.1:{port}")),
    )
    .await
    .expect("connect with a wrong password hung");
    match r {
        Err(e @ Error::Redis(_)) => {
            assert!(!e.is_retryable(), "an auth failure is not retryable: {e}")
        }
        other => panic!("expected Error::Redis, got {other:?}"),
    }

    // No password at all: refused at connect or at the first command.
    match timeout(
        Duration::from_secs(10),
        Client::connect(redis.url_without_password()),
    )
    .await
    .expect("connect without a password hung")
    {
        Err(Error::Redis(_)) => {}
        Err(e) => panic!("expected Error::Redis, got {e:?}"),
        Ok(c) => {
            let r = timeout(PROMPT, c.mutex(&unique("noauth")).lock())
                .await
                .expect("lock without auth hung");
            assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
        }
    }

    let c = client(&redis.url()).await;
    let g = c
        .mutex(&unique("auth"))
        .lock()
        .await
        .expect("with the right password");
    g.unlock().await.unwrap();
}

/// SCRIPT FLUSH between calls: every operation reloads its script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_between_calls() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let flush = || redis::cmd("SCRIPT").arg("FLUSH").clone();
    let (a, b) = (client(&url).await, client(&url).await);
    let name = unique("flush");
    let key = lock_key(&name);

    let g = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let _: () = flush().query_async(&mut conn).await.unwrap();
    g.extend(Duration::from_secs(20))
        .await
        .expect("extend after a flush");
    let _: () = flush().query_async(&mut conn).await.unwrap();
    g.unlock().await.expect("unlock after a flush");
    let _: () = flush().query_async(&mut conn).await.unwrap();

    // A contended hand-off with flushes on both sides.
    let g = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let mutex = b.mutex(&name).with_lease(LONG);
    let waiter = tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: () = flush().query_async(&mut conn).await.unwrap();
    g.unlock().await.unwrap();
    let g = waiter.await.unwrap().expect("waiter after a flush");
    let _: () = flush().query_async(&mut conn).await.unwrap();
    drop(g);
    let released = gone_within(&conn, &key, Duration::from_secs(2)).await;
    assert!(released, "background release after a flush failed");
}
