//! What a look at the sentinels hears, with the client's sentinels behind
//! proxies that partition, hold back or delay ([`Proxy::lag_replies`])
//! what they relay. A look is bounded by the client's connect timeout, so
//! a sentinel that answers within it is heard, however slowly; one that
//! timed out is not waited for again until it answers again. Each test on
//! a real topology of its own ([`Topology`]).

use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::sentinel::{
    MASTER, Topology, failover_followed_within, on_old_primary_until_moved, sentinel_agrees,
};
use redbell_integration_tests::{
    PrivateRedis, Proxy, eventually_every, get, lock_key, node_url, query, raw, replication_field,
    unique,
};
use tokio::time::Instant;

/// How late each proxy delivers what a sentinel sends: more than redis-rs
/// waits for a reply by default (500 ms), well within the connect timeout.
const LAG: Duration = Duration::from_millis(700);

/// The client's connect timeout: a connection to a sentinel (one lag for
/// its handshake) and its answer (one more) fit in it twice over.
const CONNECT: Duration = Duration::from_secs(5);

/// Every sentinel 700 ms away: the client connects (it used to fail with
/// "timed out": its asks kept redis-rs's defaults, 1 s to connect and
/// 500 ms per reply, whatever the connect timeout), and it follows a
/// failover, its locks landing on the new primary within 5 s of the
/// sentinels naming it (a move takes about three lags: the announcement,
/// then a look).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_on_a_slow_link_are_heard_within_the_connect_timeout() {
    let topo = Topology::start().await;
    let mut proxies = Vec::new();
    for port in topo.sentinel_ports() {
        let proxy = Proxy::start(0, port).await.expect("a proxy");
        proxy.lag_replies(LAG);
        proxies.push(proxy);
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let client = Client::sentinel_builder(&urls, MASTER)
        .connect_timeout(CONNECT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("a client of sentinels {LAG:?} away: {e}"));
    failover_followed_within(
        &topo,
        &client,
        Duration::from_secs(5),
        &format!("with the sentinels {LAG:?} away"),
    )
    .await;
}

/// The connect timeout of [`a_sentinel_back_from_a_partition_is_waited_for_again`]'s
/// client, which bounds each sentinel's answer: long enough for a look to
/// outlast a failover.
const LONG_CONNECT: Duration = Duration::from_secs(8);

/// How late the stale sentinel's proxy delivers what it relays (one lag
/// for its connection's handshake, one for its answer).
const STALE_LAG: Duration = Duration::from_millis(600);

/// Kills the client's subscription on `trigger` (a plain Redis server the
/// client takes for a sentinel): the client subscribes again and looks at
/// the sentinels once. Waits until that look asked `watched` (its proxy
/// accepted a new connection); when it did.
async fn look(trigger: &PrivateRedis, watched: &Proxy) -> Instant {
    let before = watched.accepted();
    let killed: Option<i64> = query(
        trigger.port(),
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"),
    )
    .await;
    assert_eq!(killed, Some(1), "the client's subscription on the trigger");
    let asked = eventually_every(Duration::from_secs(10), Duration::from_millis(5), || {
        let accepted = watched.accepted();
        async move { accepted > before }
    })
    .await;
    assert!(asked, "no look asked the sentinel within 10 s");
    Instant::now()
}

