//! The FairMutex's grant when its grantee fails: it reaches nobody, the
//! grantee is cancelled, times out, freezes or is cut off from Redis, the
//! head gives up, or a grant message arrives late. The next waiter gets the
//! lock at once, or once the 500 ms claim lapses at most; never two holders.
//!
//! The grantee runs on a Tokio runtime of its own ([`Side`]), which stands for
//! another process: freezing that runtime stops the client dead (it reads
//! nothing, sends nothing, runs no timer) while its sockets stay open, like a
//! process that hangs or dies right after a grant reached it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{
    LONG, Monitor, PROMPT, PrivateRedis, Side, client, client_ids, client_list, config_set,
    eventually, fair_queue, fifo_key, get, kill_client, lock_key, pttl, raw, redis_url, script_sha,
    subscribers, subscriptions, unique, wake_channel,
};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, timeout};

use redbell_integration_tests::scenes::fair::*;

/// The holder's lease in the unconfirmed-grant tests.
const HOLDER_LEASE: Duration = Duration::from_secs(4);

/// The ids of the connections a client opened: those in the server's
/// [`client_list`] now that were not in `before`.
async fn new_connections(admin: &mut MultiplexedConnection, before: &HashSet<u64>) -> HashSet<u64> {
    client_ids(&client_list(admin).await)
        .difference(before)
        .copied()
        .collect()
}

/// Lost grant, case (a): the head's client lost its pub/sub connection (and
/// cannot reconnect) when the holder releases: the grant reaches nobody, so
/// the next waiter is granted at once in the same script. The cut-off waiter
/// is served later, never together with the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_reaching_nobody_moves_on_at_once() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-lost-grant");
    let mut admin = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let before = client_ids(&client_list(&mut admin).await);
    let side = Side::start();
    let a = side.client(&url).await;
    // A's connections (the helpers below open short-lived ones)
    let a_ids = new_connections(&mut admin, &before).await;
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));

    let (am, a_inside) = (a.fair_mutex(&name).with_lease(LONG), inside.clone());
    let a_task = side.spawn(async move {
        let g = am.lock().await.expect("A's lock");
        assert_eq!(
            a_inside.fetch_add(1, Ordering::SeqCst),
            0,
            "A got in beside B"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        a_inside.fetch_sub(1, Ordering::SeqCst);
        g.unlock().await.expect("A's unlock");
    });
    let b_task = queue_b_behind_a(&admin, &url, &name, &b).await;

    let list = client_list(&mut admin).await;
    let a_pubsub: Vec<u64> = list
        .iter()
        .filter(|(id, line)| a_ids.contains(id) && subscriptions(line) > 0)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(a_pubsub.len(), 1, "A's pub/sub connection: {list:#?}");
    let frozen = side.freeze().await; // A cannot reconnect
    kill_client(&mut admin, a_pubsub[0]).await;
    assert_eq!(
        subscribers(&mut admin, &name).await,
        1,
        "only B listens now"
    );

    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was not granted the lock")
        .unwrap();
    let g = g.unwrap();
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release whose grant to A reached nobody");
    assert!(delay < Duration::from_millis(500), "B in after {delay:?}");
    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
    drop(frozen); // A reconnects while B holds
    tokio::time::sleep(Duration::from_millis(300)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    g.unlock().await.unwrap();
    timeout(PROMPT, a_task)
        .await
        .expect("A was never served after its reconnect")
        .unwrap();
    assert_clean(&mut admin, &name).await;
}

/// Case (b): the grant reached the head's client, which is cancelled before
/// it confirms (its lock() task aborted while its runtime is frozen): once it
/// runs again, the grant is passed on to the next waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_grantee_passes_the_grant_on() {
    let mut s = Grant::start("fair-cancel-grant", LONG).await;
    let am = s.a_mutex();
    let a_task = s.side.spawn(async move { am.lock().await.map(drop) });
    let b_task = s.queue_b_behind_a().await;

    let frozen = s.side.freeze().await;
    let released_at = Instant::now();
    s.guard.unlock().await.unwrap();
    // The lock is now A's, on a claim lease.
    let claimed = pttl(&mut s.conn, &lock_key(&s.name)).await;
    assert!(
        claimed > 0 && claimed <= 500,
        "no claim lease for A: pttl {claimed}"
    );
    a_task.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let thawed_at = Instant::now();
    drop(frozen);
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let after_thaw = b_in.saturating_duration_since(thawed_at);
    eprintln!(
        "B in {after_thaw:?} after the cancelled grantee ran again ({:?} after the release)",
        b_in - released_at
    );
    assert!(
        b_in - released_at < Duration::from_millis(450),
        "B in {:?} after the release: not passed on when A was cancelled, only when the \
         500 ms claim lapsed",
        b_in - released_at
    );
    assert!(
        timeout(PROMPT, a_task)
            .await
            .unwrap()
            .unwrap_err()
            .is_cancelled(),
        "A's task was not cancelled"
    );
    g.unlock().await.unwrap();
    assert_clean(&mut s.conn, &s.name).await;
}

