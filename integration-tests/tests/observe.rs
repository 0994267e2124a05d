//! What an operator sees: `Client::stats()` adds up after a contended run
//! (acquired = released + held; wake-ups sent = received + skipped; local
//! hand-offs timed), and each warning fires in its fault (a lease lost by
//! DEL, a lease lost by its deadline under `CLIENT PAUSE` and the "renewals
//! failing" warning before it, a pub/sub reconnect storm, a missing ACL
//! right: once per right) and stays silent on a healthy contended run.
//!
//! The warnings are captured by a process-wide `tracing` subscriber; each
//! test looks only at the lines naming its own lock (the storm warning names
//! none, so only its own test makes one).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::acl::User;
use redbell_integration_tests::{
    LONG, client, eventually, kill_clients_of_type, lock_key, raw, redis_url, renewing_client,
    unique,
};

/// The tests run one at a time: the pause and the storm would disturb the
/// others.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every line the subscriber wrote (WARN and INFO levels).
fn log() -> &'static Arc<Mutex<Vec<String>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Capture(sink.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        lines
    })
}

struct Capture(Arc<Mutex<Vec<String>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured WARN lines that contain every one of `needles`.
fn warnings(needles: &[&str]) -> Vec<String> {
    log()
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("WARN") && needles.iter().all(|n| l.contains(n)))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_contended_run_adds_up_and_warns_nothing() {
    let _serial = SERIAL.lock().await;
    log();
    let url = redis_url();
    let name = unique("observe-healthy");
    let c = client(&url).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mutex = c.mutex(&name);
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = mutex.lock().await.unwrap();
                tokio::time::sleep(Duration::from_micros(200)).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let busy = c.mutex(&name).try_lock().await.unwrap().unwrap();
    assert!(c.mutex(&name).try_lock().await.unwrap().is_none());
    let s = c.stats();
    assert_eq!(s.acquired, 201, "{s:?}");
    assert_eq!(s.busy, 1, "{s:?}");
    assert_eq!(s.released_ours, 200, "{s:?}");
    assert_eq!(
        s.acquired,
        s.releases() + s.guards as u64,
        "acquired = released + held: {s:?}"
    );
    assert_eq!(s.guards, 1, "{s:?}");
    assert_eq!(s.waiters, 0, "{s:?}");
    assert_eq!(s.leases_lost(), 0, "{s:?}");
    assert!(s.wakeups_received > 0, "{s:?}");
    assert_eq!(
        s.wakeups_sent,
        s.wakeups_received + s.wakeups_skipped,
        "wake-ups sent = received + skipped: {s:?}"
    );
    assert!(s.wakeups_passed_on >= s.wakeups_skipped, "{s:?}");
    // Every hand-off here is from one task of the client to another.
    assert!(s.local_handoffs > 0, "{s:?}");
    let gap = s.mean_handoff_gap().expect("a mean gap");
    assert!(gap < Duration::from_secs(1), "mean hand-off gap {gap:?}");
    assert_eq!(s.permission_denied, 0, "{s:?}");
    busy.unlock().await.unwrap();
    assert_eq!(c.stats().guards, 0);
    assert!(
        warnings(&[&name]).is_empty(),
        "a healthy run warned: {:?}",
        warnings(&[&name])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_by_del_is_counted_and_warned() {
    let _serial = SERIAL.lock().await;
    log();
    let url = redis_url();
    let name = unique("observe-del");
    let c = renewing_client(&url, Duration::from_secs(3), Duration::from_millis(300)).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    let mut conn = raw(&url).await;
    let _: () = redis::cmd("DEL")
        .arg(lock_key(&name))
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease was reported lost");
    assert_eq!(c.stats().lost_gone, 1, "{:?}", c.stats());
    let lines = warnings(&["lease lost", &name, "gone"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_by_its_deadline_under_client_pause_is_counted_and_warned() {
    let _serial = SERIAL.lock().await;
    log();
    let url = redis_url();
    let name = unique("observe-pause");
    let c = renewing_client(&url, Duration::from_secs(1), Duration::from_millis(300)).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    let mut conn = raw(&url).await;
    // Only writes pause, so other tests' reads go on; the renewals wait.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_500)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease was reported lost at its deadline");
    let lines = warnings(&["lease lost", &name, "deadline"]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(c.stats().lost_deadline >= 1, "{:?}", c.stats());
    drop(guard);
}

/// Issue 31: under `CLIENT PAUSE` a renewal gets no reply at all, so a
/// warning that waits for a failed reply never comes before the loss. With
/// a 3 s lease renewed every second, renewals unconfirmed for a third of the
/// lease must warn before `lost()` resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_renewals_warn_before_the_lease_is_lost() {
    let _serial = SERIAL.lock().await;
    log();
    let url = redis_url();
    let name = unique("observe-at-risk");
    let c = renewing_client(&url, Duration::from_secs(3), Duration::from_secs(1)).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    let mut conn = raw(&url).await;
    // Writes pause past the lease: every renewal waits, none fails.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4_500)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let paused = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(8), guard.lost())
        .await
        .expect("the lease was reported lost at its deadline");
    let lost_after = paused.elapsed();
    // Taken the moment `lost()` resolved: what was warned before the loss.
    let at_risk = warnings(&["renewals are failing", &name]);
    assert_eq!(
        at_risk.len(),
        1,
        "one 'renewals failing' warning before the loss ({lost_after:?} into the pause): {:?}",
        warnings(&[&name])
    );
    println!("lost {lost_after:?} into the pause; warned: {at_risk:?}");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm_is_warned() {
    let _serial = SERIAL.lock().await;
    log();
    let url = redis_url();
    let name = unique("observe-storm");
    let c = client(&url).await;
    let holder = c.mutex(&name).lock().await.unwrap();
    let waiter = {
        let mutex = c.mutex(&name);
        tokio::spawn(async move { mutex.lock().await })
    };
    let mut conn = raw(&url).await;
    let before = c.stats().hub_reconnects;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        kill_clients_of_type(&mut conn, "pubsub").await;
    }
    let stormed = eventually(Duration::from_secs(5), || async {
        !warnings(&["keeps reconnecting"]).is_empty()
    })
    .await;
    assert!(stormed, "no storm warning after 6 reconnects in 2 s");
    assert!(c.stats().hub_reconnects >= before + 5, "{:?}", c.stats());
    holder.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

/// Connects (its SUBSCRIBE is not checked: `ACL DRYRUN` is `@dangerous`),
/// then two waiters of one lock are refused their SUBSCRIBE: both fail
/// with the typed error, both are counted, one warning names the right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_is_warned_once_with_the_right() {
    let _serial = SERIAL.lock().await;
    log();
    let name = unique("observe-acl-sub");
    let user =
        User::create("resetchannels ~redbell:* &redbell:* +@all -@dangerous -subscribe").await;
    let holder = client(&redis_url()).await;
    let c = user
        .connect()
        .await
        .expect("connect (SUBSCRIBE is not probed)");
    let _held = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
    for _ in 0..2 {
        match c.mutex(&name).lock_timeout(Duration::from_secs(5)).await {
            Err(Error::NoPermission { command, .. }) => assert_eq!(command, "SUBSCRIBE"),
            other => panic!("a waiter whose SUBSCRIBE is refused: {other:?}"),
        }
    }
    assert_eq!(c.stats().permission_denied, 2, "{:?}", c.stats());
    let lines = warnings(&[&name]);
    assert_eq!(lines.len(), 1, "one warning: {lines:?}");
    assert!(
        lines[0].contains("missing ACL right") && lines[0].contains("SUBSCRIBE"),
        "{lines:?}"
    );
}

/// A right only the acquire script uses (`PTTL`, read when the lock is
/// held), missing where connect cannot tell (no `ACL DRYRUN`): the connect
/// succeeds, each attempt on the held lock fails with the typed error, and
/// one warning names the refused command (as the server's message names
/// it: Redis 7.0 says only that a script's command was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_command_refused_past_connect_is_warned_once() {
    let _serial = SERIAL.lock().await;
    log();
    let name = unique("observe-acl-pttl");
    let user = User::create("resetchannels ~redbell:* &redbell:* +@all -@dangerous -pttl").await;
    let holder = client(&redis_url()).await;
    let c = user.connect().await.expect("connect (PTTL is not probed)");
    let _held = holder.mutex(&name).with_lease(LONG).lock().await.unwrap();
    let mut refused = Vec::new();
    for _ in 0..3 {
        match c.mutex(&name).lock_timeout(Duration::from_secs(5)).await {
            Err(Error::NoPermission { command, .. }) => refused.push(command),
            other => panic!("a waiter whose PTTL is refused: {other:?}"),
        }
    }
    refused.dedup();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(c.stats().permission_denied, 3, "{:?}", c.stats());
    let lines = warnings(&["missing ACL right", &name]);
    assert_eq!(lines.len(), 1, "one warning: {lines:?}");
    assert!(lines[0].contains(&refused[0]), "{lines:?}");
}

/// Every release is a `redbell.release` span at debug level with its lock,
/// kind and outcome: `ours` for a release of a held lock, `gone` for one
/// whose lease had run out. (A subscriber of this test's thread only, at
/// debug level, printing each span as it closes.)
#[test]
fn a_release_is_a_debug_span_with_its_outcome() {
    // Not during another test's pause: the release would time out.
    let _serial = SERIAL.blocking_lock();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || Capture(sink.clone()))
        .finish();
    let name = unique("observe-release-span");
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let c = client(&redis_url()).await;
            c.mutex(&name).lock().await.unwrap().unlock().await.unwrap();
            let short = c
                .mutex(&name)
                .with_lease(Duration::from_millis(50))
                .lock()
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(short.unlock().await.is_err(), "the lease ran out");
        });
    });
    let spans: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("redbell.release") && l.contains(&name) && l.contains("close"))
        .cloned()
        .collect();
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(
        spans[0].contains("DEBUG") && spans[0].contains("outcome=\"ours\""),
        "{spans:?}"
    );
    assert!(spans[1].contains("outcome=\"gone\""), "{spans:?}");
    assert!(spans[0].contains("kind=Plain"), "{spans:?}");
}