/// Sentinels 1 and 2 are partitioned from the client for one look (it
/// waits for them one timeout, then marks them silent), then come back. A
/// look in which sentinel 0 answers first is decided by it alone (the two
/// were silent at their last look), but their answers, a moment later,
/// must clear their marks. So in the next look, when sentinel 0's answer is
/// stale (given before a failover, delivered after it: a slow link), the
/// client waits for the two others, which name the new primary, and moves.
/// It used to drop the asks it did not wait for, so the marks stayed set
/// and every later look was decided by whichever sentinel answered first,
/// here the stale one: the client stayed on the old primary, which still
/// answers as a primary (`SENTINEL FAILOVER` leaves it up until it is
/// converted, about 10 s later), and granted locks there.
///
/// The looks are started by hand: the client's fourth "sentinel" is a
/// plain Redis server (it answers `SENTINEL` with an error), where killing
/// the client's subscription makes it subscribe again and look once; the
/// subscriptions to the real sentinels are black-holed, so no announcement
/// moves the client behind the test's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_back_from_a_partition_is_waited_for_again() {
    let topo = Topology::start().await;
    let mut proxies = Vec::new();
    for port in topo.sentinel_ports() {
        proxies.push(Proxy::start(0, port).await.expect("a proxy"));
    }
    let trigger = PrivateRedis::start().await;
    let mut urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    urls.push(trigger.url());
    let client = Client::sentinel_builder(&urls, MASTER)
        .connect_timeout(LONG_CONNECT)
        .connect()
        .await
        .expect("a sentinel client");
    for p in &proxies {
        p.half_open(0).await; // the subscription, made before the first look
    }
    let name = unique("sentinel-back");
    let g = client.mutex(&name).lock().await.expect("lock before");
    g.unlock().await.expect("unlock before");

    // Sentinels 1 and 2 partitioned: a look waits for them and marks them
    // silent.
    proxies[1].partition().await;
    proxies[2].partition().await;
    look(&trigger, &proxies[1]).await;
    tokio::time::sleep(LONG_CONNECT + Duration::from_secs(1)).await;

    // Back, but their answers come after sentinel 0's: it decides alone,
    // and their answers arrive a moment later.
    proxies[1].pause().await;
    proxies[2].pause().await;
    look(&trigger, &proxies[1]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxies[1].resume();
    proxies[2].resume();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Sentinel 0 answers before the failover (held back from then on), and
    // the answer arrives after it; sentinels 1 and 2 are asked only after.
    proxies[1].partition().await;
    proxies[2].partition().await;
    proxies[0].lag_replies(STALE_LAG);
    let started = look(&trigger, &proxies[1]).await;
    tokio::time::sleep_until(started + STALE_LAG + STALE_LAG / 2).await;
    proxies[0].pause().await;
    topo.ask_failover(1).await.expect("SENTINEL FAILOVER");
    let (new, old) = (topo.replica_port(), topo.primary_port());
    assert!(
        topo.wait_for_primary(new, Duration::from_secs(20)).await,
        "the sentinels did not agree on the new primary within 20 s"
    );
    assert_eq!(
        replication_field(old, "role").await.as_deref(),
        Some("master"),
        "the old primary was converted already"
    );
    proxies[0].lag_replies(Duration::ZERO);
    proxies[0].resume();
    tokio::time::sleep(Duration::from_millis(500)).await; // the stale answer is in
    proxies[1].resume();
    proxies[2].resume();
    let since = Instant::now();
    let on_old = on_old_primary_until_moved(
        &client,
        &topo,
        &name,
        (since, Duration::from_secs(3)),
        "after the sentinels that name the new primary answered",
    )
    .await;
    eprintln!(
        "{on_old} locks on the old primary after the two sentinels answered, {:?} after \
         the look began",
        started.elapsed()
    );
}

/// Waits (up to 40 s) until `replica` replicates from `primary` with its
/// link up and every sentinel sees `primary` healthy with one replica:
/// a failover back to `replica` can be asked for.
async fn settled(topo: &Topology, primary: u16, replica: u16) {
    let sentinels = topo.sentinel_ports();
    let done = eventually_every(
        Duration::from_secs(40),
        Duration::from_millis(100),
        || async move {
            if replication_field(replica, "master_link_status")
                .await
                .as_deref()
                != Some("up")
            {
                return false;
            }
            for s in sentinels {
                if !sentinel_agrees(s, primary).await {
                    return false;
                }
            }
            true
        },
    )
    .await;
    assert!(
        done,
        "{replica} did not settle as a replica of {primary} within 40 s"
    );
}

