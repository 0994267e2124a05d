//! The RwLock's writer preference against a real Redis: a waiting writer
//! holds new readers back and is not starved by overlapping readers; a
//! writer that gives up (timed out, cancelled) or crashes while holding lets
//! the held-back readers in at once, or at its lease's end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redbell::{Client, Error, ReadGuard, RwLock, WriteGuard};
use redbell_integration_tests::{
    LONG, PROMPT, Side, client, intents_key, raw, redis_url, spawn_timed, unique, wait_for_members,
    wait_for_subscribers, zcard,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// Waits until lock `name` has `n` waiting writers' intents registered.
async fn wait_for_intents(url: &str, name: &str, n: i64) {
    let conn = raw(url).await;
    wait_for_members(&conn, &intents_key(name), n, Duration::from_millis(20)).await;
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

/// The writer `spawn` starts waits behind a reader of lock `name`, and a
/// reader is held back behind it; `give_up` ends the writer and returns
/// when it gave up. The held-back reader must be in within 500 ms of that
/// (else it fails with `waited`), and the writer's intent gone; `how` says
/// how the writer gave up, for the log.
async fn writer_gives_up<T, Fut>(
    url: &str,
    name: &str,
    (b, c): (&Client, &Client),
    spawn: impl FnOnce(RwLock) -> JoinHandle<T>,
    give_up: impl FnOnce(JoinHandle<T>) -> Fut,
    (waited, how): (&str, &str),
) where
    Fut: Future<Output = Instant>,
{
    let mut conn = raw(url).await;
    let writer = spawn(b.rwlock(name).with_lease(LONG));
    wait_for_intents(url, name, 1).await;
    let reader = spawn_held_back_reader(c.rwlock(name).with_lease(LONG)).await;
    let gave_up_at = give_up(writer).await;
    let (delay, r) = held_back_reader_in(reader, gave_up_at, waited).await;
    eprintln!("reader in {delay:?} after the writer {how}");
    assert!(
        delay < Duration::from_millis(500),
        "reader in after {delay:?}"
    );
    assert_eq!(zcard(&mut conn, &intents_key(name)).await, 0);
    r.unlock().await.unwrap();
}

/// A waiting writer that times out (or is cancelled) withdraws its intent at
/// once: the readers it held back get in at once, not when the intent expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_giving_up_lets_held_back_readers_in_at_once() {
    let url = redis_url();
    let name = unique("rw-withdraw");
    let (a, b, c) = (client(&url).await, client(&url).await, client(&url).await);
    let r1 = a.rwlock(&name).with_lease(LONG).read().await.unwrap();

    // Timed out.
    let writer =
        |wl: RwLock| spawn_timed(async move { wl.write_timeout(Duration::from_millis(800)).await });
    let timed_out = |writer: JoinHandle<(Instant, Result<WriteGuard, Error>)>| async move {
        let (gave_up_at, w) = timeout(PROMPT, writer).await.unwrap().unwrap();
        assert!(matches!(w, Err(Error::Timeout)), "{w:?}");
        gave_up_at
    };
    let waited = "the reader waited for the withdrawn intent to expire";
    writer_gives_up(
        &url,
        &name,
        (&b, &c),
        writer,
        timed_out,
        (waited, "timed out"),
    )
    .await;

    // Cancelled (the write() future dropped).
    let writer = |wl: RwLock| tokio::spawn(async move { wl.write().await });
    let cancelled = |writer: JoinHandle<Result<WriteGuard, Error>>| async move {
        writer.abort();
        let cancelled_at = Instant::now();
        assert!(writer.await.unwrap_err().is_cancelled());
        cancelled_at
    };
    let waited = "the reader waited for a cancelled writer's intent to expire";
    writer_gives_up(
        &url,
        &name,
        (&b, &c),
        writer,
        cancelled,
        (waited, "was cancelled"),
    )
    .await;
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
