//! `make model`: checks each kind (the Mutex on 3 clients x 2 tasks, the
//! others on 3 clients with 4 or 5 tasks), deeper than
//! `cargo test` does, and prints the states explored and the properties
//! that held (exit status 1 if one broke).
//!
//! Usage: `redbell-model [HORIZON_TICKS] [MAX_FAULTS] [mutex|fair|rwlock|semaphore]`
//! (defaults: 4 ticks, 3 for the RwLock; 1 fault; every kind).

use redbell_model::client::Kind;
use redbell_model::{check, check_deep, presets};

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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut failed = false;
    for kind in kinds {
        // Each horizon is past the kind's stall bound, so a lost wake-up
        // can show. The Mutex runs 3 clients x 2 tasks (about 11 million
        // states, 4.5 GB); the others fewer tasks, to stay within a few
        // minutes and the memory of a shared machine.
        let custom: Option<Vec<u8>> = args
            .get(4)
            .map(|t| t.split(',').filter_map(|n| n.parse().ok()).collect());
        let (tasks, h): (&[u8], u64) = match kind {
            Kind::Mutex => (&[2, 2, 2], 4),
            Kind::Fair => (&[2, 1, 1], 4),
            Kind::RwLock => (&[2, 2, 1], 3),
            Kind::Semaphore => (&[2, 2, 1], 4),
        };
        let h = horizon.unwrap_or(h);
        let tasks = custom.as_deref().unwrap_or(tasks);
        let cfg = presets::config(kind, tasks, h, faults);
        println!(
            "== {kind:?}: tasks per client {tasks:?}; horizon {h} ticks of {} ms; lease {} ms, \
             handoff {} ms, claim {} ms, grace {} ms; at most {faults} fault(s) of {:?}; \
             stall bound {} ticks",
            cfg.tick_ms,
            cfg.lease_ms,
            cfg.handoff_ms,
            cfg.claim_ms,
            cfg.grace_ms,
            cfg.faults,
            cfg.stall_bound
        );
        let out = if std::env::var_os("MODEL_BFS").is_some() {
            check(cfg, threads)
        } else {
            check_deep(cfg, threads)
        };
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
