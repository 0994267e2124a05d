//! The lean paths of the plain mutex's hand-off, and what each shortcut
//! must still guarantee: an attempt that finds another waiter's reservation
//! queues without asking the server for its PTTL or TIME, behind the waiters
//! that queued during the last hold, and parks no longer than the
//! reservation; a release sends no standby message to a member that could
//! not use it, and still sends one to every member that could.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redbell_integration_tests::{
    LONG, PrivateRedis, client, commandstats, lock_key, raw, reset_stats, server_ms, set_px,
    unique, waiters_key,
};

/// The client's constants the scripts are called with.
const LEASE_MS: u64 = 30_000;
const GRACE_MS: u64 = 2_000;
const HANDOFF_MS: u64 = 100;

fn source(name: &str) -> &'static str {
    redbell::scripts()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
        .source
}

/// One run of the acquire script, as the client sends it.
async fn acquire(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    token: &str,
    member: &str,
) -> (i64, i64) {
    let lock = lock_key(name);
    redis::cmd("EVAL")
        .arg(source("acquire"))
        .arg(4)
        .arg(&lock)
        .arg(format!("{lock}:fence"))
        .arg(format!("{lock}:waiters"))
        .arg(format!("{lock}:readers"))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(token)
        .arg(LEASE_MS)
        .arg(60_000)
        .arg(member)
        .arg(GRACE_MS)
        .arg(1_000)
        .arg(HANDOFF_MS)
        .query_async(conn)
        .await
        .unwrap()
}

/// One run of the release script, as the client sends it.
async fn release(conn: &mut redis::aio::MultiplexedConnection, name: &str, token: &str) -> i64 {
    let lock = lock_key(name);
    redis::cmd("EVAL")
        .arg(source("release"))
        .arg(2)
        .arg(&lock)
        .arg(waiters_key(name))
        .arg(redbell::PROTOCOL_VERSION)
        .arg(token)
        .arg(format!("{lock}:wake:"))
        .arg(HANDOFF_MS)
        .query_async(conn)
        .await
        .unwrap()
}

/// Puts `member` in the lock's queue with `score` (its expiry, server ms).
async fn enqueue(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    score: f64,
    member: &str,
) {
    let _: () = redis::cmd("ZADD")
        .arg(waiters_key(name))
        .arg(score)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap();
}

