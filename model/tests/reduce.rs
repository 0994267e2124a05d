//! The reductions (reduce.rs) keep every verdict: on small instances, with
//! each historic bug switched on and with none, the checker finds the same
//! broken properties with them and without.

use redbell_model::client::{Config, Faults, Kind};
use redbell_model::scripts::Bugs;
use redbell_model::{check, presets};

fn verdicts(mut cfg: Config, reduce: bool) -> (Vec<&'static str>, usize) {
    cfg.reduce = reduce;
    let out = check(cfg, 2);
    let mut broken: Vec<&'static str> = out.counterexamples.iter().map(|(p, _)| *p).collect();
    broken.sort_unstable();
    (broken, out.states)
}

fn same(name: &str, cfg: Config) {
    let (full, full_states) = verdicts(cfg.clone(), false);
    let (reduced, reduced_states) = verdicts(cfg, true);
    println!("{name}: broken {full:?}; {full_states} states, {reduced_states} reduced");
    assert_eq!(full, reduced, "{name}: the reductions changed the verdicts");
    assert!(reduced_states < full_states, "{name}: nothing was reduced");
}

fn with(kind: Kind, tasks: &[u8], horizon: u64, faults: Faults, bugs: Bugs) -> Config {
    let mut cfg = presets::config(kind, tasks, horizon, 1);
    cfg.faults = faults;
    cfg.bugs = bugs;
    cfg
}

#[test]
fn every_kind_with_the_usual_faults() {
    for (kind, tasks, horizon) in [
        (Kind::Mutex, &[2u8, 1][..], 5),
        (Kind::Fair, &[2, 1], 4),
        (Kind::RwLock, &[2, 1], 3),
        (Kind::Semaphore, &[1, 1, 1], 4),
    ] {
        let cfg = with(kind, tasks, horizon, Faults::USUAL, Bugs::default());
        same(&format!("{kind:?} {tasks:?}"), cfg);
    }
}

/// Each history test's instance (history.rs), its bug on and off.
#[test]
fn every_historic_bug() {
    let all = Faults {
        short_extend: true,
        ..Faults::USUAL
    };
    let only = |f: fn(&mut Faults)| {
        let mut faults = Faults::NONE;
        f(&mut faults);
        faults
    };
    type Case = (&'static str, Kind, &'static [u8], fn(&mut Bugs));
    let cases: [Case; 5] = [
        ("(a)", Kind::Mutex, &[2, 1], |b| {
            b.frozen_woken_waiter = true
        }),
        ("(b)", Kind::Mutex, &[1, 1], |b| {
            b.cancelled_shortening_extend = true
        }),
        ("(c)", Kind::Mutex, &[1, 1], |b| {
            b.resent_acquire_parks = true
        }),
        ("(e)", Kind::Fair, &[1, 1, 1], |b| {
            b.fair_guard_on_grant = true
        }),
        ("(d)", Kind::Mutex, &[3, 2], |b| {
            b.pool_queues_every_task = true
        }),
    ];
    for (name, kind, tasks, bug) in cases {
        // (d)'s instance is large: freezes only, as in history.rs.
        let faults = if name == "(d)" {
            only(|f| f.freeze = true)
        } else {
            all
        };
        for on in [true, false] {
            let mut b = Bugs::default();
            if on {
                bug(&mut b);
            }
            same(&format!("{name} {on}"), with(kind, tasks, 5, faults, b));
        }
    }
    // (f): a lease of 600 ms, shortening extends only.
    for on in [true, false] {
        let mut cfg = presets::config(Kind::Fair, &[1, 1], 8, 1);
        cfg.lease_ms = 600;
        cfg.faults = only(|f| f.short_extend = true);
        cfg.bugs.short_extend_tells_mutex_only = on;
        same(&format!("(f) {on}"), cfg);
    }
    // (g): three freezes of the first three clients.
    for on in [true, false] {
        let bugs = Bugs {
            two_standbys: on,
            ..Bugs::default()
        };
        same(&format!("(g) {on}"), presets::frozen_heads(bugs, true));
    }
}
