//! A model of redbell's wait protocol, checked exhaustively for small
//! instances with [stateright](https://docs.rs/stateright).
//!
//! - [`scripts`]: the server, one pure step function per Lua script (the
//!   API trace validation replays against the real scripts).
//! - [`client`]: the clients' behaviour: tasks, one queue place per client,
//!   messages, faults.
//! - [`model`]: the stateright model, its scheduling and its properties.
//!
//! [`presets`] gives the instances `cargo test` and `make model` check;
//! [`check`] runs the checker and reports what it found.
//!
//! # What is modelled, and how
//!
//! One server runs each script atomically on one lock name's keys; time is
//! the server's, in ticks of 100 ms (leases 400 ms, hand-off reservation
//! 100 ms, grace 100 ms, fair claim 200 ms, RwLock intent window 200 ms,
//! Semaphore of 2 permits reserved 100 ms: scaled so a lease is several
//! ticks and every window a tick or two). Clients have several tasks that
//! each acquire once, with one queue place per client; they read their
//! pub/sub messages in order, within a tick; a frozen client takes no step
//! again but still counts as a PUBLISH receiver; a dead one receives
//! nothing; a waiting task may be cancelled; an attempt's reply may be lost
//! and the call re-sent; a holder may shorten its lease (any kind: the
//! Mutex's or FairMutex's extend, an RwLock writer's or reader's, a
//! permit's), its future dropped or not. The Election is the Mutex
//! (acquire.lua under the letter `l`), so it is covered by the Mutex's
//! instance.
//!
//! Left out: the subscription's own life (every live client is subscribed
//! from the start; the hub's resubscribe-and-wake-all is not modelled),
//! the normal lease renewal (a hold lasts at most its lease), the unpolled
//! queuer's backup (every live task is polled), failover, kind and type
//! errors, the WAIT lane, and clock rates (client and server clocks agree).
//! Symmetry reduction is not used: clients are not interchangeable, as the
//! queues break ties of equal scores by member, so by client id. Three
//! rules cut the interleavings without losing runs: a client's tasks ask
//! in age order (WLOG, since they are alike); a client is only frozen or
//! killed while it waits or holds (a stop before it asks is one that never
//! asks); and time passes only once a task has asked (a run whose first
//! step comes k ticks in is, shifted, one that starts at once). Beyond
//! them, [`reduce`] stores each state in a canonical form that forgets
//! what no later step reads (a bisimulation), offers no freeze once time
//! has stopped, and takes a message read that only touches its own client
//! alone (a partial-order reduction); each rule's soundness is argued
//! there, and the history tests find every old bug through them. (Without
//! them the FairMutex and Semaphore at 2+2+2 ran for over 40 minutes.)
//!
//! # Bounds
//!
//! A check is exhaustive up to a horizon of server time (ticks) and a
//! number of faults per run (freeze, death, cancel, lost reply re-sent;
//! the shortening extend is checked on its own). `cargo test -p
//! redbell-model` checks one fault on 2+2+1 tasks for the Mutex (5 ticks),
//! the RwLock (3) and the Semaphore (4), and 2+1+1 for the FairMutex (4),
//! breadth-first. `make model` checks each kind on 3
//! clients of 2 tasks each with one fault, depth-first ([`check_deep`]:
//! the same states in a fraction of the memory), each horizon past the
//! kind's stall bound. Measured with `nice -n 10 make model` on a 2-core
//! machine shared with other builds and a soak (about 7.5 minutes in all):
//!
//! | kind | tasks | horizon | states | time | properties |
//! |---|---|---|---|---|---|
//! | Mutex | 2+2+2 | 5 ticks | 1,531,752 | 3.4 s | all held |
//! | FairMutex | 2+2+2 | 4 ticks | 45,397,763 | 298.5 s | all held |
//! | RwLock | 2+2+2 | 3 ticks | 3,813,173 | 22.4 s | all held |
//! | Semaphore | 2+2+2 | 4 ticks | 19,650,405 | 128.8 s | all held |
//!
//! Before [`reduce`], the Mutex's instance had 13,679,416 states (50.9 s)
//! and runs of the FairMutex's and Semaphore's were stopped after 64 min
//! (over 286 million states) and 41 min (over 177 million).
#![forbid(unsafe_code)]

pub mod client;
pub mod model;
pub mod reduce;
pub mod scripts;

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

use crate::client::{Config, Faults, Kind};
use crate::model::WaitModel;
use crate::scripts::Bugs;

/// The instances checked.
pub mod presets {
    use super::*;

    /// An instance of `kind` with `tasks` per client, every usual fault allowed
    /// up to `max_faults`, times in ticks of 100 ms: lease 400 ms,
    /// handoff 100 ms (the reservation), grace 100 ms, claim 200 ms,
    /// intent window 200 ms, 2 permits reserved 100 ms; a shortening
    /// extend asks 100 ms. The stall bound is the kind's window in ticks: 2
    /// (2 x handoff) per other client for the Mutex (the n-th standby waits
    /// n windows), 3 (claim + 100 ms) for the FairMutex, 2
    /// (the intent window) for the RwLock, 3 (2 x reserve, and a
    /// reservation) for the Semaphore.
    pub fn config(kind: Kind, tasks: &[u8], horizon_ticks: u64, max_faults: u8) -> Config {
        Config {
            kind,
            tasks: tasks.to_vec(),
            tick_ms: 100,
            horizon_ticks,
            lease_ms: 400,
            handoff_ms: 100,
            grace_ms: 100,
            claim_ms: 200,
            window_ms: 200,
            permits: 2,
            reserve_ms: 100,
            short_ms: 100,
            max_faults,
            faults: Faults::USUAL,
            stall_bound: match kind {
                // The n-th standby parks n windows: behind the others'
                // clients, all frozen or dead, a live one waits its rank's.
                Kind::Mutex => 2 * (tasks.len() as u8).saturating_sub(1).max(1),
                Kind::Fair => 3,
                Kind::RwLock => 2,
                Kind::Semaphore => 3,
            },
            bugs: Bugs::default(),
            steady: None,
            ask_first: false,
            reduce: true,
        }
    }