async fn scores(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE")
        .arg(waiters_key(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await
        .unwrap()
}

/// Before: the attempt read the reservation's PTTL and the server's TIME,
/// and scored its entry by the reservation's end (now + 2.1 s), ahead of
/// every waiter that queued while the last holder held (now + its lease):
/// the releaser, queueing again at once, overtook them all (wait p99 at 32
/// workers: hundreds of ms).
#[tokio::test]
async fn an_attempt_on_a_reservation_queues_behind_the_hold_without_pttl_or_time() {
    let redis = PrivateRedis::start().await;
    let mut conn = raw(&redis.url()).await;
    let name = unique("lean-reserved");
    let lock = lock_key(&name);

    // A waiter queued while a holder held.
    set_px(&mut conn, &lock, "mholder", LEASE_MS).await;
    let (got, _) = acquire(&mut conn, &name, "mearly", "c1:1").await;
    assert_eq!(got, 0);
    // The holder released, and the release reserved the lock for a woken
    // member; another attempt arrives during the reservation.
    let end = server_ms(&mut conn).await + HANDOFF_MS;
    set_px(&mut conn, &lock, &format!("m:c9:9@{end}"), HANDOFF_MS).await;
    reset_stats(&mut conn).await;
    let (got, park) = acquire(&mut conn, &name, "mlate", "c2:1").await;
    let stats = commandstats(&mut conn).await;
    assert_eq!(got, 0, "a reserved lock was taken");
    // Second in line: parks no longer than the reservation.
    assert_eq!(
        park, HANDOFF_MS as i64,
        "parks no longer than the reservation"
    );
    let calls = |name: &str| stats.get(name).copied().unwrap_or(0);
    assert_eq!(calls("time"), 0, "TIME during a reservation: {stats:?}");
    // The one PTTL left is the queue's (its expiry must cover the entry).
    assert_eq!(
        calls("pttl"),
        1,
        "the lock's PTTL during a reservation: {stats:?}"
    );

    // Third in line (during the next reservation): parks the window a
    // standby would give the third, 3 × 2 × the reservation, unmarked, so
    // releases still standby it.
    set_px(&mut conn, &lock, &format!("m:c9:9@{}", end + 5), HANDOFF_MS).await;
    let (got, park) = acquire(&mut conn, &name, "mlater", "c3:1").await;
    assert_eq!(got, 0, "a reserved lock was taken");
    assert_eq!(park, 3 * 2 * HANDOFF_MS as i64);

    let queue = scores(&mut conn, &name).await;
    let members: Vec<&str> = queue.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        members,
        ["c1:1", "c2:1", "c3:1"],
        "the late ones overtook: {queue:?}"
    );
    let (late, later) = (queue[1].1, queue[2].1);
    assert_eq!(
        late.fract(),
        0.5,
        "the second is not marked as parking short: {late}"
    );
    // Scored from the reservation's start (its end less the hand-off).
    assert_eq!(late.trunc() as u64, end - HANDOFF_MS + LEASE_MS + GRACE_MS);
    assert_eq!(
        later.fract(),
        0.0,
        "the third is marked as parking a reservation: {later}"
    );
    let queue_pttl: i64 = redis::cmd("PTTL")
        .arg(waiters_key(&name))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        queue_pttl as u64 >= LEASE_MS + GRACE_MS + HANDOFF_MS,
        "the queue expires before its entries: {queue_pttl} ms"
    );
}

/// Before: an entry queued during a reservation was scored from the
/// reservation's *end*, so everyone who queued during the holds of the next
/// 100 ms went ahead of it; above all the releaser whose attempt came just
/// after the woken waiter took the lock, which jumped the whole queue (the
/// plain mutex's wait p99 at W=8 in the bench: 9–11 ms, against 2.8 ms
/// after). Now it is scored from the reservation's start, ahead of a waiter
/// that queues during the hold that follows.
#[tokio::test]
async fn a_waiter_queued_during_a_reservation_stays_ahead_of_one_queued_during_the_next_hold() {
    let redis = PrivateRedis::start().await;
    let mut conn = raw(&redis.url()).await;
    let name = unique("lean-order");
    let lock = lock_key(&name);

    // A release reserved the lock for a woken member; a waiter queues
    // during the reservation.
    let end = server_ms(&mut conn).await + HANDOFF_MS;
    set_px(&mut conn, &lock, &format!("m:c9:9@{end}"), HANDOFF_MS).await;
    let (got, _) = acquire(&mut conn, &name, "mfirst", "c2:1").await;
    assert_eq!(got, 0, "a reserved lock was taken");
    // The woken member takes the lock a moment later, and another waiter
    // queues during its hold.
    tokio::time::sleep(Duration::from_millis(20)).await;
    set_px(&mut conn, &lock, "mwoken", LEASE_MS).await;
    let (got, _) = acquire(&mut conn, &name, "msecond", "c3:1").await;
    assert_eq!(got, 0, "a held lock was taken");

    let queue = scores(&mut conn, &name).await;
    let members: Vec<&str> = queue.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        members,
        ["c2:1", "c3:1"],
        "the waiter that queued during the later hold went first: {queue:?}"
    );
}