/// The client missed a failover and the one back (its sentinels' links
/// dropped everything, and it asked nothing of the primary): it is on the
/// old primary again, which the sentinels now name at configuration epoch
/// 2, while it found it at epoch 0. In a look, sentinel 0 names it at
/// epoch 2, then sentinel 2's answer arrives, stale: given before the
/// failover back, it names the other node at epoch 1, which still answers
/// as a primary (until the sentinels convert it, about 10 s later). That
/// answer is older than what the look already heard, and the look must
/// keep the client where it is. The client took it for news (newer than
/// the epoch 0 it found its primary at) and moved to the demoted node: its
/// locks were granted there while the sentinels' primary granted them to
/// others.
// Ignored in `make test`: about one run in three, the client's ask of
// sentinel 1 is not the connection the test half-opens (it black-holes
// the second connection after the kill, taken to be the ask after the
// resubscription), sentinel 1 answers at once with the then-current
// primary, and the client follows it before the failover back: the test's
// premise, not the client, fails. Run it with `-- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "flaky premise: the half-opened connection is not always the ask"]
async fn a_stale_answer_older_than_the_primary_named_in_the_same_look_is_no_news() {
    let topo = Topology::start().await;
    let (p, q) = (topo.primary_port(), topo.replica_port());
    let mut proxies = Vec::new();
    for port in topo.sentinel_ports() {
        proxies.push(Proxy::start(0, port).await.expect("a proxy"));
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let client = Client::sentinel_builder(&urls, MASTER)
        .connect_timeout(EPOCH_CONNECT)
        .connect()
        .await
        .expect("a sentinel client");
    // Only sentinel 1 is listened to (for the test to start a look).
    proxies[0].half_open(0).await;
    proxies[2].half_open(0).await;
    let name = unique("sentinel-epoch");
    let g = client.mutex(&name).lock().await.expect("lock before");
    g.unlock().await.expect("unlock before");

    // A failover the client does not hear of.
    for proxy in &proxies {
        proxy.drop_all().await;
    }
    topo.ask_failover(0).await.expect("SENTINEL FAILOVER");
    assert!(
        topo.wait_for_primary(q, Duration::from_secs(20)).await,
        "no failover to {q}"
    );
    settled(&topo, q, p).await;
    for proxy in &proxies {
        proxy.resume();
    }

    // A look (started by the client subscribing to sentinel 1 again) in
    // which sentinel 0 is asked only after the failover back, sentinel 1
    // never answers, and sentinel 2 answers before it, held back.
    proxies[0].partition().await;
    proxies[1].half_open(proxies[1].accepted() + 1).await; // after the subscription
    proxies[2].lag_replies(STALE_LAG);
    let before = proxies[2].accepted();
    let killed: Option<i64> = query(
        topo.sentinel_ports()[1],
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"),
    )
    .await;
    assert_eq!(killed, Some(1), "the client's subscription on sentinel 1");
    let asked = eventually_every(Duration::from_secs(10), Duration::from_millis(5), || {
        let accepted = proxies[2].accepted();
        async move { accepted > before }
    })
    .await;
    assert!(asked, "no look asked sentinel 2 within 10 s");
    let look = Instant::now();
    tokio::time::sleep(STALE_LAG + STALE_LAG / 2).await;
    proxies[2].pause().await;

    // The failover back, not heard of either.
    proxies[1].drop_all().await;
    let asked = eventually_every(Duration::from_secs(20), Duration::from_millis(100), || {
        let topo = &topo;
        async move { topo.ask_failover(0).await.is_ok() }
    })
    .await;
    assert!(asked, "the sentinels refused the failover back for 20 s");
    assert!(
        topo.wait_for_primary(p, Duration::from_secs(20)).await,
        "no failover back to {p}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxies[1].resume();

    // Sentinel 0 answers (the primary, epoch 2), then sentinel 2's stale
    // answer arrives, within the look's bound. The client reads an answer
    // before it closes the connection it asked on: that close, not a
    // guessed delay, lets the stale answer through.
    let open = proxies[0].connections();
    proxies[0].resume();
    let answered = eventually_every(Duration::from_secs(20), Duration::from_millis(5), || {
        let now = proxies[0].connections();
        async move { now < open }
    })
    .await;
    assert!(answered, "the look never closed its ask of sentinel 0");
    let into = look.elapsed();
    eprintln!("the stale answer is let through {into:?} into the look");
    assert!(
        into < EPOCH_CONNECT,
        "sentinel 0 was asked {into:?} ago, longer than the connect timeout: its ask timed out"
    );
    let open = proxies[2].connections();
    proxies[2].lag_replies(Duration::ZERO);
    proxies[2].resume();
    let read = eventually_every(Duration::from_secs(20), Duration::from_millis(5), || {
        let now = proxies[2].connections();
        async move { now < open }
    })
    .await;
    assert!(read, "the look never closed its ask of sentinel 2");
    // Time for a move the stale answer would start (a local connect).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let probe = format!("{name}-after");
    let g = client
        .mutex(&probe)
        .try_lock()
        .await
        .expect("try_lock after the failover back")
        .expect("a fresh name is free");
    let (mut primary, mut demoted) = (raw(&node_url(p)).await, raw(&node_url(q)).await);
    let on_primary = get(&mut primary, &lock_key(&probe)).await.is_some();
    let on_demoted = get(&mut demoted, &lock_key(&probe)).await.is_some();
    drop(g);
    assert_eq!(
        replication_field(q, "role").await.as_deref(),
        Some("master"),
        "{q} was converted already: the stale answer could not be taken"
    );
    assert!(
        on_primary && !on_demoted,
        "the lock went to the demoted {q} (on it: {on_demoted}), not to the primary {p}"
    );
}

/// The connect timeout of [`a_stale_answer_older_than_the_primary_named_in_the_same_look_is_no_news`]'s
/// client: sentinel 0's ask, made before the failover back, must outlast
/// it (a couple of seconds, more on a loaded machine).
const EPOCH_CONNECT: Duration = Duration::from_secs(20);

/// Every sentinel frozen (SIGSTOP: connections accepted, nothing
/// answered): a client that connects fails, within a bound (each sentinel
/// is asked once, for the connect timeout; 30 s here is a hang), while a
/// client connected before keeps working on its primary; once they are
/// thawed, a client connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_sentinel_frozen_a_connect_fails_in_bounded_time() {
    let topo = Topology::start().await;
    let connected = redbell_integration_tests::sentinel::sentinel_client(&topo).await;
    let name = unique("sentinel-all-frozen");
    let frozen: Vec<_> = (0..3).map(|i| topo.freeze_sentinel(i)).collect();
    let connect = Client::sentinel_builder(topo.sentinel_urls(), MASTER)
        .connect_timeout(Duration::from_secs(1))
        .connect();
    let outcome = tokio::time::timeout(Duration::from_secs(30), connect).await;
    let Ok(outcome) = outcome else {
        panic!("a connect with every sentinel frozen hung for 30 s");
    };
    assert!(outcome.is_err(), "connected with every sentinel frozen");
    let g = connected
        .mutex(&name)
        .lock()
        .await
        .expect("lock, sentinels frozen");
    g.unlock().await.expect("unlock, sentinels frozen");
    drop(frozen); // SIGCONT
    let again = Client::sentinel(topo.sentinel_urls(), MASTER)
        .await
        .expect("a client once the sentinels are thawed");
    let g = again
        .mutex(&name)
        .lock()
        .await
        .expect("lock, sentinels thawed");
    g.unlock().await.expect("unlock, sentinels thawed");
}
