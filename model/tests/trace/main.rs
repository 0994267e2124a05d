//! Trace validation: the model's step functions and the real `.lua`
//! scripts agree.
//!
//! A seeded generator ([`draw`]) draws a few hundred random sequences of
//! actions on one lock name each (Mutex, Election, FairMutex, RwLock or
//! Semaphore; two or three clients with one or two tasks each; acquire,
//! release, extend (alone or in a batch of two), pass, re-sent attempts,
//! stale tokens, subscriptions dropped and restored, and
//! real sleeps against leases of 30-200 ms so that leases, reservations,
//! claims and queue entries expire). Each action runs through the real
//! script on the server at `REDIS_URL` ([`wire`]: the sources as the
//! registry assembles them, the KEYS and ARGV as `layout.rs` passes them)
//! and through the model's step function at the server's time
//! ([`replay`]); the reply, every key read back and every message
//! published must agree. A mismatch fails the test with the seed, the
//! sequence, the step, the model's prediction and the server's reply.
//! A second test switches the model back to old script behaviours (its
//! `Bugs`) and requires a mismatch: the check can fail.
//!
//! `TRACE_SEED` replays a seed (timing differs from run to run, so the
//! sequences drawn after the first sleep may too); `TRACE_SEQUENCES` and
//! `TRACE_STEPS` change the size. Run with
//! `REDBELL_TEST_PORT=6412 scripts/with-redis.sh cargo test -p redbell-model --test trace -- --nocapture`.

mod draw;
mod observe;
mod replay;
mod steps;
mod wire;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redbell_model::scripts::Bugs;
use replay::{Outcome, Replay};
use wire::{Names, Scripts};

const THREADS: usize = 8;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counts of one sequence.
#[derive(Default)]
struct Stats {
    steps: usize,
    compared: usize,
    skipped: usize,
    events: BTreeMap<String, usize>,
}

/// One batch of sequences.
struct Run {
    /// Tells this batch's lock names from another's in the same process.
    tag: &'static str,
    seed: u64,
    sequences: usize,
    steps: usize,
    /// The model's historic behaviours switched on (default: today's).
    bugs: Bugs,
}

/// What a batch did.
struct Done {
    stats: Stats,
    sequences: usize,
    failures: Vec<String>,
    secs: f64,
}

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn seed() -> u64 {
    let clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    env_or("TRACE_SEED", clock.as_nanos() as u64 % 1_000_000_007)
}

/// Replays `run`'s sequences, `THREADS` at a time, until one disagrees.
fn replay_all(run: &Run) -> Done {
    let client = redis::Client::open(url().as_str()).expect("REDIS_URL");
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let totals = Mutex::new((Stats::default(), 0usize));
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let mut con = client.get_connection().expect("connect");
                let scripts = Scripts::load(&mut con);
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= run.sequences {
                        break;
                    }
                    match sequence(&client, &scripts, run, i) {
                        Ok(s) => {
                            let mut t = totals.lock().unwrap();
                            t.0.steps += s.steps;
                            t.0.compared += s.compared;
                            t.0.skipped += s.skipped;
                            for (e, n) in s.events {
                                *t.0.events.entry(e).or_default() += n;
                            }
                            t.1 += 1;
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            failures.lock().unwrap().push(e);
                        }
                    }
                }
            });
        }
    });
    let (stats, sequences) = totals.into_inner().unwrap();
    Done {
        stats,
        sequences,
        failures: failures.into_inner().unwrap(),
        secs: started.elapsed().as_secs_f64(),
    }
}

#[test]
fn model_and_scripts_agree() {
    let seed = seed();
    let run = Run {
        tag: "today",
        seed,
        sequences: env_or("TRACE_SEQUENCES", 300),
        steps: env_or("TRACE_STEPS", 40),
        bugs: Bugs::default(),
    };
    println!(
        "trace: seed {seed} (TRACE_SEED={seed} replays it): {} sequences of {} steps on {}",
        run.sequences,
        run.steps,
        url()
    );
    let done = replay_all(&run);
    let t = &done.stats;
    println!(
        "trace: seed {seed}: replayed {} sequences, {} steps ({} script calls compared, {} not: within 2 ms of a deadline) in {:.1} s",
        done.sequences, t.steps, t.compared, t.skipped, done.secs
    );
    for (e, n) in &t.events {
        println!("trace:   {n:6}  {e}");
    }
    assert!(
        done.failures.is_empty(),
        "the model and the scripts disagree:\n{}",
        done.failures.join("\n\n")
    );
    assert_eq!(done.sequences, run.sequences, "every sequence ran");
}