/// The shortcut's guarantee: a waiter that queued during a reservation
/// (and so gets no standby) takes the lock soon after the reservation ends
/// when the member it was made for never comes (frozen, its socket open).
#[tokio::test]
async fn a_waiter_queued_during_an_unused_reservation_takes_the_lock_after_it() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let name = unique("lean-unused");
    let lock = lock_key(&name);
    let end = server_ms(&mut conn).await + 300;
    set_px(&mut conn, &lock, &format!("m:frozen:1@{end}"), 300).await;

    let c = client(&url).await;
    let mutex = c.mutex(&name).with_lease(LONG);
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(5), mutex.lock())
        .await
        .expect("still waiting 5 s after a 300 ms reservation")
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(300 + 700),
        "got the lock {waited:?} after the attempt, for a 300 ms reservation"
    );
    guard.unlock().await.unwrap();
}

/// Before: the release sent a standby to each of the next two in line,
/// whoever they were. Now none to a member that queued during a
/// reservation (it parks no longer than one) or that belongs to the woken
/// member's client (frozen with it, or alive and attempting), and still one
/// to a member that parks on a holder's lease.
#[tokio::test]
async fn a_release_sends_standbys_only_where_they_help() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    // The head is "a:1"; (second in line, third in line, who must get a
    // standby). A member of client "b" queued during a reservation: its
    // score carries the fraction .5.
    for (case, second, third, want) in [
        ("marked", "b:1", "c:1", told(&[("c", 400)])),
        ("same client", "a:2", "c:1", told(&[("c", 400)])),
        ("both needed", "c:1", "d:1", told(&[("c", 200), ("d", 400)])),
    ] {
        let name = unique("lean-standby");
        let lock = lock_key(&name);
        let wake = format!("{lock}:wake:");
        let mut stream = listen(&url, &wake, &["a", "b", "c", "d"]).await;
        let later = server_ms(&mut conn).await + 60_000;
        for (i, member) in ["a:1", second, third].into_iter().enumerate() {
            let score = (later + i as u64) as f64;
            let score = if member.starts_with("b:") {
                score + 0.5
            } else {
                score
            };
            enqueue(&mut conn, &name, score, member).await;
        }
        set_px(&mut conn, &lock, "mholder", LEASE_MS).await;
        assert_eq!(release(&mut conn, &name, "mholder").await, 1, "{case}");

        let got = published(&mut stream, &wake).await;
        let (woken, standbys) = woken_and_told(&got, case);
        assert_eq!(woken, "a", "{case}: the head was not woken first: {got:?}");
        assert_eq!(standbys, want, "{case}: {got:?}");
    }
}

/// A pub/sub connection on the wake channels (prefix `wake`) of these
/// clients.
async fn listen(url: &str, wake: &str, clients: &[&str]) -> redis::aio::PubSubStream {
    let mut pubsub = redis::Client::open(url)
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    for client in clients {
        pubsub.subscribe(format!("{wake}{client}")).await.unwrap();
    }
    pubsub.into_on_message()
}

/// The messages a release published, as (client, payload), within 300 ms.
async fn published(stream: &mut redis::aio::PubSubStream, wake: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await
    {
        let channel = msg.get_channel_name().to_owned();
        let payload: String = msg.get_payload().unwrap();
        got.push((channel.trim_start_matches(wake).to_owned(), payload));
    }
    got
}

/// The client a release woke (the first message, naming waiter 1) and the
/// clients it told to stand by with each one's window in ms, sorted; every
/// later message must be a standby.
fn woken_and_told(got: &[(String, String)], case: &str) -> (String, Vec<(String, u64)>) {
    let Some((woken, id)) = got.first() else {
        panic!("{case}: nothing published");
    };
    assert_eq!(id, "1", "{case}: the first message is no wake-up: {got:?}");
    let mut told: Vec<(String, u64)> = got[1..]
        .iter()
        .map(|(client, payload)| {
            let window = payload
                .strip_prefix("1::s")
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("{case}: not a standby: {payload}"));
            (client.clone(), window)
        })
        .collect();
    told.sort_unstable();
    (woken.clone(), told)
}

/// `(client, window)` pairs, owned.
fn told(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|&(c, w)| (c.to_owned(), w)).collect()
}

