//! The liveness gaps the model checker (`model/`) found, reproduced on a
//! real server by calling the scripts directly, so each step of the
//! model's counterexample happens in its order (a client's tasks cannot be
//! steered into it reliably).
//!
//! A waiter's wake channel is subscribed for real: a waiter that is owed
//! the lock must either get it in its own attempt's reply or receive a
//! message on that channel within the bound, else it sleeps on its park.

use std::time::Duration;

use tokio::time::Instant;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;

use redbell_integration_tests::{
    client, lock_key, raw, redis_url, unique, wait_for_members, waiters_key,
};

/// How long an owed waiter may go without its permit or a wake-up.
const BOUND: Duration = Duration::from_secs(1);

fn source(script: &str) -> String {
    redbell::scripts()
        .into_iter()
        .find(|s| s.name == script)
        .unwrap()
        .source
        .to_string()
}

/// One raw `sem_acquire` on a one-permit semaphore: `member` "" for a
/// caller that does not queue; `arrival` "" or a first attempt's now_us.
async fn sem_acquire(
    conn: &mut MultiplexedConnection,
    base: &str,
    token: &str,
    lease_ms: u64,
    member: &str,
    arrival: &str,
) -> Vec<i64> {
    redis::cmd("EVAL")
        .arg(source("sem_acquire"))
        .arg(7)
        .arg(format!("{base}:holders"))
        .arg(format!("{base}:fence"))
        .arg(format!("{base}:queue"))
        .arg(format!("{base}:queue:expiry"))
        .arg(format!("{base}:permits"))
        .arg(base)
        .arg(format!("{base}:readers"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(token)
        .arg(lease_ms)
        .arg(60_000)
        .arg(member)
        .arg(2_000)
        .arg(30_000)
        .arg(format!("{base}:wake:"))
        .arg(1)
        .arg(250)
        .arg(arrival)
        .query_async(conn)
        .await
        .unwrap()
}

/// Model: `found_a_semaphore_waiter_queued_ahead_of_an_owed_member_sleeps`.
/// Client `x`'s task 2 attempted first (not queued: its sibling held the
/// client's place) and learnt its arrival; `y:1` queued after it. A
/// release wakes `y:1`, owed the free permit; then x's turn comes and its
/// task 2 queues with its earlier arrival, ahead of `y:1`.
///
/// Before the fix: x:2's attempt judged its rank before queueing it (the
/// back of the queue), parked for the whole default park, and nobody woke
/// it, while the permit stayed free ("x:2 was owed the free permit ...").
#[tokio::test]
async fn a_semaphore_waiter_queued_ahead_of_an_owed_member_is_not_left_asleep() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let base = lock_key(&unique("sem-owed-ahead"));
    let mut pubsub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(format!("{base}:wake:x")).await.unwrap();
    let mut y_sub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    y_sub.subscribe(format!("{base}:wake:y")).await.unwrap();

    let held = sem_acquire(&mut conn, &base, "sholder", 30_000, "", "").await;
    assert_eq!(held[0], 1, "the holder takes the only permit");
    let first = sem_acquire(&mut conn, &base, "sx2", 30_000, "", "").await;
    assert_eq!(first[0], 0, "x:2's first attempt finds the permit held");
    let arrival = first[2].to_string();
    let y = sem_acquire(&mut conn, &base, "sy1", 30_000, "y:1", "").await;
    assert_eq!(y[0], 0, "y:1 queues behind the holder");

    let released: i64 = redis::cmd("EVAL")
        .arg(source("sem_release"))
        .arg(4)
        .arg(format!("{base}:holders"))
        .arg(format!("{base}:queue"))
        .arg(format!("{base}:queue:expiry"))
        .arg(format!("{base}:permits"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg("sholder")
        .arg(format!("{base}:wake:"))
        .arg(1)
        .arg(250)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(released, 1);
    let woke = tokio::time::timeout(BOUND, y_sub.on_message().next())
        .await
        .expect("the release wakes y:1")
        .unwrap();
    assert_eq!(woke.get_payload::<String>().unwrap(), "1");

    // x's turn to queue comes: task 2 queues with its first arrival.
    let x = sem_acquire(&mut conn, &base, "sx2", 30_000, "x:2", &arrival).await;
    if x[0] == 1 {
        return;
    }
    let park = x[1];
    let mut x_msgs = pubsub.on_message();
    let told = tokio::time::timeout(BOUND, x_msgs.next()).await;
    assert!(
        told.is_ok(),
        "x:2 was owed the free permit (queued ahead of y:1) but parked {park} ms \
         and nobody woke it within {BOUND:?}"
    );
}

/// Model: `found_a_shortened_lease_leaves_waiters_on_the_old_pttl`. The
/// holder (raw script calls: it dies without a release) holds with a 30 s
/// lease; a real client's waiter queues and parks on that PTTL; the holder
/// then shortens its lease to 300 ms (`extend`, reply read) and dies.
///
/// Before the fix: nobody told the waiter, which slept on the old PTTL
/// while the lock was free ("the waiter got the free lock only after ...").
#[tokio::test]
async fn a_shortened_lease_does_not_leave_the_waiters_on_the_old_pttl() {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let name = unique("shortened");
    let lock = lock_key(&name);
    let token = format!("m{}", uuid::Uuid::new_v4().simple());
    let held: Vec<i64> = redis::cmd("EVAL")
        .arg(source("acquire"))
        .arg(5)
        .arg(&lock)
        .arg(format!("{lock}:fence"))
        .arg(format!("{lock}:waiters"))
        .arg(format!("{lock}:readers"))
        .arg(format!("{lock}:holders"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(&token)
        .arg(30_000)
        .arg(60_000)
        .arg("")
        .arg(2_000)
        .arg(1_000)
        .arg(100)
        .arg("m")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(held[0], 1, "the holder takes the lock");

    let waiter = client(&url).await;
    let mutex = waiter.mutex(&name);
    let wait = tokio::spawn(async move { mutex.lock().await.map(|_| Instant::now()) });
    wait_for_members(&conn, &waiters_key(&name), 1, Duration::from_millis(10)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    let lease = Duration::from_millis(300);
    let codes: Vec<i64> = redis::cmd("EVAL")
        .arg(source("extend"))
        .arg(2)
        .arg(&lock)
        .arg(waiters_key(&name))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(lease.as_millis() as u64)
        .arg(&token)
        .arg(format!("{lock}:wake:"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(codes, vec![1], "the holder shortens its own lease");
    let shortened = Instant::now();

    // The holder is dead: the lock is free once its 300 ms lease lapses.
    let limit = lease + BOUND;
    let got = match tokio::time::timeout(Duration::from_secs(10), wait).await {
        Ok(Ok(Ok(at))) => Some(at - shortened),
        Ok(other) => panic!("the waiter failed: {other:?}"),
        Err(_) => None,
    };
    println!("the waiter got the lock {got:?} after the shortening extend");
    assert!(
        got.is_some_and(|after| after <= limit),
        "the waiter had not got the free lock within {limit:?} (got it after \
         {got:?}, None: not within 10 s; the lease lapsed {lease:?} after the extend)"
    );
}

/// One raw script call.
async fn eval<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    script: &str,
    keys: &[String],
    args: &[String],
) -> T {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(source(script)).arg(keys.len());
    cmd.arg(keys).arg(redbell::PROTOCOL_VERSION).arg(args);
    cmd.query_async(conn).await.unwrap()
}

/// The holders of the other kinds: which kind a raw holder takes, with
/// which token, and how it shortens its lease.
#[derive(Clone, Copy, Debug)]
enum Holder {
    Fair,
    Writer,
    Reader,
    Semaphore,
}

/// Model: `f_shortening_extend_of_the_other_kinds` (tests/history.rs). A
/// raw holder of `kind` (it dies without a release) holds with a 30 s
/// lease; a real client's waiter (a writer for the RwLock) queues and
/// parks on that lease; the holder shortens it to 300 ms (its extend
/// script, reply read) and dies. The waiter must get the lock within the
/// new lease and the bound.
///
/// Before the fix only a Mutex's extend told its waiters: these slept on
/// the old lease while the lock was free ("... had not got the free lock").
async fn shortened_lease_wakes(kind: Holder) {
    let url = redis_url();
    let mut conn = raw(&url).await;
    let name = unique(&format!("shortened-{kind:?}"));
    let b = lock_key(&name);
    let k = |suffix: &str| format!("{b}{suffix}");
    let hex = uuid::Uuid::new_v4().simple().to_string();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let (letter, queue) = match kind {
        Holder::Fair => ('q', k(":fifo")),
        Holder::Writer => ('w', k(":writers")),
        Holder::Reader => ('r', k(":writers")),
        Holder::Semaphore => ('s', k(":queue")),
    };
    let token = format!("{letter}{hex}");
    let held: Vec<i64> = match kind {
        Holder::Fair => {
            let keys = vec![
                b.clone(),
                k(":fence"),
                k(":fifo"),
                k(":handoff"),
                k(":readers"),
                k(":holders"),
            ];
            let args = s(&[
                &token,
                "30000",
                "60000",
                "",
                "2000",
                "1000",
                &k(":wake:"),
                "500",
                "",
            ]);
            eval(&mut conn, "fair_acquire", &keys, &args).await
        }
        Holder::Writer => {
            let keys = vec![
                b.clone(),
                k(":readers"),
                k(":writers"),
                k(":fence"),
                k(":rw"),
                k(":permits"),
                k(":holders"),
            ];
            let args = s(&[&token, "30000", "60000", "", "2000", "1000"]);
            eval(&mut conn, "rw_write_acquire", &keys, &args).await
        }
        Holder::Reader => {
            let keys = vec![
                b.clone(),
                k(":readers"),
                k(":writers"),
                k(":fence"),
                k(":permits"),
                k(":holders"),
            ];
            let args = s(&[&token, "30000", "1000"]);
            eval(&mut conn, "rw_read_acquire", &keys, &args).await
        }
        Holder::Semaphore => sem_acquire(&mut conn, &b, &token, 30_000, "", "").await,
    };
    assert_eq!(held[0], 1, "the raw holder takes the lock");

    let waiter = client(&url).await;
    let wait = tokio::spawn(async move {
        match kind {
            Holder::Fair => waiter.fair_mutex(&name).lock().await.map(|_| ()),
            Holder::Writer | Holder::Reader => waiter.rwlock(&name).write().await.map(|_| ()),
            Holder::Semaphore => waiter.semaphore(&name, 1).acquire().await.map(|_| ()),
        }
        .map(|()| Instant::now())
    });
    wait_for_members(&conn, &queue, 1, Duration::from_millis(10)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The shortening extend, KEYS and ARGV as layout.rs passes them. (Only
    // the first code is read: the scripts before the fix took fewer keys.)
    let lease = Duration::from_millis(300);
    let ms = lease.as_millis().to_string();
    let (script, keys, args) = match kind {
        Holder::Fair => (
            "extend",
            vec![b.clone(), queue],
            s(&[&ms, &token, &k(":wake:")]),
        ),
        Holder::Writer => (
            "extend",
            vec![b.clone(), queue],
            s(&[&ms, &token, &k(":rw")]),
        ),
        Holder::Reader => (
            "rw_read_extend",
            vec![k(":readers")],
            s(&[&ms, &token, &k(":rw")]),
        ),
        Holder::Semaphore => (
            "sem_extend",
            vec![k(":holders"), k(":permits"), queue],
            s(&[&ms, &token, &k(":wake:")]),
        ),
    };
    let codes: Vec<i64> = eval(&mut conn, script, &keys, &args).await;
    assert_eq!(codes.first(), Some(&1), "the holder shortens its own lease");
    let shortened = Instant::now();

    // The holder is dead: the lock is free once its 300 ms lease lapses.
    let limit = lease + BOUND;
    let got = match tokio::time::timeout(Duration::from_secs(10), wait).await {
        Ok(Ok(Ok(at))) => Some(at - shortened),
        Ok(other) => panic!("{kind:?}: the waiter failed: {other:?}"),
        Err(_) => None,
    };
    println!("{kind:?}: the waiter got the lock {got:?} after the shortening extend");
    assert!(
        got.is_some_and(|after| after <= limit),
        "{kind:?}: the waiter had not got the free lock within {limit:?} (got it after \
         {got:?}, None: not within 10 s; the lease lapsed {lease:?} after the extend)"
    );
}

#[tokio::test]
async fn a_fair_holder_shortened_lease_does_not_leave_the_waiters_asleep() {
    shortened_lease_wakes(Holder::Fair).await;
}

#[tokio::test]
async fn a_writer_shortened_lease_does_not_leave_the_waiters_asleep() {
    shortened_lease_wakes(Holder::Writer).await;
}

#[tokio::test]
async fn a_reader_shortened_lease_does_not_leave_a_writer_asleep() {
    shortened_lease_wakes(Holder::Reader).await;
}

#[tokio::test]
async fn a_permit_shortened_lease_does_not_leave_the_waiters_asleep() {
    shortened_lease_wakes(Holder::Semaphore).await;
}
