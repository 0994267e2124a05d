//! The RwLock's input against a real Redis: bad names and leases are
//! rejected, and foreign data under the lock's keys is a `WrongType` that
//! names the key and leaves no hold behind.

use std::time::Duration;

use redbell::{Error, RwLock};
use redbell_integration_tests::{
    LONG, client, del, exists, fails_promptly, fence_key, get, hgetall, hset, intents_key,
    lock_key, lock_pattern, promptly, pttl, raw, readers_key, redis_url, scan, set, unique,
};
use redis::aio::MultiplexedConnection;

/// Every key of lock `name`.
async fn scan_lock(conn: &mut MultiplexedConnection, name: &str) -> Vec<String> {
    scan(conn, &lock_pattern(name)).await
}

/// Every operation of `rw` fails with an error handed to `check`; none
/// succeeds, hangs or panics.
async fn all_fail(rw: &RwLock, check: impl Fn(&str, Error)) {
    check("read", fails_promptly("read()", rw.read()).await);
    check(
        "try_read",
        fails_promptly("try_read()", rw.try_read()).await,
    );
    let second = Duration::from_secs(1);
    let e = fails_promptly("read_timeout()", rw.read_timeout(second)).await;
    check("read_timeout", e);
    check("write", fails_promptly("write()", rw.write()).await);
    check(
        "try_write",
        fails_promptly("try_write()", rw.try_write()).await,
    );
    let e = fails_promptly("write_timeout()", rw.write_timeout(second)).await;
    check("write_timeout", e);
}

/// Empty and braced names give InvalidName, a zero lease InvalidLease, for
/// every operation; nothing is written.
#[tokio::test]
async fn invalid_names_and_leases_are_rejected() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let braced = unique("braced");
    for name in [
        String::new(),
        format!("{}{{", unique("open")),
        format!("{}}}", unique("close")),
        format!("{{{braced}}}"),
    ] {
        all_fail(&c.rwlock(&name), |op, e| {
            assert!(
                matches!(e, Error::InvalidName { .. }),
                "{op} on {name:?}: {e:?}"
            );
        })
        .await;
    }
    assert!(!exists(&mut conn, &format!("redbell:{{{{{braced}}}}}")).await);

    let name = unique("rw-zero-lease");
    all_fail(&c.rwlock(&name).with_lease(Duration::ZERO), |op, e| {
        assert!(matches!(e, Error::InvalidLease { .. }), "{op}: {e:?}");
    })
    .await;
    assert!(scan_lock(&mut conn, &name).await.is_empty());

    let g = c.rwlock(&name).with_lease(LONG).read().await.unwrap();
    assert!(matches!(
        g.extend(Duration::ZERO).await,
        Err(Error::InvalidLease { .. })
    ));
    g.unlock().await.unwrap();
    let g = c.rwlock(&name).with_lease(LONG).write().await.unwrap();
    assert!(matches!(
        g.extend(Duration::ZERO).await,
        Err(Error::InvalidLease { .. })
    ));
    g.unlock().await.unwrap();
}

/// Foreign data under the writer key (a hash) or the readers key (a
/// string): every operation gives WrongType, and the data is left alone.
#[tokio::test]
async fn foreign_data_under_the_lock_keys_is_wrong_type() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;

    let name = unique("rw-hash-writer");
    let key = lock_key(&name);
    hset(&mut conn, &key, "owner", "someone else").await;
    all_fail(&c.rwlock(&name).with_lease(LONG), |op, e| {
        assert!(matches!(e, Error::WrongType { .. }), "{op}: {e:?}");
    })
    .await;
    let v = hgetall(&mut conn, &key).await;
    assert_eq!(v, ["owner", "someone else"], "the hash was modified");
    assert_eq!(pttl(&mut conn, &key).await, -1, "the hash got an expiry");
    assert_eq!(
        scan_lock(&mut conn, &name).await,
        std::slice::from_ref(&key),
        "keys were created"
    );
    del(&mut conn, &[&key]).await;

    let name = unique("rw-string-readers");
    let readers = readers_key(&name);
    set(&mut conn, &readers, "not a sorted set").await;
    all_fail(&c.rwlock(&name).with_lease(LONG), |op, e| {
        assert!(matches!(e, Error::WrongType { .. }), "{op}: {e:?}");
    })
    .await;
    assert_eq!(
        get(&mut conn, &readers).await.as_deref(),
        Some("not a sorted set")
    );
    assert_eq!(
        scan_lock(&mut conn, &name).await,
        std::slice::from_ref(&readers),
        "keys were created (a writer or fence left behind?)"
    );
    del(&mut conn, &[&readers]).await;
}

/// The WrongType error names the key that holds the foreign data.
#[tokio::test]
async fn wrong_type_error_names_the_offending_key() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("rw-wrongtype-key");
    let key = lock_key(&name);
    hset(&mut conn, &key, "f", "v").await;
    let rw = c.rwlock(&name).with_lease(LONG);
    let mut named = Vec::new();
    for (op, r) in [
        ("read", promptly("read()", rw.read()).await.map(drop)),
        ("write", promptly("write()", rw.write()).await.map(drop)),
    ] {
        match r {
            Err(Error::WrongType { key: k }) => named.push((op, k)),
            r => panic!("{op}: expected WrongType, got {r:?}"),
        }
    }
    del(&mut conn, &[&key]).await;
    for (op, k) in named {
        assert_eq!(
            k, key,
            "{op}() on a lock whose writer key is a hash blames another key"
        );
    }
}

/// A string under the writer-intents key: read() and write() fail with
/// WrongType, and write() leaves no write hold behind (the lock is not
/// blocked for a lease afterwards).
#[tokio::test]
async fn foreign_intents_key_leaves_no_hold_behind() {
    let url = redis_url();
    let c = client(&url).await;
    let mut conn = raw(&url).await;
    let name = unique("rw-string-intents");
    let intents = intents_key(&name);
    set(&mut conn, &intents, "not a sorted set").await;
    let rw = c.rwlock(&name).with_lease(LONG);
    let r = promptly("read()", rw.read()).await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    let r = promptly("write()", rw.write()).await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    // Give a background release, if any, time to land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let writer = get(&mut conn, &lock_key(&name)).await;
    let ttl = pttl(&mut conn, &lock_key(&name)).await;
    let intents_value = get(&mut conn, &intents).await;
    del(&mut conn, &[&intents, &lock_key(&name), &fence_key(&name)]).await;
    assert_eq!(intents_value.as_deref(), Some("not a sorted set"));
    assert!(
        writer.is_none(),
        "write() reported WrongType but left a write hold (token {writer:?}, pttl {ttl} ms) \
         that nobody releases: every reader and writer is locked out until it expires"
    );
}