/// Before: each release sent a standby to the next ones in line, so a
/// member was told again at every hand-off until it was woken (three
/// messages per hand-off with eight waiting, each waking a parked task).
/// A standby only ever shortens a park, so the release now tells a member
/// once: the next release skips it, and tells it again only after its next
/// attempt has queued it afresh.
#[tokio::test]
async fn a_release_tells_a_member_to_stand_by_once_until_it_queues_again() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let name = unique("lean-told");
    let lock = lock_key(&name);
    let wake = format!("{lock}:wake:");
    let mut stream = listen(&url, &wake, &["a", "c", "d", "e", "g"]).await;
    let later = server_ms(&mut conn).await + 60_000;
    for (i, member) in ["a:1", "c:1", "d:1", "e:1"].into_iter().enumerate() {
        enqueue(&mut conn, &name, (later + i as u64) as f64, member).await;
    }
    // a is woken; c, d and e, next in line, are told to stand by, the
    // n-th for n windows of 200 ms.
    set_px(&mut conn, &lock, "mholder", LEASE_MS).await;
    assert_eq!(release(&mut conn, &name, "mholder").await, 1);
    let got = published(&mut stream, &wake).await;
    assert_eq!(
        woken_and_told(&got, "first"),
        ("a".into(), told(&[("c", 200), ("d", 400), ("e", 600)])),
        "{got:?}"
    );

    // a takes its reservation and releases: c is woken; d and e were told
    // already, so nobody is.
    assert_eq!(acquire(&mut conn, &name, "ma", "a:1").await.0, 1);
    assert_eq!(release(&mut conn, &name, "ma").await, 1);
    let got = published(&mut stream, &wake).await;
    assert_eq!(
        woken_and_told(&got, "second"),
        ("c".into(), told(&[])),
        "{got:?}"
    );

    // d attempts (its window ended) while c holds: queued again, it is to
    // be told once more, first after the woken: one window. e, still told,
    // is not. (g: a head to wake ahead
    // of them.)
    assert_eq!(acquire(&mut conn, &name, "mc", "c:1").await.0, 1);
    assert_eq!(acquire(&mut conn, &name, "md", "d:1").await.0, 0);
    let soon = server_ms(&mut conn).await + 1_000;
    enqueue(&mut conn, &name, soon as f64, "g:1").await;
    assert_eq!(release(&mut conn, &name, "mc").await, 1);
    let got = published(&mut stream, &wake).await;
    assert_eq!(
        woken_and_told(&got, "third"),
        ("g".into(), told(&[("d", 200)])),
        "{got:?}"
    );
}

/// The other half of the guarantee: the releaser, queueing again during the
/// reservation its release made (first in line, nobody standing by), still
/// takes the lock at once when the woken waiter takes it with a short lease
/// and crashes: it parked no longer than the reservation, learnt the new
/// holder's lease, and parked on that.
#[tokio::test]
async fn a_releaser_queued_during_its_reservation_takes_over_a_crashed_holder() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("lean-crash");
    let (a, b) = (client(&url).await, client(&url).await);
    let guard = a.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let short = Duration::from_millis(300);
    let woken = b.mutex(&name).with_lease(short);
    let crashed = tokio::spawn(async move {
        let guard = woken.lock().await.unwrap();
        let at = Instant::now();
        std::mem::forget(guard); // crashed: never released, never renewed
        at
    });
    tokio::time::sleep(Duration::from_millis(50)).await; // b is queued
    let again = a.mutex(&name).with_lease(LONG);
    guard.unlock().await.unwrap();
    let retaken = tokio::spawn(async move { again.lock().await.map(|g| (Instant::now(), g)) });
    let crashed_at = crashed.await.unwrap();
    let (at, g) = tokio::time::timeout(Duration::from_secs(10), retaken)
        .await
        .expect("the releaser still waits 10 s after the crash")
        .unwrap()
        .unwrap();
    let after = at - crashed_at;
    assert!(
        after < short + Duration::from_millis(700),
        "took over {after:?} after a crash under a {short:?} lease"
    );
    g.unlock().await.unwrap();
}

