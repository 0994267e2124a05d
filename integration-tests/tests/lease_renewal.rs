//! The renewal task's own life: no renewal outlives an unlock or a drop,
//! ten thousand guards renew in batches, and renewal survives a killed
//! command connection.
//!
//! Tests that kill connections or count commands server-wide run on a
//! [`PrivateRedis`] of their own.

use std::time::Duration;

use futures_util::future::join_all;
use rand::Rng;
use redbell::{Error, MutexGuard};
use redbell_integration_tests::{
    Monitor, PrivateRedis, commandstats, exists, get, gone_within, kill_clients_of_type, lock_key,
    pttl, raw, renewing_client, reset_stats, script_sha, unique, warm_up,
};
use tokio::time::{Instant, sleep, timeout};

// ---------------------------------------------------------------- helpers

/// 16 locks on one client (lease 300 ms, renewed every 100 ms), each taken
/// and released 6 times at random moments around the renewal instants,
/// half by unlock(), half by drop. After each release the key stays gone
/// for three renewal periods, and MONITOR shows that no renewal took effect
/// (no PEXPIRE of the key) between a release and the next acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_outlives_unlock_or_drop() {
    const LOCKS: usize = 16;
    const ROUNDS: usize = 6;
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let every = Duration::from_millis(100);
    let c = renewing_client(&url, Duration::from_millis(300), every).await;
    warm_up(&c).await;
    let monitor = Monitor::start(&url).await;
    let conn = raw(&url).await;
    let prefix = unique("orphan");

    let mut tasks = Vec::new();
    for l in 0..LOCKS {
        let mutex = c.mutex(&format!("{prefix}-{l}"));
        let key = lock_key(mutex.name());
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let (mut tokens, mut expired) = (Vec::new(), 0);
            for round in 0..ROUNDS {
                let guard = mutex.lock().await.expect("lock");
                let taken = Instant::now();
                tokens.push(guard.token().to_owned());
                // Around the first or second renewal instant (±30 ms).
                let k = 1 + (round % 2) as u64;
                let jitter = rand::rng().random_range(0..=60u64);
                let at = taken + every * k as u32 - Duration::from_millis(30)
                    + Duration::from_millis(jitter);
                tokio::time::sleep_until(at).await;
                if round % 2 == l % 2 {
                    // A renewal starved past the 300 ms lease (a very busy
                    // machine) is not what this test is about: tolerated
                    // when the guard itself knew it was lost, and counted.
                    let was_lost = guard.is_lost();
                    match guard.unlock().await {
                        Ok(()) => {}
                        Err(Error::NotHeld) if was_lost => expired += 1,
                        Err(e) => panic!("unlock of a renewed lease: {e}"),
                    }
                } else {
                    drop(guard);
                    let gone = gone_within(&conn, &key, Duration::from_secs(2)).await;
                    assert!(gone, "{key}: the dropped guard was not released");
                }
                // Three renewal periods: the key must never come back.
                let watch = Instant::now();
                while watch.elapsed() < every * 3 {
                    assert!(
                        !exists(&mut conn, &key).await,
                        "{key} reappeared {:?} after its release",
                        watch.elapsed()
                    );
                    sleep(Duration::from_millis(15)).await;
                }
            }
            (key, tokens, expired)
        }));
    }
    let done = timeout(Duration::from_secs(60), join_all(tasks))
        .await
        .expect("the release loops did not finish");
    monitor.sync().await;
    let lines = monitor.lines();
    let (release, extend) = (script_sha("release"), script_sha("extend"));
    let (mut renewals, mut late_calls, mut expired) = (0, 0, 0);
    for t in done {
        let (key, tokens, lapsed) = t.expect("task panicked");
        expired += lapsed;
        let quoted = format!("\"{key}\"");
        let pexpire = format!("\"PEXPIRE\" {quoted}");
        let set = format!("\"SET\" {quoted}");
        renewals += lines.iter().filter(|l| l.contains(&pexpire)).count();
        for token in tokens {
            let released = lines
                .iter()
                .position(|l| l.contains(release) && l.contains(&token))
                .unwrap_or_else(|| panic!("no release of {token} on {key}"));
            // Up to the next acquisition's SET of the key.
            let next = lines[released + 1..]
                .iter()
                .position(|l| l.contains(&set))
                .map_or(lines.len(), |i| i + released + 1);
            let orphan: Vec<&String> = lines[released + 1..next]
                .iter()
                .filter(|l| l.contains(&pexpire))
                .collect();
            assert!(
                orphan.is_empty(),
                "{key}: a renewal took effect after the release of {token}: {orphan:#?}"
            );
            late_calls += lines[released + 1..]
                .iter()
                .filter(|l| l.contains(extend) && l.contains(&token))
                .count();
        }
    }
    eprintln!(
        "{} releases racing renewals: {renewals} renewals applied, {late_calls} renewal calls \
         executed after their token's release (harmless: they found the key gone), {expired} \
         leases starved out before their unlock",
        LOCKS * ROUNDS
    );
    // A renewal already in flight when the guard went may still execute
    // after the release (it then finds the key gone); a renewal that went on
    // after the release would show for most of them.
    assert!(
        late_calls <= LOCKS * ROUNDS / 8,
        "{late_calls} renewal calls executed after their token's release: renewal does not stop \
         with the guard"
    );
    assert!(
        expired <= LOCKS * ROUNDS / 8,
        "{expired} renewed 300 ms leases ran out before their unlock"
    );
    assert!(
        renewals >= LOCKS * ROUNDS / 2,
        "only {renewals} renewals in {} holds around the renewal instants: the race was not exercised",
        LOCKS * ROUNDS
    );
}

