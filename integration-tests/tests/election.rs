//! Leader election on a real Redis: five campaigning processes (the
//! `campaigner` binary) with exactly one leader at a time, the hand-over
//! after a resignation and after a SIGKILL, the observer stream through a
//! scripted sequence and a pub/sub reconnect, cancel safety of `campaign`,
//! and one Redis Cluster. (The CLI's `redbell elect` and `redbell leader`:
//! `election_cli.rs`.)
//!
//! Measured latencies are printed to stderr: `cargo test --test election
//! -- --nocapture`.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use redbell::{Leader, Observer};
use redbell_integration_tests::cluster::{Cluster, cluster_client, name_in};
use redbell_integration_tests::{
    PrivateRedis, built_binary, client, eventually, exists, kill_clients_of_type, lock_key, pttl,
    raw, redis_url, unique,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use redbell_integration_tests::scenes::election::*;

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// One line a campaigner printed: which one, the line, when it was read.
#[derive(Debug)]
struct Said {
    who: usize,
    line: String,
    at: Instant,
}

/// A running `campaigner` process.
struct Campaigner {
    child: Child,
    stdin: Option<ChildStdin>,
}

async fn spawn_campaigner(
    url: &str,
    name: &str,
    who: usize,
    lease_ms: u64,
    said: mpsc::UnboundedSender<Said>,
) -> Campaigner {
    let mut child = Command::new(built_binary("campaigner"))
        .arg(name)
        .arg(format!("c{who}"))
        .arg(lease_ms.to_string())
        .env("REDIS_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn campaigner");
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = said.send(Said {
                who,
                line,
                at: Instant::now(),
            });
        }
    });
    Campaigner { child, stdin }
}

impl Campaigner {
    async fn order(&mut self, order: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{order}\n").as_bytes())
            .await
            .expect("write order");
        stdin.flush().await.expect("flush order");
    }
}

/// One term as the campaigners reported it.
#[derive(Debug, Clone)]
struct Term {
    term: u64,
    who: usize,
    /// Wall clock µs: when it started leading, and when it stopped
    /// (resigned, lost, or killed by the test).
    start: u128,
    end: Option<u128>,
}

/// Reads lines until `elected` from anyone; records every term.
async fn next_elected(
    said: &mut mpsc::UnboundedReceiver<Said>,
    terms: &mut Vec<Term>,
) -> (usize, u64, Instant) {
    loop {
        let s = timeout(Duration::from_secs(30), said.recv())
            .await
            .expect("a campaigner said something within 30 s")
            .expect("campaigners alive");
        if let Some((kind, term, us)) = parse(&s.line) {
            match kind {
                "elected" => {
                    terms.push(Term {
                        term,
                        who: s.who,
                        start: us,
                        end: None,
                    });
                    return (s.who, term, s.at);
                }
                _ => end_term(terms, term, us),
            }
        }
    }
}

fn end_term(terms: &mut [Term], term: u64, us: u128) {
    if let Some(t) = terms.iter_mut().find(|t| t.term == term) {
        t.end = Some(t.end.map_or(us, |e| e.min(us)));
    }
}