/// The replay has teeth: the model switched back to an old script's
/// behaviour disagrees with today's scripts within a few sequences.
#[test]
fn old_script_behaviours_disagree() {
    let seed = seed();
    let old = [
        (
            "frozen_woken_waiter",
            Bugs {
                frozen_woken_waiter: true,
                ..Bugs::default()
            },
        ),
        (
            "resent_acquire_parks",
            Bugs {
                resent_acquire_parks: true,
                ..Bugs::default()
            },
        ),
        (
            "short_extend_tells_mutex_only",
            Bugs {
                short_extend_tells_mutex_only: true,
                ..Bugs::default()
            },
        ),
    ];
    for (tag, bugs) in old {
        let run = Run {
            tag,
            seed,
            sequences: 200,
            steps: 40,
            bugs,
        };
        let done = replay_all(&run);
        let first = done.failures.first().unwrap_or_else(|| {
            panic!(
                "seed {seed}: with the model's {tag} on, {} sequences of today's scripts agreed with it",
                done.sequences
            )
        });
        let summary: Vec<&str> = first
            .lines()
            .filter(|l| !l.starts_with("model state"))
            .take(6)
            .collect();
        println!(
            "trace: {tag}: caught after {} sequences in {:.1} s:\n  {}",
            done.sequences,
            done.secs,
            summary.join("\n  ")
        );
    }
}

/// Runs sequence `index` of `seed` on a lock name of its own.
fn sequence(
    client: &redis::Client,
    scripts: &Scripts,
    run: &Run,
    index: usize,
) -> Result<Stats, String> {
    let (seed, steps) = (run.seed, run.steps);
    let own = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index as u64;
    let (mut draw, consts) = draw::Gen::new(own);
    let names = Names::new(&format!(
        "trace-{}-{}-{seed}-{index}",
        std::process::id(),
        run.tag
    ));
    let mut con = client.get_connection().expect("connect");
    let mut conns: Vec<redis::Connection> = (0..draw.clients)
        .map(|_| client.get_connection().expect("connect"))
        .collect();
    let subs = conns.iter_mut().map(|c| c.as_pubsub()).collect();
    let mut cleanup = client.get_connection().expect("connect");
    let fence_ahead = draw.fence_ahead();
    let mut replay = Replay::new(&mut con, subs, scripts, names.clone(), draw.kind, consts);
    replay.model.bugs = run.bugs;
    if fence_ahead {
        let ahead = 4_000_000_000_000_000u64 + index as u64;
        let _: () = redis::cmd("SET")
            .arg(&names.fence)
            .arg(ahead)
            .query(&mut cleanup)
            .expect("SET");
        replay.model.fence = ahead;
    }
    let mut stats = Stats::default();
    let mut log: Vec<String> = Vec::new();
    for k in 0..steps {
        let (act, task) = draw.next(&replay.model);
        log.push(format!("{k}: {act:?}"));
        stats.steps += 1;
        match replay.step(act) {
            Ok(Outcome::Skipped) => stats.skipped += 1,
            Ok(outcome) => {
                if !matches!(
                    act,
                    replay::Act::Sleep(_) | replay::Act::Subscribe(_) | replay::Act::Unsubscribe(_)
                ) {
                    stats.compared += 1;
                }
                draw.learn(act, task, outcome, &replay.last);
            }
            Err(replay::Mismatch(m)) => {
                let start = log.len().saturating_sub(12);
                return Err(format!(
                    "seed {seed} sequence {index} ({:?}, {consts:?}) step {k}: {act:?}\n{m}\nthe sequence's last steps:\n  {}",
                    draw.kind,
                    log[start..].join("\n  ")
                ));
            }
        }
    }
    stats.events = std::mem::take(&mut replay.events);
    drop(replay);
    let _: () = redis::cmd("DEL")
        .arg(&names.keys()[..])
        .query(&mut cleanup)
        .expect("DEL");
    Ok(stats)
}
