//! `make model`: checks each kind deeper than `cargo test` does, and
//! prints the bound, the states explored and the properties that held
//! (exit status 1 if one broke).
//!
//! Usage: `redbell-model [HORIZON_TICKS] [MAX_FAULTS] [mutex|fair|rwlock|semaphore] [TASKS]`
//! (defaults: the kind's horizon, past its stall bound; 1 fault; every
//! kind; TASKS, the tasks of each client: `2,2,2`). With `MODEL_PROGRESS`
//! set, the states explored so far are printed every 30 s.

use redbell_model::client::Kind;
use redbell_model::{check_deep, presets};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let horizon: Option<u64> = args.get(1).and_then(|a| a.parse().ok());
    let faults = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let kinds: Vec<Kind> = match args.get(3).map(String::as_str) {
        Some("mutex") => vec![Kind::Mutex],
        Some("fair") => vec![Kind::Fair],
        Some("rwlock") => vec![Kind::RwLock],
        Some("semaphore") => vec![Kind::Semaphore],
        _ => vec![Kind::Mutex, Kind::Fair, Kind::RwLock, Kind::Semaphore],
    };
    let given: Option<Vec<u8>> = args
        .get(4)
        .map(|t| t.split(',').filter_map(|n| n.parse().ok()).collect());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut failed = false;
    for kind in kinds {
        // Each horizon is past the kind's stall bound, so a lost wake-up
        // can show.
        // (The Mutex's is a window per other client: 4 ticks for 3.)
        let h = horizon.unwrap_or(match kind {
            Kind::RwLock => 3,
            Kind::Fair | Kind::Semaphore => 4,
            Kind::Mutex => 5,
        });
        let tasks = given.clone().unwrap_or_else(|| vec![2, 2, 2]);
        let cfg = presets::config(kind, &tasks, h, faults);
        println!(
            "== {kind:?}: bound: {} clients with tasks {tasks:?}; horizon {h} ticks of {} ms; \
             at most {faults} fault(s) of {:?}; lease {} ms, handoff {} ms, claim {} ms, \
             grace {} ms, intent window {} ms, {} permits reserved {} ms; stall bound {} ticks",
            tasks.len(),
            cfg.tick_ms,
            cfg.faults,
            cfg.lease_ms,
            cfg.handoff_ms,
            cfg.claim_ms,
            cfg.grace_ms,
            cfg.window_ms,
            cfg.permits,
            cfg.reserve_ms,
            cfg.stall_bound
        );
        let out = check_deep(cfg, threads);
        println!(
            "   {} states explored, depth {}, {:.1} s",
            out.states,
            out.depth,
            out.elapsed.as_secs_f64()
        );
        for p in &out.properties {
            match out.found(p) {
                None => println!("   held: {p}"),
                Some(trace) => {
                    failed = true;
                    println!("   BROKEN: {p}\n{trace}");
                }
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