/// Five campaigning processes: one leader at a time, terms strictly
/// increasing, leadership intervals (by the processes' own clocks) never
/// overlapping; `resign` hands over within 200 ms, a SIGKILL of the leader
/// within 300 ms of its lease's expiry (target: 50 ms; the bound is
/// generous for a shared machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_processes_one_leader_at_a_time() {
    let url = redis_url();
    let name = unique("elect-five");
    let lease_ms = 1_000;
    let (tx, mut said) = mpsc::unbounded_channel();
    let mut campaigners = Vec::new();
    for who in 0..5 {
        campaigners.push(spawn_campaigner(&url, &name, who, lease_ms, tx.clone()).await);
    }
    drop(tx);
    let mut terms: Vec<Term> = Vec::new();
    let (mut leader, _, _) = next_elected(&mut said, &mut terms).await;

    // Resignations hand over at once.
    let mut resign_ms = Vec::new();
    for _ in 0..6 {
        sleep(Duration::from_millis(100)).await;
        let sent = Instant::now();
        campaigners[leader].order("resign").await;
        let (next, _, at) = next_elected(&mut said, &mut terms).await;
        resign_ms.push((at - sent).as_secs_f64() * 1e3);
        leader = next;
    }
    eprintln!("resign -> next leader (ms): {resign_ms:.1?}");
    for ms in &resign_ms {
        assert!(
            *ms < 200.0,
            "a resignation took {ms:.1} ms to hand over: {resign_ms:.1?}"
        );
    }

    // SIGKILLed leaders hand over at their lease's expiry.
    let mut conn = raw(&url).await;
    let mut after_expiry_ms = Vec::new();
    for _ in 0..3 {
        sleep(Duration::from_millis(200)).await;
        let killed_at = now_us();
        campaigners[leader].child.start_kill().expect("SIGKILL");
        let _ = campaigners[leader].child.wait().await;
        let remaining = pttl(&mut conn, &lock_key(&name)).await;
        let expiry = Instant::now() + Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
        let killed_term = terms.last().map(|t| t.term).expect("a term");
        end_term(&mut terms, killed_term, killed_at);
        let (next, _, at) = next_elected(&mut said, &mut terms).await;
        assert_ne!(next, leader, "a killed process was elected");
        let late = at.saturating_duration_since(expiry).as_secs_f64() * 1e3;
        let early = expiry.saturating_duration_since(at).as_secs_f64() * 1e3;
        assert!(
            early < 5.0,
            "elected {early:.1} ms before the killed leader's lease expired"
        );
        after_expiry_ms.push(late);
        leader = next;
    }
    eprintln!("SIGKILL: lease expiry -> next leader (ms): {after_expiry_ms:.1?}");
    for ms in &after_expiry_ms {
        assert!(
            *ms < 300.0,
            "{ms:.1} ms after the lease expired: {after_expiry_ms:.1?}"
        );
    }

    // Exactly one leader at any time, by the terms the processes reported.
    let mut sorted = terms.clone();
    sorted.sort_by_key(|t| t.term);
    for pair in terms.windows(2) {
        assert!(pair[0].term < pair[1].term, "terms out of order: {terms:?}");
    }
    for pair in sorted.windows(2) {
        let end = pair[0].end.expect("every term but the last ended");
        assert!(
            end <= pair[1].start,
            "term {} (c{}) overlapped term {} (c{}) by {} us",
            pair[0].term,
            pair[0].who,
            pair[1].term,
            pair[1].who,
            end - pair[1].start
        );
    }
    let current = client(&url)
        .await
        .election(&name)
        .leader()
        .await
        .expect("leader");
    assert_eq!(current.map(|l| l.term), sorted.last().map(|t| t.term));
    eprintln!("{} terms, all disjoint and increasing", terms.len());
}

/// The next item of `observer` within [`SOON`], with how long it took.
async fn next_change(observer: &mut Observer) -> (Option<Leader>, Duration) {
    let started = Instant::now();
    let item = timeout(SOON, observer.next())
        .await
        .expect("an observer item in time")
        .expect("the stream goes on")
        .expect("no error");
    (item, started.elapsed())
}

fn is(leader: &Option<Leader>, term: u64, value: &str) -> bool {
    leader
        .as_ref()
        .is_some_and(|l| l.term == term && l.value == value)
}