/// As above, but the head's lock_timeout() runs out while it holds an
/// unconfirmed grant: it reports Timeout and the grant moves on at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_grantee_passes_the_grant_on() {
    let mut s = Grant::start("fair-timeout-grant", LONG).await;
    let am = s.a_mutex();
    let a_deadline = Instant::now() + Duration::from_millis(1500);
    let a_task = s
        .side
        .spawn(async move { am.lock_timeout(Duration::from_millis(1500)).await.map(drop) });
    let b_task = s.queue_b_behind_a().await;
    assert!(
        Instant::now() + Duration::from_millis(100) < a_deadline,
        "set-up too slow"
    );

    // Frozen from shortly before A's deadline to just after it: shorter than
    // the 500 ms claim, so only a pass-on can serve B before the claim lapses.
    tokio::time::sleep_until(a_deadline - Duration::from_millis(150)).await;
    let frozen = s.side.freeze().await;
    let released_at = Instant::now();
    s.guard.unlock().await.unwrap(); // granted to the frozen A
    tokio::time::sleep_until(a_deadline + Duration::from_millis(30)).await;
    let thawed_at = Instant::now();
    drop(frozen);
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let after_thaw = b_in.saturating_duration_since(thawed_at);
    let after_release = b_in - released_at;
    eprintln!(
        "B in {after_thaw:?} after the timed-out grantee ran again ({after_release:?} after \
         the release, A frozen for {:?})",
        thawed_at - released_at
    );
    assert!(
        after_release < Duration::from_millis(450),
        "B in {after_release:?} after the release: not passed on when A timed out, only when \
         the 500 ms claim lapsed"
    );
    let a_result = timeout(PROMPT, a_task).await.unwrap().unwrap();
    assert!(matches!(a_result, Err(Error::Timeout)), "{a_result:?}");
    g.unlock().await.unwrap();
    assert_clean(&mut s.conn, &s.name).await;
}

/// Case (c): the grant reached the head's client, which then never confirms
/// and never passes it on (the whole client frozen, as if it died on
/// receipt): the next waiter takes over once the 500 ms claim lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_grant_lapses_after_the_claim_lease() {
    // The holder's lease: long against the 500 ms claim, short enough for
    // this test to see B served when it ends, if not before.
    let mut s = Grant::start("fair-dead-grantee", HOLDER_LEASE).await;
    let am = s.a_mutex();
    let _a_task = s.side.spawn(async move { am.lock().await.map(drop) });
    let b_task = s.queue_b_behind_a().await;

    let _frozen = s.side.freeze().await; // for the rest of the test
    let holder_left = pttl(&mut s.conn, &lock_key(&s.name)).await;
    let released_at = Instant::now();
    s.guard.unlock().await.unwrap();
    let claimed = pttl(&mut s.conn, &lock_key(&s.name)).await;
    assert!(
        claimed > 0 && claimed <= 500,
        "no claim for A: pttl {claimed}"
    );
    let (b_in, g) = timeout(HOLDER_LEASE * 2, b_task)
        .await
        .expect("B was never served")
        .unwrap();
    let g = g.unwrap();
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release granted to a dead client");
    g.unlock().await.unwrap();
    assert!(
        delay >= Duration::from_millis(400),
        "B in before A's claim lapsed: {delay:?}"
    );
    assert!(
        delay < Duration::from_secs(2),
        "B in {delay:?} after the release granted to a client that died on receipt, not \
         ~500 ms (the claim lease): the holder had {holder_left} ms left when released"
    );
}

