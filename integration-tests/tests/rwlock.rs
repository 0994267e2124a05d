//! The RwLock against a real Redis: readers together, writers alone (checked
//! by counters in Redis across clients), per-reader holds and leases, writer
//! preference, intents withdrawn on timeout, owner checks, fences, bad input
//! and renewal.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;
use redbell::{Error, ReadGuard, RwLock};
use redbell_integration_tests::{
    LONG, PROMPT, Side, client, del, exists, fails_promptly, fence_key, get, hgetall, hset,
    intents_key, join_within, lock_key, lock_pattern, promptly, pttl, raw, readers_key, redis_url,
    scan, server_ms, set, spawn_timed, test_key, unique, wait_for_members, wait_for_subscribers,
    zcard,
};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
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

/// Waits until lock `name` has `n` waiting writers' intents registered.
async fn wait_for_intents(url: &str, name: &str, n: i64) {
    let conn = raw(url).await;
    wait_for_members(&conn, &intents_key(name), n, Duration::from_millis(20)).await;
}

/// Every key of lock `name`.
async fn scan_lock(conn: &mut MultiplexedConnection, name: &str) -> Vec<String> {
    scan(conn, &lock_pattern(name)).await
}

/// A read() of `rl` spawned while a writer waits: it must be held back
/// (still waiting 200 ms later). Returns the task, which notes when the
/// reader got in.
async fn spawn_held_back_reader(rl: RwLock) -> JoinHandle<(Instant, Result<ReadGuard, Error>)> {
    let reader = spawn_timed(async move { rl.read().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !reader.is_finished(),
        "a reader got in past a waiting writer"
    );
    reader
}

/// Awaits a held-back reader ([`spawn_held_back_reader`]) for at most
/// [`PROMPT`] (else fails with `on_timeout`): its guard, and how long after
/// `since` it got in.
async fn held_back_reader_in(
    reader: JoinHandle<(Instant, Result<ReadGuard, Error>)>,
    since: Instant,
    on_timeout: &str,
) -> (Duration, ReadGuard) {
    let (in_at, g) = timeout(PROMPT, reader).await.expect(on_timeout).unwrap();
    (in_at.saturating_duration_since(since), g.unwrap())
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

/// While a writer waits behind a reader, new readers are held back (writer
/// preference); the writer gets in when the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_new_readers_back() {
    let url = redis_url();
    let name = unique("rw-pref");
    let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
    let r1 = a.rwlock(&name).with_lease(LONG).read().await.unwrap();
    let wl = b.rwlock(&name).with_lease(LONG);
    let writer = spawn_timed(async move { wl.write().await });
    wait_for_intents(&url, &name, 1).await;
    let late = c.rwlock(&name).with_lease(LONG);
    assert!(
        late.try_read().await.unwrap().is_none(),
        "a new reader got in ahead of a waiting writer"
    );
    assert!(matches!(
        late.read_timeout(Duration::from_millis(300)).await,
        Err(Error::Timeout)
    ));
    assert!(!writer.is_finished(), "the writer got in beside a reader");

    let released_at = Instant::now();
    r1.unlock().await.unwrap();
    let (in_at, w) = timeout(PROMPT, writer)
        .await
        .expect("writer not woken")
        .unwrap();
    let w = w.unwrap();
    let delay = in_at - released_at;
    eprintln!("writer in {delay:?} after the last reader left");
    assert!(
        delay < Duration::from_millis(500),
        "writer in after {delay:?}"
    );
    assert!(
        late.try_read().await.unwrap().is_none(),
        "reader beside a writer"
    );
    w.unlock().await.unwrap();
    let r = timeout(PROMPT, late.read())
        .await
        .expect("reader after the writer")
        .unwrap();
    r.unlock().await.unwrap();
}

/// 8 tasks on 2 clients keep overlapping read holds of ~50 ms, re-taking the
/// lock at once: a writer still gets in within about one read hold (3 rounds;
/// writer preference), and while it waits no new reader gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_is_not_starved_by_overlapping_readers() {
    const HOLD: Duration = Duration::from_millis(50);
    let url = redis_url();
    let name = unique("rw-starve");
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let c = client(&url).await;
        for _ in 0..4 {
            let i = readers.len() as u64;
            let rw = c.rwlock(&name).with_lease(LONG);
            let (stop, inside, reads) = (stop.clone(), inside.clone(), reads.clone());
            readers.push(tokio::spawn(async move {
                tokio::time::sleep(HOLD * i as u32 / 8).await; // staggered
                while !stop.load(Ordering::SeqCst) {
                    let g = rw
                        .read_timeout(Duration::from_secs(20))
                        .await
                        .expect("read");
                    inside.fetch_add(1, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.expect("reader unlock");
                }
            }));
        }
    }
    let writer_client = client(&url).await;
    let probe = client(&url).await.rwlock(&name).with_lease(LONG);
    let mut conn = raw(&url).await;
    tokio::time::sleep(Duration::from_millis(500)).await; // steady state

    let mut waits = Vec::new();
    let mut readers_at_start = Vec::new();
    for _ in 0..3 {
        let before = reads.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            reads.load(Ordering::SeqCst) > before,
            "the readers did not resume after the last writer"
        );
        readers_at_start.push(inside.load(Ordering::SeqCst));
        let rw = writer_client.rwlock(&name).with_lease(LONG);
        let started = Instant::now();
        let writer = tokio::spawn(async move {
            let g = rw.write_timeout(Duration::from_secs(10)).await;
            (started.elapsed(), g)
        });
        // While the writer waits (or holds), a new reader gets nothing.
        let mut probed = false;
        while !writer.is_finished() {
            if zcard(&mut conn, &intents_key(&name)).await > 0 {
                assert!(
                    probe.try_read().await.unwrap().is_none(),
                    "a new reader got in while a writer waited"
                );
                probed = true;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (waited, g) = writer.await.unwrap();
        let g = g.expect("the writer never got in past the readers");
        assert_eq!(
            inside.load(Ordering::SeqCst),
            0,
            "readers inside with the writer"
        );
        eprintln!("writer in after {waited:?} (probed while waiting: {probed})");
        waits.push(waited);
        tokio::time::sleep(Duration::from_millis(10)).await;
        g.unlock().await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        timeout(Duration::from_secs(10), r)
            .await
            .expect("reader stuck")
            .unwrap();
    }
    eprintln!(
        "readers inside when each writer started: {readers_at_start:?}; writer waits {waits:?}"
    );
    assert!(
        readers_at_start.iter().any(|&n| n >= 2),
        "the readers never overlapped: {readers_at_start:?}"
    );
    let worst = *waits.iter().max().unwrap();
    assert!(
        worst < Duration::from_millis(400),
        "a writer waited {worst:?} behind 50 ms read holds (waits {waits:?})"
    );
}

/// A waiting writer that times out (or is cancelled) withdraws its intent at
/// once: the readers it held back get in at once, not when the intent expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_giving_up_lets_held_back_readers_in_at_once() {
    let url = redis_url();
    let name = unique("rw-withdraw");
    let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
    let mut conn = raw(&url).await;
    let r1 = a.rwlock(&name).with_lease(LONG).read().await.unwrap();

    // Timed out.
    let wl = b.rwlock(&name).with_lease(LONG);
    let writer = spawn_timed(async move { wl.write_timeout(Duration::from_millis(800)).await });
    wait_for_intents(&url, &name, 1).await;
    let reader = spawn_held_back_reader(c.rwlock(&name).with_lease(LONG)).await;
    let (gave_up_at, w) = timeout(PROMPT, writer).await.unwrap().unwrap();
    assert!(matches!(w, Err(Error::Timeout)), "{w:?}");
    let (delay, r2) = held_back_reader_in(
        reader,
        gave_up_at,
        "the reader waited for the withdrawn intent to expire",
    )
    .await;
    eprintln!("reader in {delay:?} after the writer timed out");
    assert!(
        delay < Duration::from_millis(500),
        "reader in after {delay:?}"
    );
    assert_eq!(zcard(&mut conn, &intents_key(&name)).await, 0);
    r2.unlock().await.unwrap();

    // Cancelled (the write() future dropped).
    let wl = b.rwlock(&name).with_lease(LONG);
    let writer = tokio::spawn(async move { wl.write().await });
    wait_for_intents(&url, &name, 1).await;
    let reader = spawn_held_back_reader(c.rwlock(&name).with_lease(LONG)).await;
    writer.abort();
    let cancelled_at = Instant::now();
    assert!(writer.await.unwrap_err().is_cancelled());
    let (delay, r3) = held_back_reader_in(
        reader,
        cancelled_at,
        "the reader waited for a cancelled writer's intent to expire",
    )
    .await;
    eprintln!("reader in {delay:?} after the writer was cancelled");
    assert!(
        delay < Duration::from_millis(500),
        "reader in after {delay:?}"
    );
    assert_eq!(zcard(&mut conn, &intents_key(&name)).await, 0);
    r3.unlock().await.unwrap();
    r1.unlock().await.unwrap();
}

