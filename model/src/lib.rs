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
#![forbid(unsafe_code)]

pub mod client;
pub mod model;
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
    /// intent window 200 ms; a shortening extend asks 100 ms. The stall
    /// bound is the kind's window in ticks: 2 (2 x handoff) for the Mutex,
    /// 3 (claim + 100 ms) for the FairMutex, 2 (the intent window) for the
    /// RwLock.
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
            short_ms: 100,
            max_faults,
            faults: Faults::USUAL,
            stall_bound: match kind {
                Kind::Mutex => 2,
                Kind::Fair => 3,
                Kind::RwLock => 2,
            },
            bugs: Bugs::default(),
        }
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

/// Runs the breadth-first checker on `cfg` with `threads` threads.
pub fn check(cfg: Config, threads: usize) -> Outcome {
    let start = Instant::now();
    let model = WaitModel { cfg };
    let all = model.properties();
    let props: Vec<&'static str> = all.iter().map(|p| p.name).collect();
    let checker = model.clone().checker().threads(threads).spawn_bfs().join();
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
                text.push_str(&format!(
                    "    t={} lock={:?} queue={:?} fair={:?} tasks={:?}\n",
                    state.now,
                    state.server.lock_at(state.now),
                    state.server.waiters,
                    state.server.fair.queue,
                    state
                        .clients
                        .iter()
                        .map(|c| (c.liveness, c.tasks.iter().map(|t| t.phase).collect::<Vec<_>>()))
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