/// Case (c'): the grantee's command connection is killed (and reconnects are
/// refused) so its confirmation, release and pass-on cannot reach Redis:
/// the next waiter takes over within the claim lease plus slack. The
/// grantee's `lock()` returns no guard on the claim: its attempt, which
/// would confirm the grant, fails (should a guard come back, its `lost()`
/// must fire no later than the next waiter gets the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grantee_cut_off_from_redis_stalls_the_queue_for_the_claim_at_most() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-cut-off");
    let mut admin = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    let before = client_ids(&client_list(&mut admin).await);
    let a = client(&url).await;
    // A's connections (the helpers below open short-lived ones)
    let a_ids = new_connections(&mut admin, &before).await;
    let guard = h
        .fair_mutex(&name)
        .with_lease(HOLDER_LEASE)
        .lock()
        .await
        .unwrap();
    let am = a.fair_mutex(&name).with_lease(LONG);
    let a_task = tokio::spawn(async move {
        let g = am.lock().await?;
        let got = Instant::now();
        timeout(Duration::from_secs(5), g.lost())
            .await
            .expect("the guard of a grant that cannot be confirmed was never lost");
        Ok::<_, Error>((got, Instant::now(), g.is_lost()))
    });
    let b_task = queue_b_behind_a(&admin, &url, &name, &b).await;

    let list = client_list(&mut admin).await;
    let a_command: Vec<u64> = list
        .iter()
        .filter(|(id, line)| a_ids.contains(id) && subscriptions(line) == 0)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(a_command.len(), 1, "A's command connection: {list:#?}");
    // Room for the connections that stay (admin, H, B, A's pub/sub), none
    // for A's reconnect: the helpers' short-lived connections are not counted.
    let staying = list
        .iter()
        .filter(|(id, _)| before.contains(id) || a_ids.contains(id))
        .count();
    config_set(&mut admin, "maxclients", staying - 1).await;
    kill_client(&mut admin, a_command[0]).await;

    let holder_left = pttl(&mut admin, &lock_key(&name)).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap(); // granted to A, whose pub/sub still listens
    let b_result = timeout(HOLDER_LEASE * 2, b_task).await;
    config_set(&mut admin, "maxclients", 10_000).await;
    let a_result = timeout(PROMPT, a_task)
        .await
        .expect("A's lock() hung")
        .unwrap();
    let (b_in, g) = b_result.expect("B was never served").unwrap();
    let g = g.unwrap();
    match a_result {
        // Its grant message came too late to use, and the attempt failed.
        Err(Error::Redis(_)) => {}
        Ok((got, lost, is_lost)) => {
            eprintln!(
                "A returned {:?} after the release, lost {:?} after it; B in {:?} after it",
                got - released_at,
                lost - released_at,
                b_in - released_at
            );
            assert!(is_lost, "lost() resolved but is_lost() is false");
            assert!(
                lost <= b_in,
                "A's guard was lost {:?} after B got in: two holders",
                lost - b_in
            );
        }
        Err(e) => panic!("A: {e:?}"),
    }
    let delay = b_in - released_at;
    eprintln!("B in {delay:?} after the release granted to a client cut off from Redis");
    g.unlock().await.unwrap();
    assert!(
        delay < Duration::from_secs(2),
        "B in {delay:?} after the release granted to a client cut off from Redis, not ~500 ms \
         (the claim lease): the holder had {holder_left} ms left when released"
    );
}