// ----------------------------------------------------- renewal at scale

/// 10,000 guards held by one client (lease 3 s, renewed every 1 s): one
/// renewal period costs at most 10,000/64 script calls server-wide, and
/// every key keeps its lease past the 3 s it would otherwise have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_guards_renew_in_batches() {
    const GUARDS: usize = 10_000;
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let lease = Duration::from_secs(3);
    let every = Duration::from_secs(1);
    let c = renewing_client(&url, lease, every).await;
    warm_up(&c).await;
    let prefix = unique("many");
    let names: Vec<String> = (0..GUARDS).map(|i| format!("{prefix}-{i}")).collect();

    let started = Instant::now();
    let mut guards: Vec<MutexGuard> = Vec::with_capacity(GUARDS);
    for chunk in names.chunks(1000) {
        let mutexes: Vec<_> = chunk.iter().map(|n| c.mutex(n)).collect();
        for g in join_all(mutexes.iter().map(|m| m.lock())).await {
            guards.push(g.expect("lock"));
        }
    }
    let acquired = started.elapsed();

    // One renewal period, counted server-wide (nothing else talks to this
    // server meanwhile).
    let mut admin = raw(&url).await;
    sleep(Duration::from_millis(200)).await;
    reset_stats(&mut admin).await;
    sleep(every).await;
    let stats = commandstats(&mut admin).await;
    let calls = |cmd: &str| stats.get(cmd).copied().unwrap_or(0);
    let scripts = calls("evalsha") + calls("eval");
    eprintln!(
        "{GUARDS} guards acquired in {acquired:?}; one renewal period: {scripts} script calls, \
         {} keys renewed (PEXPIRE)",
        calls("pexpire")
    );
    assert!(
        scripts as usize <= GUARDS / 64,
        "{scripts} script calls in one renewal period for {GUARDS} guards (limit {})",
        GUARDS / 64
    );
    assert!(
        calls("pexpire") as usize >= GUARDS / 2,
        "only {} keys renewed in a renewal period",
        calls("pexpire")
    );

    // Past the 3 s lease (and two periods): every key is still there.
    sleep((started + lease + Duration::from_millis(500)).saturating_duration_since(Instant::now()))
        .await;
    let mut pipe = redis::pipe();
    for n in &names {
        pipe.cmd("PTTL").arg(lock_key(n));
    }
    let ttls: Vec<i64> = pipe.query_async(&mut admin).await.unwrap();
    let expired = ttls.iter().filter(|&&t| t <= 0).count();
    assert_eq!(
        expired,
        0,
        "{expired} of {GUARDS} keys lost their lease {:?} after the acquisitions began",
        started.elapsed()
    );
    assert!(ttls.iter().all(|&t| t <= 3000));
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "{lost} guards report a lost lease");
}

// --------------------------------------------- renewal across a reconnect

/// The client's command connection is killed (twice) while it holds a 1 s
/// lease renewed every ⅓ s: renewal reconnects and goes on, so after 3 s
/// the key still holds the token and the lease was never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_survives_a_killed_command_connection() {
    let redis = PrivateRedis::start().await;
    let url = redis.url();
    let name = unique("killed-conn");
    let key = lock_key(&name);
    let c = renewing_client(&url, Duration::from_secs(1), Duration::from_millis(333)).await;
    let guard = c.mutex(&name).lock().await.unwrap();
    let started = Instant::now();

    let kills = async {
        let mut killed = 0;
        for at in [300, 1300] {
            sleep((started + Duration::from_millis(at)).saturating_duration_since(Instant::now()))
                .await;
            // Our own connection is of the killed type too: a fresh one each time.
            killed += kill_clients_of_type(&mut raw(&url).await, "normal").await;
        }
        sleep((started + Duration::from_secs(3)).saturating_duration_since(Instant::now())).await;
        killed
    };
    let killed = tokio::select! {
        k = kills => k,
        () = guard.lost() => panic!("lost() resolved {:?} in, after a killed connection", started.elapsed()),
    };
    assert!(
        killed >= 4,
        "killed only {killed} connections (ours and the client's, twice)"
    );
    let mut conn = raw(&url).await;
    assert_eq!(
        get(&mut conn, &key).await.as_deref(),
        Some(guard.token()),
        "the key lost its token {:?} after the kills (lease 1 s)",
        started.elapsed()
    );
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 0 && ttl <= 1000, "pttl {ttl}");
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock after the reconnect");
    assert!(!exists(&mut conn, &key).await);
}

// ---------------------------------------------------------------- extend