    /// The history's frozen-head instance, cases (g) and (h): a Mutex with
    /// 4 clients of tasks [1, 1, 1, 2], a 1 s lease (longer than the stall
    /// bound of 6 ticks, three standby windows), only freezes (three, of
    /// the first three clients; the fourth never faults). With
    /// `ask_first`, every task asks before the first release.
    pub fn frozen_heads(bugs: Bugs, ask_first: bool) -> Config {
        let mut cfg = config(Kind::Mutex, &[1, 1, 1, 2], 8, 3);
        cfg.lease_ms = 1000;
        cfg.faults = Faults::NONE;
        cfg.faults.freeze = true;
        cfg.stall_bound = 6;
        cfg.steady = Some(3);
        cfg.ask_first = ask_first;
        cfg.bugs = bugs;
        cfg
    }
}

/// What one check found.
#[derive(Debug)]
pub struct Outcome {
    /// Distinct states explored.
    pub states: usize,
    /// Longest path explored.
    pub depth: usize,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// Each property broken (`always`) or never met (`sometimes`), with
    /// the path that shows it, one step per line.
    pub counterexamples: Vec<(&'static str, String)>,
    /// Properties checked.
    pub properties: Vec<&'static str>,
}

impl Outcome {
    /// The counterexample of `property`, if one was found.
    pub fn found(&self, property: &str) -> Option<&str> {
        self.counterexamples
            .iter()
            .find(|(p, _)| *p == property)
            .map(|(_, t)| t.as_str())
    }
}

/// Runs the breadth-first checker on `cfg` with `threads` threads (its
/// counterexamples are shortest paths).
pub fn check(cfg: Config, threads: usize) -> Outcome {
    run(cfg, threads, false)
}

/// Runs the depth-first checker on `cfg`: the same states and verdicts as
/// [`check`], in a fraction of its memory (it keeps one path, not the
/// frontier), with counterexamples that need not be shortest.
pub fn check_deep(cfg: Config, threads: usize) -> Outcome {
    run(cfg, threads, true)
}

/// Joins `checker`; with `MODEL_PROGRESS` set, prints the states explored
/// so far every 30 s meanwhile (on standard error).
fn wait<C: Checker<WaitModel>>(checker: C, start: Instant) -> C {
    if std::env::var_os("MODEL_PROGRESS").is_some() {
        while !checker.is_done() {
            std::thread::sleep(Duration::from_millis(200));
            let secs = start.elapsed().as_secs();
            if secs > 0 && secs.is_multiple_of(30) {
                eprintln!(
                    "   .. {} states after {secs} s",
                    checker.unique_state_count()
                );
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    checker.join()
}

fn run(cfg: Config, threads: usize, dfs: bool) -> Outcome {
    let start = Instant::now();
    let model = WaitModel { cfg };
    let all = model.properties();
    let props: Vec<&'static str> = all.iter().map(|p| p.name).collect();
    let builder = model.clone().checker().threads(threads);
    let checker: Box<dyn Checker<WaitModel>> = if dfs {
        Box::new(wait(builder.spawn_dfs(), start))
    } else {
        Box::new(wait(builder.spawn_bfs(), start))
    };
    let mut counterexamples = Vec::new();
    for p in &all {
        let name = &p.name;
        let found = checker.discovery(name);
        if !p.expectation.discovery_is_failure() {
            if found.is_none() {
                counterexamples.push((*name, "    never reached\n".to_string()));
            }
            continue;
        }
        if let Some(path) = found {
            let mut text = String::new();
            let mut last = None;
            for (state, action) in path.into_vec() {
                if let Some(a) = last.take() {
                    text.push_str(&format!("  {a:?}\n"));
                }
                let sv = &state.server;
                text.push_str(&format!(
                    "    t={} lock={:?} queue={:?} fair={:?} rw={:?} sem={:?} net={:?} tasks={:?}\n",
                    state.now,
                    sv.lock_at(state.now),
                    sv.waiters,
                    sv.fair.queue,
                    (&sv.rw.readers, &sv.rw.intents),
                    (&sv.sem.holders, &sv.sem.queue, &sv.sem.expiry),
                    state.net,
                    state
                        .clients
                        .iter()
                        .map(|c| (
                            c.liveness,
                            c.tasks.iter().map(|t| t.phase).collect::<Vec<_>>()
                        ))
                        .collect::<Vec<_>>()
                ));
                last = action;
            }
            counterexamples.push((*name, text));
        }
    }
    Outcome {
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed: start.elapsed(),
        counterexamples,
        properties: props,
    }
}