/// A head waiter that times out or is cancelled while the holder still holds
/// leaves the queue at once: the next waiter is granted the lock as soon as
/// the holder releases. Also with the release racing the head's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_giving_up_does_not_delay_the_next() {
    let url = redis_url();
    let name = unique("fair-head-gives-up");
    let mut conn = raw(&url).await;
    let (h, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let mut delays = Vec::new();
    // Release offsets from the head's deadline (ms): long after, just
    // after, at, and just before it.
    for (round, offset) in [200i64, 5, 0, -5, -100].into_iter().enumerate() {
        let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
        let am = a.fair_mutex(&name).with_lease(LONG);
        let a_task = tokio::spawn(async move {
            let r = am.lock_timeout(Duration::from_millis(600)).await;
            let gave_up = Instant::now();
            if let Ok(g) = r {
                g.unlock().await.unwrap(); // the release came first
                return (gave_up, true);
            }
            (gave_up, false)
        });
        let a_deadline = Instant::now() + Duration::from_millis(600);
        wait_queued(&conn, &name, 1).await;
        let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
        wait_parked(&conn, &url, &name, 2).await;
        let release_at = if offset >= 0 {
            a_deadline + Duration::from_millis(offset as u64)
        } else {
            a_deadline - Duration::from_millis(offset.unsigned_abs())
        };
        tokio::time::sleep_until(release_at).await;
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let (a_done, a_got_it) = timeout(PROMPT, a_task).await.unwrap().unwrap();
        let (b_in, g) = timeout(PROMPT, b_task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: B never served"))
            .unwrap();
        let g = g.unwrap();
        let delay = b_in.saturating_duration_since(released_at.max(a_done));
        eprintln!(
            "release at deadline{offset:+} ms: A {}, B in {delay:?} after the release / A's exit",
            if a_got_it { "got it first" } else { "gave up" }
        );
        assert!(
            delay < Duration::from_millis(500),
            "round {round}: B in {delay:?} after the head gave up"
        );
        delays.push(delay);
        g.unlock().await.unwrap();
        assert_clean(&mut conn, &name).await;
    }

    // Cancelled (task aborted) head.
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let a_task = spawn_lock(a.fair_mutex(&name).with_lease(LONG));
    wait_queued(&conn, &name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 2).await;
    a_task.abort();
    assert!(a_task.await.unwrap_err().is_cancelled());
    let queue_left = eventually(Duration::from_secs(2), || {
        let mut conn = conn.clone();
        let name = name.clone();
        async move { fair_queue(&mut conn, &name).await.len() == 1 }
    })
    .await;
    assert!(queue_left, "the cancelled head stayed queued");
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (b_in, g) = timeout(PROMPT, b_task)
        .await
        .expect("B never served")
        .unwrap();
    let delay = b_in - released_at;
    eprintln!("after a cancelled head: B in {delay:?} after the release");
    assert!(delay < Duration::from_millis(500), "B in {delay:?}");
    delays.push(delay);
    g.unwrap().unlock().await.unwrap();
    assert_clean(&mut conn, &name).await;
    eprintln!("delays of the next waiter: {delays:?}");
}

/// A grant message that reaches a client after its waiter already confirmed
/// the grant (the waiter was woken by something else first, e.g. the wake-up
/// of every waiter after a pub/sub reconnect, and its attempt found the
/// grant) must not cost the new holder its lock. Here the late message is
/// injected: the same grant payload published again once the waiter holds.
/// The kill storm of `exclusion_holds_while_a_clients_connections_are_killed`
/// produces it for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_message_does_not_release_the_new_holder() {
    let url = redis_url();
    let name = unique("fair-late-grant");
    let mut conn = raw(&url).await;
    let (h, a, b) = (client(&url).await, client(&url).await, client(&url).await);
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let a_task = spawn_lock(a.fair_mutex(&name).with_lease(LONG));
    wait_queued(&conn, &name, 1).await;
    let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 2).await;
    // A's member "<client id>:<waiter id>:<token>": the grant to A is
    // published on P:{N}:wake:<client id> with payload "<waiter id>:<token>".
    let queue = fair_queue(&mut conn, &name).await;
    let (a_client, grant) = queue[0].split_once(':').expect("member format");

    guard.unlock().await.unwrap();
    let (_, g) = timeout(PROMPT, a_task)
        .await
        .expect("A not served")
        .unwrap();
    let g = g.unwrap();
    assert!(
        grant.ends_with(g.token()),
        "A's member {} has another token",
        queue[0]
    );
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg(wake_channel(&name, a_client))
        .arg(grant)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(receivers, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let holder = get(&mut conn, &lock_key(&name)).await;
    let b_got_in = b_task.is_finished();
    let a_token = g.token().to_owned();
    let _ = g.unlock().await;
    let _ = timeout(PROMPT, b_task).await;
    assert!(
        holder.as_deref() == Some(a_token.as_str()) && !b_got_in,
        "a late grant message for a waiter that already holds the lock released it: \
         holder now {holder:?} (A's token {a_token}), B got in beside A: {b_got_in}"
    );
}

