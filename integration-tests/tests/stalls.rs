//! Every wait is bounded by what it waits for: no stall behind a frozen,
//! dead or half-open peer, while the lock is free.
//!
//! Each test reproduces its fault for real (a SIGSTOPped waiter process, a
//! frozen client runtime, a proxy that closes the server side of one
//! connection, a replica held back by SIGSTOP) and asserts the bound. Run
//! against the code before the fixes, each of them failed: the waiters sat
//! for about the holder's whole lease (see the comment above each test).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

use redbell_integration_tests::{
    PrivateRedis, Proxy, Side, client, fifo_key, got_within, lock_key, raw, redbell_binary,
    redis_port, redis_url, signal, unique, wait_for_members, wait_for_parked, waiters_key,
};

/// How long a live waiter may take to get a free lock after the release.
const BOUND: Duration = Duration::from_secs(1);

/// A `redbell run NAME -- sleep 30` process: a waiter (or holder) of its own.
struct RunProcess(Child);

impl RunProcess {
    fn start(url: &str, name: &str) -> RunProcess {
        let child = Command::new(redbell_binary())
            .args(["--url", url, "run", name, "--", "sleep", "30"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redbell run");
        RunProcess(child)
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Before the fix: the release woke the frozen head, whose socket stayed
/// open, so PUBLISH counted it; the three live waiters got the free lock
/// after about the holder's lease each (the test timed out at 10 s).
#[tokio::test]
async fn a_frozen_woken_waiter_process_does_not_stall_the_others() {
    let url = redis_url();
    let name = unique("frozen-head");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let guard = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .await
        .unwrap();

    // The frozen-to-be waiter queues first, while the holder's lease is
    // shorter: its queue entry expires first, so it is the head.
    let frozen = RunProcess::start(&url, &name);
    wait_for_members(&conn, &waiters_key(&name), 1, Duration::from_millis(10)).await;
    guard.extend(Duration::from_secs(60)).await.unwrap();

    let others = client(&url).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let mutex = others.mutex(&name);
        waiters.push(tokio::spawn(async move { mutex.lock().await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The client's first waiter queues; the others park in it.
    wait_for_members(&conn, &waiters_key(&name), 2, Duration::from_millis(10)).await;
    wait_for_parked(&others, 3).await;

    signal(frozen.0.id(), "STOP");
    let mut released = Instant::now();
    guard.unlock().await.unwrap();
    let mut pending = waiters;
    while !pending.is_empty() {
        let (result, _, rest) = timeout(Duration::from_secs(10), futures_select(pending))
            .await
            .expect("a live waiter got the lock within 10 s of the release");
        let waited = released.elapsed();
        assert!(
            waited < BOUND,
            "a live waiter got the free lock {waited:?} after the release"
        );
        let guard = result.unwrap().unwrap();
        released = Instant::now();
        guard.unlock().await.unwrap();
        pending = rest;
    }
}

/// The first of `handles` to finish, and the others.
async fn futures_select<T>(
    handles: Vec<tokio::task::JoinHandle<T>>,
) -> (
    Result<T, tokio::task::JoinError>,
    usize,
    Vec<tokio::task::JoinHandle<T>>,
) {
    futures_util::future::select_all(handles).await
}

/// Before the fix: the standby reached only the second (frozen) waiter; the
/// third parked for the holder's whole lease (timed out at 10 s).
#[tokio::test]
async fn two_adjacent_frozen_fair_waiters_do_not_stall_the_third() {
    let url = redis_url();
    let name = unique("fair-frozen-pair");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let guard = holder
        .fair_mutex(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .await
        .unwrap();

    // Two frozen-to-be waiters, first and second in line, each in a client
    // of its own on a runtime the test can freeze (sockets stay open).
    let sides = [Side::start(), Side::start()];
    let mut frozen_waiters = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let c = side.client(&url).await;
        let mutex = c.fair_mutex(&name);
        frozen_waiters.push(side.spawn(async move {
            let _c = c;
            mutex.lock().await.map(std::mem::forget)
        }));
        wait_for_members(
            &conn,
            &fifo_key(&name),
            i as i64 + 1,
            Duration::from_millis(5),
        )
        .await;
    }
    let live = client(&url).await;
    let mutex = live.fair_mutex(&name);
    let third = tokio::spawn(async move { mutex.lock().await });
    wait_for_members(&conn, &fifo_key(&name), 3, Duration::from_millis(5)).await;

    let _frozen: Vec<_> = futures_util::future::join_all(sides.iter().map(Side::freeze)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = got_within(third, released, BOUND, "the third waiter got the free lock").await;
    got.unlock().await.unwrap();
    drop(frozen_waiters);
}

/// Before the fix (there was no liveness probe), the waiter behind a
/// half-open pub/sub connection parked for the holder's whole lease: 30 s
/// here (the test timed out at 10 s).
#[tokio::test]
async fn a_half_open_pubsub_connection_is_noticed_and_replaced() {
    let url = redis_url();
    let name = unique("half-open");
    let conn = raw(&url).await;
    let proxy = Proxy::start(0, redis_port()).await.expect("a proxy");
    let waiting_client = redbell::Client::connect(proxy.url()).await.unwrap();
    // The client's connections, in order: the command connection, then the
    // pub/sub connection.
    assert_eq!(proxy.accepted(), 2);
    let holder = client(&url).await;
    let guard = holder
        .mutex(&name)
        .with_lease(Duration::from_secs(30))
        .lock()
        .await
        .unwrap();
    let mutex = waiting_client.mutex(&name);
    let waiter = tokio::spawn(async move { mutex.lock().await });
    wait_for_members(&conn, &waiters_key(&name), 1, Duration::from_millis(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await; // subscribed by now

    // Like a NAT that forgot the flow: the server sees the pub/sub
    // connection close, the client sees silence.
    proxy.half_open(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = got_within(
        waiter,
        released,
        Duration::from_secs(2),
        "the waiter got the free lock",
    )
    .await;
    got.unlock().await.unwrap();
}

/// Before the fix, the re-run of an acquire that had succeeded answered
/// "held" (`{0, pttl}`) to the caller's own token.
#[tokio::test]
async fn a_re_sent_acquire_finds_its_own_token_and_reports_it_acquired() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    for (script, name) in [
        ("acquire", unique("resent")),
        ("rw_write_acquire", unique("resent-rw")),
    ] {
        let source = redbell::scripts()
            .into_iter()
            .find(|s| s.name == script)
            .unwrap()
            .source;
        let lock = lock_key(&name);
        let mut call = redis::cmd("EVAL");
        call.arg(source);
        if script == "acquire" {
            call.arg(5)
                .arg(&lock)
                .arg(format!("{lock}:fence"))
                .arg(format!("{lock}:waiters"))
                .arg(format!("{lock}:readers"))
                .arg(format!("{lock}:holders"))
                .arg(redbell::PROTOCOL_VERSION)
                .arg("mtok")
                .arg(30_000)
                .arg(60_000)
                .arg("client:1")
                .arg(2_000)
                .arg(1_000);
        } else {
            call.arg(5)
                .arg(&lock)
                .arg(format!("{lock}:readers"))
                .arg(format!("{lock}:writers"))
                .arg(format!("{lock}:fence"))
                .arg(format!("{lock}:rw"))
                .arg(redbell::PROTOCOL_VERSION)
                .arg("wtok")
                .arg(30_000)
                .arg(60_000)
                .arg("client:1")
                .arg(2_000)
                .arg(1_000);
        }
        let first: (i64, i64) = call.query_async(&mut conn).await.unwrap();
        let again: (i64, i64) = call.query_async(&mut conn).await.unwrap();
        assert_eq!(first.0, 1, "{script}: the first run acquires");
        assert_eq!(
            again, first,
            "{script}: the re-sent run reports the same acquisition"
        );
        let _: () = redis::cmd("DEL")
            .arg(&lock)
            .arg(format!("{lock}:fence"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// A read hold whose reply was lost (a partition healed, its connection
/// replaced) and whose attempt is re-sent after a writer queued: before
/// the fix the re-sent run answered "a writer waits" (`{0, park}`), so the
/// reader parked on its own hold, unrenewed, and the writer waited out
/// the whole read lease (seen in a 10-minute soak: a 1.5 s gap).
#[tokio::test]
async fn a_re_sent_read_acquire_behind_a_queued_writer_finds_its_hold() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let source = |name: &str| {
        redbell::scripts()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
            .source
    };
    let lock = lock_key(&unique("resent-read"));
    let mut read = redis::cmd("EVAL");
    read.arg(source("rw_read_acquire"))
        .arg(6)
        .arg(&lock)
        .arg(format!("{lock}:readers"))
        .arg(format!("{lock}:writers"))
        .arg(format!("{lock}:fence"))
        .arg(format!("{lock}:permits"))
        .arg(format!("{lock}:holders"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("rtok")
        .arg(30_000)
        .arg(1_000);
    let first: (i64, i64) = read.query_async(&mut conn).await.unwrap();
    assert_eq!(first.0, 1, "the first run takes the read hold");
    // A writer queues behind the hold (its intent blocks new readers).
    let writer: (i64, i64) = redis::cmd("EVAL")
        .arg(source("rw_write_acquire"))
        .arg(5)
        .arg(&lock)
        .arg(format!("{lock}:readers"))
        .arg(format!("{lock}:writers"))
        .arg(format!("{lock}:fence"))
        .arg(format!("{lock}:rw"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("wtok")
        .arg(30_000)
        .arg(60_000)
        .arg("client:2")
        .arg(2_000)
        .arg(1_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(writer.0, 0, "the writer waits for the reader");
    let again: (i64, i64) = read.query_async(&mut conn).await.unwrap();
    assert_eq!(
        again, first,
        "the re-sent read acquire reports the hold it already has"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{lock}:readers"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 20_000, "the readers set outlives the hold: {ttl} ms");
    let _: () = redis::cmd("DEL")
        .arg(format!("{lock}:readers"))
        .arg(format!("{lock}:writers"))
        .arg(format!("{lock}:fence"))
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Before the fix, `WAIT` on lock A ran on the client's one multiplexed
/// connection, so an unrelated lock B's try_lock + unlock took as long as
/// A's WAIT timeout (about 500 ms).
#[tokio::test]
async fn a_lagging_replica_does_not_delay_other_locks() {
    let primary = PrivateRedis::start().await;
    let replica = PrivateRedis::start().await;
    let mut replica_conn = raw(&replica.url()).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut replica_conn)
        .await
        .unwrap();
    let primary_conn = raw(&primary.url()).await;
    let linked = redbell_integration_tests::eventually(Duration::from_secs(10), || {
        let mut c = primary_conn.clone();
        async move { info_field(&mut c, "replication", "connected_slaves").await == "1" }
    })
    .await;
    assert!(linked, "the replica attached");
    let replica_pid: u32 = info_field(&mut replica_conn, "server", "process_id")
        .await
        .parse()
        .unwrap();

    let c = client(&primary.url()).await;
    let a = c
        .mutex(&unique("wait-a"))
        .min_replica_acks(1, Duration::from_millis(500));
    let b = c.mutex(&unique("wait-b"));
    b.try_lock().await.unwrap().unwrap().unlock().await.unwrap(); // warm up

    signal(replica_pid, "STOP");
    let slow = tokio::spawn(async move { a.lock().await });
    tokio::time::sleep(Duration::from_millis(50)).await; // A's WAIT is running
    let started = Instant::now();
    let guard = b.try_lock().await.unwrap().expect("B is free");
    guard.unlock().await.unwrap();
    let took = started.elapsed();
    signal(replica_pid, "CONT");
    let a_result = slow.await.unwrap();
    assert!(
        matches!(a_result, Err(redbell::Error::NotReplicated { .. })),
        "A could not be replicated in time: {a_result:?}"
    );
    assert!(
        took < Duration::from_millis(50),
        "an unrelated lock's try_lock + unlock took {took:?} while A waited for its replica"
    );
}

async fn info_field(conn: &mut MultiplexedConnection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// One name, one kind: a Mutex, FairMutex or RwLock attempt on a name in
/// use as another kind is refused at once with `KindConflict`. Before the
/// fix, a Mutex on a name held by readers got the lock beside them (two
/// kinds of holders at once), and a waiter of one kind parked behind a
/// holder of another, whose release never woke it, for the holder's lease.
#[tokio::test]
async fn a_name_in_use_as_another_kind_of_lock_is_refused() {
    let url = redis_url();
    let c = client(&url).await;
    let conflict = |r: Result<(), redbell::Error>, what: &str| {
        assert!(
            matches!(r, Err(redbell::Error::KindConflict { .. })),
            "{what}: {r:?}"
        );
    };

    // Readers hold: a Mutex and a FairMutex must not get in beside them.
    let name = unique("kinds-readers");
    let reader = c.rwlock(&name).read().await.unwrap();
    let r = c.mutex(&name).try_lock().await.map(drop);
    conflict(r, "mutex beside readers");
    let r = c.fair_mutex(&name).try_lock().await.map(drop);
    conflict(r, "fair mutex beside readers");
    reader.unlock().await.unwrap();

    // A Mutex holds: waiting as another kind fails at once, not after the
    // holder's lease.
    let name = unique("kinds-mutex");
    let held = c.mutex(&name).lock().await.unwrap();
    for (what, attempt) in [
        ("fair mutex", c.fair_mutex(&name).lock().await.map(drop)),
        ("rwlock writer", c.rwlock(&name).write().await.map(drop)),
        ("rwlock reader", c.rwlock(&name).read().await.map(drop)),
    ] {
        conflict(attempt, what);
    }
    held.unlock().await.unwrap();

    // A FairMutex holds: a plain Mutex waiter is refused.
    let name = unique("kinds-fair");
    let held = c.fair_mutex(&name).lock().await.unwrap();
    let r = timeout(Duration::from_secs(5), c.mutex(&name).lock())
        .await
        .expect("the mutex attempt returned at once")
        .map(drop);
    conflict(r, "mutex behind a fair holder");
    held.unlock().await.unwrap();

    // A writer holds: a Mutex is refused.
    let name = unique("kinds-writer");
    let held = c.rwlock(&name).write().await.unwrap();
    let r = c.mutex(&name).try_lock().await.map(drop);
    conflict(r, "mutex behind a writer");
    held.unlock().await.unwrap();

    // The same kind on a free name after another kind was used: fine.
    c.mutex(&name).lock().await.unwrap().unlock().await.unwrap();
}

/// Before the fix, a waiting writer that froze held new readers back until
/// its intent expired: the holder's remaining lease plus a grace period (the
/// test timed out at 10 s). Now the release that woke it cuts its intent to
/// a short window, and the reader gets in within a second.
#[tokio::test]
async fn a_frozen_waiting_writer_does_not_hold_readers_back() {
    let url = redis_url();
    let name = unique("rw-frozen-writer");
    let conn = raw(&url).await;
    let holder = client(&url).await;
    let writer = holder
        .rwlock(&name)
        .with_lease(Duration::from_secs(30))
        .write()
        .await
        .unwrap();

    let side = Side::start();
    let frozen_client = side.client(&url).await;
    let waiting = frozen_client.rwlock(&name);
    let _frozen_writer = side.spawn(async move {
        let _c = frozen_client;
        waiting.write().await.map(std::mem::forget)
    });
    wait_for_members(
        &conn,
        &redbell_integration_tests::intents_key(&name),
        1,
        Duration::from_millis(5),
    )
    .await;
    let live = client(&url).await;
    let rw = live.rwlock(&name);
    let reader = tokio::spawn(async move { rw.read().await });
    tokio::time::sleep(Duration::from_millis(100)).await; // the reader parks

    let _frozen = side.freeze().await;
    let released = Instant::now();
    writer.unlock().await.unwrap();
    let got = got_within(reader, released, BOUND, "the reader got in").await;
    got.unlock().await.unwrap();
}