/// A release tells the seven members after the one it wakes, the n-th for
/// n windows, and nobody further back: ten waiting, the ninth and tenth
/// hear nothing.
#[tokio::test]
async fn a_release_tells_the_next_seven_with_windows_by_rank() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let mut conn = raw(&url).await;
    let name = unique("lean-seven");
    let wake = format!("{}:wake:", lock_key(&name));
    let clients = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
    let mut stream = queue_then_release(&url, &mut conn, &name, &clients, 60_000).await;
    let got = published(&mut stream, &wake).await;
    let want: Vec<(&str, u64)> = clients[1..8]
        .iter()
        .copied()
        .zip((1..).map(|n| n * 200))
        .collect();
    assert_eq!(
        woken_and_told(&got, "ten"),
        ("a".into(), told(&want)),
        "{got:?}"
    );
}

/// A waiter that first asks during a reservation, behind the members the
/// release told (all frozen with the woken one: a paused host's workers),
/// parks the window of its rank, as if the release had told it too; the
/// lock is free once the reservation ends. Before, anyone behind the first
/// two in line parked the reservation and the whole lease (30.1 s here),
/// and nothing would wake it: nobody holds the lock to release it. (Found
/// by the model checker: `model/tests/history.rs`, case (h).) Further back
/// than the seven a release reaches, it parks the lease: later releases
/// tell it.
#[tokio::test]
async fn a_newcomer_behind_told_members_parks_its_rank_window() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    // Woken: the first; told: the next two. The newcomer queues third
    // after the woken one.
    assert_eq!(
        newcomer_park(&url, 3).await,
        3 * 2 * HANDOFF_MS as i64,
        "a newcomer third in line during a reservation parks three windows"
    );
    // Eight ahead after the woken one: beyond a release's reach, it parks
    // the lease, and the next releases tell it.
    assert_eq!(
        newcomer_park(&url, 9).await,
        (HANDOFF_MS + LEASE_MS) as i64,
        "ninth after the woken one: the lease"
    );
}

/// `ahead` frozen clients (subscribed and silent, as the server sees
/// frozen ones) queue on a fresh lock during a hold; the holder releases,
/// waking the first and telling the next ones; a newcomer then attempts
/// during the reservation. Returns the park it is given.
async fn newcomer_park(url: &str, ahead: usize) -> i64 {
    let mut conn = raw(url).await;
    let name = unique("lean-newcomer");
    let frozen: Vec<String> = (0..ahead).map(|i| format!("f{i}")).collect();
    let clients: Vec<&str> = frozen.iter().map(String::as_str).collect();
    // Queued during the last hold: they expire before the newcomer's entry
    // (the reservation's start + the lease + the grace), so it sorts last.
    let _stream = queue_then_release(url, &mut conn, &name, &clients, 10_000).await;
    let (status, park) = acquire(&mut conn, &name, "mlive", "live:1").await;
    assert_eq!(status, 0, "the reservation ended before the attempt");
    park
}

/// Subscribes each of `clients` to its wake channel of lock `name` (as a
/// client that receives and never acts: a frozen one, as the server sees
/// it), queues one member of each, in that order, to expire `expiry_ms`
/// from now; then a holder takes the lock and releases it, waking the
/// first. Returns the subscriptions' stream.
async fn queue_then_release(
    url: &str,
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    clients: &[&str],
    expiry_ms: u64,
) -> redis::aio::PubSubStream {
    let lock = lock_key(name);
    let stream = listen(url, &format!("{lock}:wake:"), clients).await;
    let later = server_ms(conn).await + expiry_ms;
    for (i, client) in clients.iter().enumerate() {
        enqueue(
            conn,
            name,
            (later + i as u64) as f64,
            &format!("{client}:1"),
        )
        .await;
    }
    set_px(conn, &lock, "mholder", LEASE_MS).await;
    assert_eq!(release(conn, name, "mholder").await, 1);
    stream
}