/// A grant to a waiter whose acquisition's lease is lost, though its guard
/// still lives (a holder that has not yet stopped), is passed on: the
/// client no longer holds that acquisition (PROTOCOL.md, duty 9). Such a
/// grant comes from a queue that still holds the member, as a promoted
/// replica's does after a failover that lost the confirm; here A's served
/// member is put back by hand, ahead of B, and A's fixed lease runs out
/// (its guard kept) while A's client still listens on the lock.
///
/// Before, A's client ignored the grant while the guard lived: the lock sat
/// on the grant's 500 ms claim before B got it (B in 2.0 s after A's
/// acquisition, A's lease 1.5 s), and no `fair_pass` of A's member ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_lost_hold_is_passed_on() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("fair-lost-hold");
    let mut conn = raw(&url).await;
    let (h, b) = (client(&url).await, client(&url).await);
    // Still subscribed when the grant comes, after A's waiter has left.
    let a = redbell::Client::builder(url.as_str())
        .subscription_linger(LONG)
        .connect()
        .await
        .expect("A's client");
    let guard = h.fair_mutex(&name).with_lease(LONG).lock().await.unwrap();
    let a_task = spawn_lock(a.fair_mutex(&name).with_lease(A_LEASE));
    wait_queued(&conn, &name, 1).await;
    let a_member = fair_queue(&mut conn, &name).await.remove(0);
    guard.unlock().await.unwrap();
    let (_, a_guard) = timeout(PROMPT, a_task)
        .await
        .expect("A not served")
        .unwrap();
    let a_guard = a_guard.expect("A's lock");
    let a_in = Instant::now();
    let b_task = spawn_lock(b.fair_mutex(&name).with_lease(LONG));
    wait_parked(&conn, &url, &name, 1).await;
    let _: i64 = redis::cmd("ZADD")
        .arg(fifo_key(&name))
        .arg(1) // ahead of B
        .arg(&a_member)
        .query_async(&mut conn)
        .await
        .unwrap();
    let monitor = Monitor::start(&url).await;

    // A's key expires; B's attempt grants A's member; A's client passes it
    // on (or not), and B gets the lock.
    let (b_in, b_guard) = timeout(Duration::from_secs(10), b_task)
        .await
        .expect("B never got the lock")
        .unwrap();
    eprintln!(
        "B in {:?} after A's acquisition (A's lease {A_LEASE:?})",
        b_in - a_in
    );
    let b_guard = b_guard.expect("B's lock");
    monitor.sync().await;
    let passed = monitor.count(&[
        &format!("\"evalsha\" \"{}\"", script_sha("fair_pass")),
        &a_member,
    ]);
    assert!(a_guard.is_lost(), "A's lease did not run out");
    assert!(
        passed == 1,
        "the grant to A's lost hold ({a_member}) was passed on {passed} times, not once: B \
         waited for its claim to lapse"
    );
    drop(a_guard);
    b_guard.unlock().await.unwrap();
}

/// A's fixed lease in `a_grant_to_a_lost_hold_is_passed_on`: it runs out
/// with its guard kept.
const A_LEASE: Duration = Duration::from_millis(1500);