/// `observe()` sees a scripted sequence in order: none, elected,
/// proclaimed (a burst of 20, none skipped), resigned, elected again, and
/// lost by expiry within milliseconds of the lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_sees_every_change_in_order() {
    let url = redis_url();
    let name = unique("elect-observe");
    let a = client(&url).await;
    let b = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_millis(600))
        .renew_every(Duration::from_millis(200))
        .max_hold(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let mut observer = a.election(&name).observe();
    let (first, _) = next_change(&mut observer).await;
    assert_eq!(first, None);

    let leadership = a.election(&name).campaign("a").await.expect("campaign");
    let t1 = leadership.term();
    let (seen, took) = next_change(&mut observer).await;
    assert!(is(&seen, t1, "a"), "{seen:?}");
    eprintln!("elected -> observed: {took:?} after campaign() returned");

    for i in 0..20 {
        leadership
            .proclaim(format!("a{i}"))
            .await
            .expect("proclaim");
    }
    for i in 0..20 {
        let (seen, _) = next_change(&mut observer).await;
        assert!(
            is(&seen, t1, &format!("a{i}")),
            "proclamation {i}: {seen:?}"
        );
    }
    assert_eq!(leadership.value(), "a19");

    let resigned = Instant::now();
    leadership.resign().await.expect("resign");
    let (seen, _) = next_change(&mut observer).await;
    assert_eq!(seen, None);
    eprintln!("resigned -> observed: {:?}", resigned.elapsed());
    assert_eq!(a.election(&name).leader().await.expect("leader"), None);

    // b's renewal stops at its max_hold: the lease lapses, nobody publishes.
    let b_leads = b.election(&name).campaign("b").await.expect("campaign");
    let t2 = b_leads.term();
    assert!(t2 > t1);
    let (seen, _) = next_change(&mut observer).await;
    assert!(is(&seen, t2, "b"), "{seen:?}");
    let (seen, _) = next_change(&mut observer).await;
    assert_eq!(seen, None, "lost by expiry");
    let mut conn = raw(&url).await;
    assert!(!exists(&mut conn, &lock_key(&name)).await);
    assert!(b_leads.is_lost(), "the leader knew before the observer");
    drop(b_leads);
    b.shutdown().await.expect("shutdown");
}

/// A lapsed lease is reported within milliseconds of the key's expiry, as
/// measured against the server's own PTTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_reports_a_lapsed_lease_at_its_expiry() {
    let url = redis_url();
    let name = unique("elect-lapse");
    let holder = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_millis(800))
        .renew_every(Duration::from_millis(250))
        .max_hold(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect");
    let watcher = client(&url).await;
    let leadership = holder
        .election(&name)
        .campaign("h")
        .await
        .expect("campaign");
    let mut observer = watcher.election(&name).observe();
    let (seen, _) = next_change(&mut observer).await;
    assert!(is(&seen, leadership.term(), "h"), "{seen:?}");
    // Past max_hold no renewal is sent; the last PTTL is the expiry.
    sleep(Duration::from_millis(300)).await;
    let mut conn = raw(&url).await;
    let remaining = pttl(&mut conn, &lock_key(&name)).await;
    assert!(remaining > 0, "still held");
    let expiry = Instant::now() + Duration::from_millis(u64::try_from(remaining).unwrap_or(0));
    let (seen, _) = next_change(&mut observer).await;
    assert_eq!(seen, None);
    let late = Instant::now().saturating_duration_since(expiry);
    eprintln!("lapsed lease reported {late:?} after its expiry");
    assert!(
        late < Duration::from_millis(200),
        "{late:?} after the expiry"
    );
    drop(leadership);
}

/// After `CLIENT KILL TYPE pubsub` the observer reconnects and catches up
/// on the changes made while it was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_catches_up_after_a_pubsub_kill() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("elect-kill");
    let a = client(&url).await;
    let b = client(&url).await;
    let mut observer = a.election(&name).observe();
    assert_eq!(next_change(&mut observer).await.0, None);
    let first = a.election(&name).campaign("a").await.expect("campaign");
    let (seen, _) = next_change(&mut observer).await;
    assert!(is(&seen, first.term(), "a"), "{seen:?}");

    let mut current = Some(first);
    for round in 0..3 {
        let mut conn = raw(&url).await;
        let started = Instant::now();
        let killed = kill_clients_of_type(&mut conn, "pubsub").await;
        assert!(killed >= 1, "no pub/sub connection killed");
        // Changes while the observer's connection is down (or coming back).
        if let Some(leadership) = current.take() {
            leadership.resign().await.expect("resign");
        }
        let value = format!("r{round}");
        let next = b
            .election(&name)
            .campaign(value.as_str())
            .await
            .expect("campaign");
        let term = next.term();
        current = Some(next);
        let deadline = started + SOON;
        let mut caught_up = false;
        while !caught_up && Instant::now() < deadline {
            match timeout(deadline - Instant::now(), observer.next()).await {
                Ok(Some(Ok(item))) => caught_up = is(&item, term, &value),
                Ok(Some(Err(e))) => eprintln!("observer error (an outage): {e}"),
                Ok(None) => panic!("the stream ended"),
                Err(_) => break,
            }
        }
        assert!(caught_up, "round {round}: not caught up on term {term}");
        eprintln!(
            "round {round}: caught up on term {term} {:?} after the kill",
            started.elapsed()
        );
    }
    drop(current);
}

