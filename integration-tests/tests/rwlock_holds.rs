//! The RwLock's holds against a real Redis: readers together and writers
//! alone (checked by counters in Redis across clients), per-reader holds and
//! leases, expired holders that cannot touch the next one's hold, fences, and
//! renewal.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use redbell::Error;
use redbell_integration_tests::{
    LONG, PROMPT, client, del, exists, fence_key, get, intents_key, join_within, lock_key,
    promptly, pttl, raw, readers_key, redis_url, server_ms, test_key, unique, zcard,
};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

async fn zscore(conn: &mut MultiplexedConnection, key: &str, member: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query_async(conn)
        .await
        .expect("ZSCORE")
}

/// Whether `token` is a live reader of lock `name`: in the readers set with
/// an expiry after the server's now.
async fn live_reader(conn: &mut MultiplexedConnection, name: &str, token: &str) -> bool {
    let now = server_ms(conn).await;
    zscore(conn, &readers_key(name), token)
        .await
        .is_some_and(|expiry| expiry > now as f64)
}

/// Checker entry: INCR my counter, return `{mine (after), other}` atomically.
const ENTER: &str = r"
local mine = redis.call('INCR', KEYS[1])
local other = tonumber(redis.call('GET', KEYS[2]) or '0')
return {mine, other}";

/// Checker exit: return `{mine (before), other}`, then DECR mine, atomically.
const LEAVE: &str = r"
local mine = tonumber(redis.call('GET', KEYS[1]) or '0')
local other = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('DECR', KEYS[1])
return {mine, other}";

/// 3 clients x 10 tasks, 80% reads and 20% writes for ~3 s. Counters in
/// Redis, changed atomically on entry and exit of every critical section,
/// never show a writer together with anyone; readers do share the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_are_alone_under_load() {
    let url = redis_url();
    let name = unique("rw-load");
    let readers_in = test_key(&name, "readers_in");
    let writers_in = test_key(&name, "writers_in");
    let enter = Arc::new(redis::Script::new(ENTER));
    let leave = Arc::new(redis::Script::new(LEAVE));
    let violations = Arc::new(StdMutex::new(Vec::<String>::new()));
    let max_readers = Arc::new(AtomicU64::new(0));
    let (reads, writes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop_at = Instant::now() + Duration::from_secs(3);

    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&url).await;
        let conn = raw(&url).await;
        for _ in 0..10 {
            let rw = c.rwlock(&name).with_lease(LONG);
            let mut conn = conn.clone();
            let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
            let (enter, leave) = (enter.clone(), leave.clone());
            let violations = violations.clone();
            let max_readers = max_readers.clone();
            let (reads, writes) = (reads.clone(), writes.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < stop_at {
                    let (write, hold_ms) = {
                        let mut rng = rand::rng();
                        (rng.random_range(0..100) < 20, rng.random_range(3..15))
                    };
                    if write {
                        let g = rw
                            .write_timeout(Duration::from_secs(20))
                            .await
                            .expect("write");
                        let (w, r): (i64, i64) = enter
                            .key(&writers_in)
                            .key(&readers_in)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        if w != 1 || r != 0 {
                            violations.lock().unwrap().push(format!(
                                "a writer got in with {} other writers and {r} readers",
                                w - 1
                            ));
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let (w, r): (i64, i64) = leave
                            .key(&writers_in)
                            .key(&readers_in)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        if w != 1 || r != 0 {
                            violations.lock().unwrap().push(format!(
                                "a writer left with {} other writers and {r} readers inside",
                                w - 1
                            ));
                        }
                        writes.fetch_add(1, Ordering::SeqCst);
                        g.unlock().await.expect("writer unlock");
                    } else {
                        let g = rw
                            .read_timeout(Duration::from_secs(20))
                            .await
                            .expect("read");
                        let (r, w): (i64, i64) = enter
                            .key(&readers_in)
                            .key(&writers_in)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        if w != 0 {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("a reader got in with {w} writers inside"));
                        }
                        max_readers.fetch_max(r as u64, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                        let (_, w): (i64, i64) = leave
                            .key(&readers_in)
                            .key(&writers_in)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        if w != 0 {
                            violations
                                .lock()
                                .unwrap()
                                .push(format!("a reader left with {w} writers inside"));
                        }
                        reads.fetch_add(1, Ordering::SeqCst);
                        g.unlock().await.expect("reader unlock");
                    }
                }
            }));
        }
    }
    join_within(
        Duration::from_secs(60),
        tasks,
        "the load run did not finish within 60 s",
    )
    .await;
    let violations = violations.lock().unwrap().clone();
    let (reads, writes) = (reads.load(Ordering::SeqCst), writes.load(Ordering::SeqCst));
    let max_readers = max_readers.load(Ordering::SeqCst);
    eprintln!("{reads} reads, {writes} writes, at most {max_readers} readers together");
    assert!(
        violations.is_empty(),
        "{} exclusion violations, e.g. {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    assert!(max_readers >= 2, "readers never held the lock together");
    assert!(writes >= 5, "only {writes} writes in 3 s");
    assert!(reads >= 20, "only {reads} reads in 3 s");

    let mut conn = raw(&url).await;
    assert!(
        !exists(&mut conn, &lock_key(&name)).await,
        "writer key left behind"
    );
    assert_eq!(
        zcard(&mut conn, &readers_key(&name)).await,
        0,
        "readers left behind"
    );
    assert_eq!(
        zcard(&mut conn, &intents_key(&name)).await,
        0,
        "intents left behind"
    );
    del(&mut conn, &[&readers_in, &writers_in, &fence_key(&name)]).await;
}

