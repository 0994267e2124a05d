//! Late and duplicated FairMutex grants, for real: every grant the server
//! publishes for the lock is published again on the same channel 0-400 ms
//! later (an echo, once or twice), while ten waiters of five clients
//! contend, some cancelled (their `lock()` dropped at a random point), some
//! timing out, some unlocking and some dropping their guards, and the
//! clients' connections are killed now and then. An echo reaches its
//! client when the waiter it names still waits, holds the lock, has let it
//! go, or left without it: the client passes on a grant to a waiter it no
//! longer has unless that acquisition is still held (PROTOCOL.md, duty 9).
//!
//! Inside each hold: nobody else is inside (an occupancy key taken with
//! `SET NX`), and the lock key holds the holder's token (no pass-on
//! released it). Afterwards a new client gets the lock at once (nothing
//! stuck). A replay: `ECHO_SEED=<seed>`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redbell_integration_tests::{
    PROMPT, client, client_ids, client_list, lock_key, raw, redis_url, unique, wake_channel,
};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep, timeout};

/// How long the waiters contend.
const RUN: Duration = Duration::from_secs(6);

/// A small generator per task (xorshift), from the run's seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    fn ms(&mut self, n: u64) -> Duration {
        Duration::from_millis(self.below(n))
    }
}

/// Publishes every grant on the lock's wake channels again, `echoes`
/// counting them.
async fn echo(
    url: &str,
    name: &str,
    seed: u64,
    echoes: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let mut pubsub = redis::Client::open(url)
        .expect("a client")
        .get_async_pubsub()
        .await
        .expect("a pub/sub connection");
    pubsub
        .psubscribe(wake_channel(name, "*"))
        .await
        .expect("PSUBSCRIBE");
    let publisher = raw(url).await;
    tokio::spawn(async move {
        let mut rng = Rng::new(seed ^ 0xEC40);
        let mut stream = pubsub.on_message();
        // Each grant once: the echoes come back here too.
        let mut seen = HashSet::new();
        while let Some(m) = stream.next().await {
            let payload: String = m.get_payload().unwrap_or_default();
            if !payload.contains(":g") || !seen.insert(payload.clone()) {
                continue;
            }
            let channel = m.get_channel_name().to_owned();
            for _ in 0..=rng.below(2) {
                let (delay, mut publisher) = (rng.ms(400), publisher.clone());
                let (channel, payload, echoes) = (channel.clone(), payload.clone(), echoes.clone());
                tokio::spawn(async move {
                    sleep(delay).await;
                    let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                        .arg(&channel)
                        .arg(&payload)
                        .query_async(&mut publisher)
                        .await;
                    echoes.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
    })
}

/// Checks one hold from inside: returns what went wrong, if anything.
async fn inside(
    data: &mut MultiplexedConnection,
    name: &str,
    occupancy: &str,
    g: &redbell::MutexGuard,
    pause: Duration,
) -> Option<String> {
    let (other, key): (Option<String>, Option<String>) = redis::pipe()
        .cmd("SET")
        .arg(occupancy)
        .arg(g.token())
        .arg("NX")
        .arg("GET")
        .arg("PX")
        .arg(60_000)
        .get(lock_key(name))
        .query_async(data)
        .await
        .expect("the occupancy check");
    sleep(pause).await;
    let _: i64 = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    )
    .key(occupancy)
    .arg(g.token())
    .invoke_async(data)
    .await
    .expect("leave the occupancy key");
    if g.is_lost() {
        return None; // its lease ran out: no longer protected, nor claimed to be
    }
    match (other, key) {
        (Some(other), _) => Some(format!(
            "{} (fence {}) got in while {other} was inside",
            g.token(),
            g.fence()
        )),
        (None, key) if key.as_deref() != Some(g.token()) => Some(format!(
            "{} (fence {}) inside while the lock key holds {key:?}",
            g.token(),
            g.fence()
        )),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echoed_grants_never_release_a_lock_in_use() {
    let url = redis_url();
    let name = unique("fair-echo");
    let occupancy = format!("redbell-test:{{{name}}}:inside");
    let seed = std::env::var("ECHO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    eprintln!("ECHO_SEED={seed}");
    let echoes = Arc::new(AtomicUsize::new(0));
    let echo = echo(&url, &name, seed, echoes.clone()).await;
    let mut admin = raw(&url).await;
    let data = raw(&url).await;
    // Every connection opened from here on may be killed.
    let spared = client_ids(&client_list(&mut admin).await);
    let end = Instant::now() + RUN;
    let problems = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (held, cancelled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for c in 0..5u64 {
        let cl = client(&url).await;
        for t in 0..2u64 {
            let fair = cl.fair_mutex(&name);
            let (name, occupancy, mut data) = (name.clone(), occupancy.clone(), data.clone());
            let (problems, held, cancelled) = (problems.clone(), held.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new(seed ^ (c * 16 + t + 1));
                while Instant::now() < end {
                    let g = match rng.below(4) {
                        0 => match timeout(rng.ms(150), fair.lock()).await {
                            Ok(g) => g.ok(),
                            Err(_) => {
                                cancelled.fetch_add(1, Ordering::Relaxed);
                                None
                            }
                        },
                        1 => fair
                            .lock_timeout(Duration::from_millis(1) + rng.ms(150))
                            .await
                            .ok(),
                        _ => timeout(Duration::from_secs(20), fair.lock())
                            .await
                            .expect("a lock() waited 20 s")
                            .ok(),
                    };
                    let Some(g) = g else { continue };
                    held.fetch_add(1, Ordering::Relaxed);
                    if let Some(p) = inside(&mut data, &name, &occupancy, &g, rng.ms(30)).await {
                        eprintln!("{p}");
                        problems.lock().unwrap().push(p);
                    }
                    if rng.below(2) == 0 {
                        let _ = g.unlock().await;
                    } else {
                        drop(g); // released in the background
                    }
                }
            }));
        }
    }
    let killer = tokio::spawn(async move {
        let mut rng = Rng::new(seed ^ 0x4B11);
        let mut kills = 0;
        while Instant::now() < end {
            sleep(Duration::from_millis(150) + rng.ms(300)).await;
            let ids: Vec<u64> = client_ids(&client_list(&mut admin).await)
                .difference(&spared)
                .copied()
                .collect();
            if let Some(id) = (!ids.is_empty()).then(|| ids[rng.below(ids.len() as u64) as usize]) {
                let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut admin)
                    .await;
                kills += 1;
            }
        }
        kills
    });
    for t in tasks {
        timeout(Duration::from_secs(60), t)
            .await
            .expect("a waiter hung")
            .expect("a waiter panicked");
    }
    let kills = killer.await.expect("the killer");
    echo.abort();
    eprintln!(
        "held {}, cancelled {}, echoes {}, connections killed {kills}",
        held.load(Ordering::Relaxed),
        cancelled.load(Ordering::Relaxed),
        echoes.load(Ordering::Relaxed),
    );
    let problems = problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    // Nothing stuck: the lock is free, or soon (a claim, a lease's renewal).
    let last = client(&url).await;
    timeout(PROMPT, last.fair_mutex(&name).lock())
        .await
        .expect("the lock is stuck after the run")
        .expect("the lock after the run")
        .unlock()
        .await
        .expect("the unlock after the run");
}