/// A dropped campaign leaves no leader behind, wherever it was dropped:
/// while waiting, during its acquire, or during its proclamation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_campaign_leaves_no_leader() {
    let url = redis_url();
    let name = unique("elect-cancel");
    let c = client(&url).await;
    let election = c.election(&name);
    let mut observer = c.election(&name).observe();
    assert_eq!(next_change(&mut observer).await.0, None);

    // While waiting behind another leader.
    let other = client(&url).await;
    let held = other
        .election(&name)
        .campaign("other")
        .await
        .expect("campaign");
    assert!(
        timeout(Duration::from_millis(200), election.campaign("waiting"))
            .await
            .is_err()
    );
    held.resign().await.expect("resign");

    // At every point of an uncontended campaign.
    let mut conn = raw(&url).await;
    let mut won = 0;
    for step in 0..80u64 {
        let budget = Duration::from_micros(step * 4);
        if timeout(budget, election.campaign(format!("v{step}")))
            .await
            .is_ok()
        {
            won += 1; // completed, and dropped at once: resigned on drop
        }
        let gone =
            eventually(SOON, || {
                let mut conn = conn.clone();
                let election = election.clone();
                let key = lock_key(&name);
                async move {
                    !exists(&mut conn, &key).await && election.leader().await.ok() == Some(None)
                }
            })
            .await;
        assert!(gone, "step {step}: a leader was left behind");
    }
    eprintln!("{won} of 80 campaigns completed before their deadline");
    // The observer never kept a leader: it ends at none.
    let mut last = None;
    while let Ok(Some(item)) = timeout(Duration::from_millis(300), observer.next()).await {
        last = Some(item.expect("no error"));
    }
    assert!(
        last.as_ref().is_none_or(Option::is_none),
        "observer left at {last:?}"
    );
    let _ = pttl(&mut conn, &lock_key(&name)).await;
}

/// On a Redis Cluster: campaign, observe (sharded pub/sub), resign, and
/// the hand-over to a waiting campaigner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_election() {
    let cluster = Cluster::start().await;
    let primaries = cluster.primaries().await;
    let name = name_in(&primaries[1], "elect-cluster");
    let a = cluster_client(&cluster.urls()).await;
    let b = cluster_client(&cluster.urls()).await;
    let mut observer = b.election(&name).observe();
    assert_eq!(next_change(&mut observer).await.0, None);

    let first = a.election(&name).campaign("a").await.expect("campaign");
    let (seen, took) = next_change(&mut observer).await;
    assert!(is(&seen, first.term(), "a"), "{seen:?}");
    first.proclaim("a2").await.expect("proclaim");
    assert!(is(&next_change(&mut observer).await.0, first.term(), "a2"));
    let read = b.election(&name).leader().await.expect("leader");
    assert!(is(&read, first.term(), "a2"), "{read:?}");

    let waiting = tokio::spawn({
        let election = b.election(&name);
        async move { election.campaign("b").await }
    });
    sleep(Duration::from_millis(200)).await;
    let t1 = first.term();
    let resigned = Instant::now();
    first.resign().await.expect("resign");
    let second = timeout(SOON, waiting)
        .await
        .expect("b elected in time")
        .expect("no panic")
        .expect("campaign");
    let handover = resigned.elapsed();
    assert!(second.term() > t1);
    assert_eq!(next_change(&mut observer).await.0, None);
    assert!(is(&next_change(&mut observer).await.0, second.term(), "b"));
    eprintln!("cluster: elected -> observed {took:?}; resign -> next leader {handover:?}");
    second.resign().await.expect("resign");
    assert_eq!(next_change(&mut observer).await.0, None);
}