/// One reader's unlock leaves another reader's hold in place: a writer still
/// cannot get in, and the other token is still a live reader.
#[tokio::test]
async fn one_readers_unlock_leaves_the_others_hold() {
    let url = redis_url();
    let name = unique("rw-readers");
    let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;

    let r1 = a.rwlock(&name).with_lease(LONG).read().await.unwrap();
    let r2 = b.rwlock(&name).with_lease(LONG).read().await.unwrap();
    assert_ne!(r1.token(), r2.token());
    assert_eq!(zcard(&mut conn, &readers_key(&name)).await, 2);
    let r1_token = r1.token().to_owned();
    r1.unlock().await.expect("first reader's unlock");

    assert!(
        live_reader(&mut conn, &name, r2.token()).await,
        "the second reader's hold went with the first one's unlock"
    );
    assert!(
        zscore(&mut conn, &readers_key(&name), &r1_token)
            .await
            .is_none()
    );
    let w = c.rwlock(&name).with_lease(LONG);
    assert!(
        w.try_write().await.unwrap().is_none(),
        "a writer got in while a reader held the lock"
    );
    assert!(matches!(
        w.write_timeout(Duration::from_millis(300)).await,
        Err(Error::Timeout)
    ));
    assert!(!r2.is_lost());
    r2.unlock().await.expect("second reader's unlock");
    let g = w
        .try_write()
        .await
        .unwrap()
        .expect("free once both readers left");
    g.unlock().await.unwrap();
    assert!(!exists(&mut conn, &readers_key(&name)).await);
}

/// A reader that vanished (guard leaked, 500 ms lease) keeps a writer out
/// until its own lease ends, and no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_reader_blocks_a_writer_only_until_its_lease_ends() {
    let url = redis_url();
    let name = unique("rw-leak");
    let (a, b) = (client(&url).await, client(&url).await);
    let locking_at = Instant::now();
    let reader = a
        .rwlock(&name)
        .with_lease(Duration::from_millis(500))
        .read()
        .await
        .unwrap();
    let leaked_at = Instant::now();
    std::mem::forget(reader);

    let w = timeout(PROMPT, b.rwlock(&name).with_lease(LONG).write())
        .await
        .expect("the writer hung behind a crashed reader")
        .unwrap();
    let waited = leaked_at.elapsed();
    eprintln!("writer in {waited:?} after the reader vanished (lease 500 ms)");
    assert!(
        locking_at.elapsed() >= Duration::from_millis(400),
        "the writer got in {:?} after the reader's read() started: before its lease ended",
        locking_at.elapsed()
    );
    assert!(
        waited <= Duration::from_millis(1500),
        "the writer got in {waited:?} after the leak: the reader's lease end did not let it in"
    );
    w.unlock().await.unwrap();
}

/// A reader whose 200 ms lease ran out can neither extend nor unlock (NotHeld),
/// and the other reader's entry is untouched.
#[tokio::test]
async fn expired_reader_cannot_extend_or_unlock() {
    let url = redis_url();
    let name = unique("rw-owner-r");
    let (a, b) = (client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let short = a
        .rwlock(&name)
        .with_lease(Duration::from_millis(200))
        .read()
        .await
        .unwrap();
    let other = b.rwlock(&name).with_lease(LONG).read().await.unwrap();
    let other_expiry = zscore(&mut conn, &readers_key(&name), other.token()).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        short.is_lost(),
        "a 200 ms fixed lease is not lost after 400 ms"
    );

    let r = promptly("extend", short.extend(LONG)).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert!(
        !live_reader(&mut conn, &name, short.token()).await,
        "extend revived an expired reader"
    );
    let short_token = short.token().to_owned();
    let r = promptly("unlock", short.unlock()).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert!(
        zscore(&mut conn, &readers_key(&name), &short_token)
            .await
            .is_none()
    );
    assert_eq!(
        zscore(&mut conn, &readers_key(&name), other.token()).await,
        other_expiry,
        "the other reader's entry was changed"
    );
    assert!(live_reader(&mut conn, &name, other.token()).await);
    other.unlock().await.expect("the other reader still holds");
}