/// A reader held back by a waiting writer, which then gets in without a
/// wake-up reaching the reader and crashes while holding (guard leaked,
/// 500 ms lease): the reader gets in when that lease ends, not when the
/// writer's old intent would have expired.
///
/// The writer's client runs on a runtime of its own, frozen while the last
/// reader leaves, so the held-back reader's retry certainly still sees the
/// intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_writer_that_crashed_holding_get_in_at_its_lease_end() {
    let url = redis_url();
    let name = unique("rw-crashed-writer");
    let (a, c) = (client(&url).await, client(&url).await);
    let side = Side::start();
    let w = side.client(&url).await;
    let r1 = a
        .rwlock(&name)
        .with_lease(Duration::from_secs(4))
        .read()
        .await
        .unwrap();
    let wl = w.rwlock(&name).with_lease(Duration::from_millis(500));
    let writer = side.spawn(async move {
        let g = wl.write().await.expect("write");
        let in_at = Instant::now();
        std::mem::forget(g); // the writer crashes while holding
        in_at
    });
    wait_for_intents(&url, &name, 1).await;
    wait_for_subscribers(&url, &name, 1).await;
    let rl = c.rwlock(&name).with_lease(LONG);
    let reader = spawn_timed(async move { rl.read().await });
    wait_for_subscribers(&url, &name, 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !reader.is_finished(),
        "a reader got in past a waiting writer"
    );

    let frozen = side.freeze().await;
    r1.unlock().await.unwrap(); // wakes the held-back reader: the intent stands
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(frozen); // the writer wakes and gets in, without publishing
    let writer_in = timeout(PROMPT, writer)
        .await
        .expect("the writer never got in")
        .unwrap();
    let (reader_in, g) = timeout(Duration::from_secs(10), reader)
        .await
        .expect("the reader never got in")
        .unwrap();
    let g = g.unwrap();
    let delay = reader_in.saturating_duration_since(writer_in);
    eprintln!("reader in {delay:?} after the writer got in and crashed (its lease 500 ms)");
    g.unlock().await.unwrap();
    assert!(
        delay >= Duration::from_millis(400),
        "reader in beside the writer: {delay:?}"
    );
    assert!(
        delay < Duration::from_millis(1500),
        "reader in {delay:?} after a writer with a 500 ms lease crashed holding the lock"
    );
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
