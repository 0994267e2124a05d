//! `make model`: checks every kind's instance deeper than `cargo test`
//! does, and prints states explored and the properties that held.
//!
//! Usage: `redbell-model [HORIZON_TICKS] [MAX_FAULTS] [KIND]`.

use redbell_model::client::Kind;
use redbell_model::{check, presets};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let horizon = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let faults = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let kinds: Vec<Kind> = match args.get(3).map(String::as_str) {
        Some("mutex") => vec![Kind::Mutex],
        Some("fair") => vec![Kind::Fair],
        Some("rwlock") => vec![Kind::RwLock],
        _ => vec![Kind::Mutex, Kind::Fair, Kind::RwLock],
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut failed = false;
    for kind in kinds {
        let cfg = presets::config(kind, &[2, 2, 2], horizon, faults);
        println!(
            "== {kind:?}: 3 clients x 2 tasks, horizon {horizon} ticks of {} ms, lease {} ms, \
             at most {faults} faults, stall bound {} ticks",
            cfg.tick_ms, cfg.lease_ms, cfg.stall_bound
        );
        let out = check(cfg, threads);
        println!(
            "   {} states, depth {}, {:.1} s",
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