/// A writer's lease ran out and another writer took the lock: the first can
/// neither extend nor unlock it, and the second's key is untouched.
#[tokio::test]
async fn expired_writer_cannot_touch_the_next_writers_hold() {
    let url = redis_url();
    let name = unique("rw-owner-w");
    let (a, b) = (client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let key = lock_key(&name);
    let old = a
        .rwlock(&name)
        .with_lease(Duration::from_millis(200))
        .write()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let new = timeout(
        PROMPT,
        b.rwlock(&name).with_lease(Duration::from_secs(20)).write(),
    )
    .await
    .expect("B could not take an expired write lock")
    .unwrap();
    assert!(new.fence() > old.fence());

    let r = promptly("extend", old.extend(Duration::from_secs(100))).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        ttl > 0 && ttl <= 20_000,
        "the old writer's extend changed B's lease: {ttl}"
    );
    let r = promptly("unlock", old.unlock()).await;
    assert!(matches!(r, Err(Error::NotHeld)), "{r:?}");
    assert_eq!(get(&mut conn, &key).await.as_deref(), Some(new.token()));

    // Nor can a reader's guard touch the writer's key.
    let c = client(&url).await;
    assert!(c.rwlock(&name).try_read().await.unwrap().is_none());
    new.unlock().await.expect("B still owns the write lock");
    assert!(!exists(&mut conn, &key).await);
}

/// Writers' fences strictly increase across 3 clients; each reader's fence
/// is the fence of the last writer before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_fences_increase_and_readers_see_the_last_one() {
    let url = redis_url();
    let name = unique("rw-fence");
    let writer_fences = Arc::new(StdMutex::new(Vec::<u64>::new()));
    let last = Arc::new(StdMutex::new(0u64));
    let reader_checks = Arc::new(AtomicUsize::new(0));
    let mismatches = Arc::new(StdMutex::new(Vec::<(u64, u64)>::new()));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&url).await;
        for _ in 0..2 {
            let rw = c.rwlock(&name).with_lease(LONG);
            let (writer_fences, last_w) = (writer_fences.clone(), last.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = rw.write().await.expect("write");
                    writer_fences.lock().unwrap().push(g.fence());
                    *last_w.lock().unwrap() = g.fence();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.unlock().await.expect("writer unlock");
                }
            }));
            let rw = c.rwlock(&name).with_lease(LONG);
            let (last, reader_checks, mismatches) =
                (last.clone(), reader_checks.clone(), mismatches.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..15 {
                    let g = rw.read().await.expect("read");
                    let expected = *last.lock().unwrap();
                    if g.fence() != expected {
                        mismatches.lock().unwrap().push((g.fence(), expected));
                    }
                    reader_checks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    g.unlock().await.expect("reader unlock");
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "fence run took over 60 s").await;
    let fences = writer_fences.lock().unwrap().clone();
    assert_eq!(fences.len(), 60);
    for w in fences.windows(2) {
        assert!(w[0] < w[1], "writer fence went from {} to {}", w[0], w[1]);
    }
    let mismatches = mismatches.lock().unwrap().clone();
    assert!(
        mismatches.is_empty(),
        "readers' fences differ from the last writer's (got, expected): {mismatches:?}"
    );
    assert_eq!(reader_checks.load(Ordering::SeqCst), 90);
    let mut conn = raw(&url).await;
    let stored: u64 = get(&mut conn, &fence_key(&name))
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(stored, *fences.last().unwrap());

    // A reader of a lock never written has fence 0, or the last writer's.
    let c = client(&url).await;
    let fresh = unique("rw-fence-fresh");
    let r = c.rwlock(&fresh).read().await.unwrap();
    assert_eq!(r.fence(), 0);
    r.unlock().await.unwrap();
    let w = c.rwlock(&fresh).write().await.unwrap();
    let f = w.fence();
    w.unlock().await.unwrap();
    let r = c.rwlock(&fresh).read().await.unwrap();
    assert_eq!(r.fence(), f);
    r.unlock().await.unwrap();
}

/// With a 1 s renewed lease, a read hold and a write hold kept for 3 s stay
/// held in Redis the whole time, and neither is reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_read_and_write_holds_alive() {
    let url = redis_url();
    let c = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let (rname, wname) = (unique("rw-renew-r"), unique("rw-renew-w"));
    let mut conn = raw(&url).await;
    let r = c.rwlock(&rname).read().await.unwrap();
    let w = c.rwlock(&wname).write().await.unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let mut checks = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            live_reader(&mut conn, &rname, r.token()).await,
            "the read hold expired after {checks} checks"
        );
        let ttl = pttl(&mut conn, &readers_key(&rname)).await;
        assert!(
            ttl > 0,
            "the readers set lost its expiry or vanished: {ttl}"
        );
        assert_eq!(
            get(&mut conn, &lock_key(&wname)).await.as_deref(),
            Some(w.token()),
            "the write hold expired after {checks} checks"
        );
        let ttl = pttl(&mut conn, &lock_key(&wname)).await;
        assert!(ttl > 0 && ttl <= 1000, "writer pttl {ttl}");
        assert!(
            !r.is_lost() && !w.is_lost(),
            "a renewed lease was reported lost"
        );
        checks += 1;
    }
    // The other side of the lock sees the holds.
    let other = client(&url).await;
    assert!(other.rwlock(&rname).try_write().await.unwrap().is_none());
    assert!(other.rwlock(&wname).try_read().await.unwrap().is_none());
    r.unlock().await.expect("read hold still ours after 3 s");
    w.unlock().await.expect("write hold still ours after 3 s");
}
