//! The expectations against what this run measured. The bench
//! reports; it never fails on a number (machines differ, CI is noisy).

use std::fmt::Write;

use super::contend::Outcome;
use super::results::{Results, fmt_us};

fn mark(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn find<'a>(list: &'a [Outcome], strategy: &str, workers: u32) -> Option<&'a Outcome> {
    list.iter()
        .find(|o| o.strategy == strategy && o.workers == workers)
}

/// The expectation list, as markdown.
pub fn expectations(r: &Results) -> String {
    let mut s = String::from("\n## Expectations (reported, not asserted)\n\n");
    let ping = r.floor.ping_us.p50.unwrap_or(1).max(1) as f64;

    // 1. Hand-off gap p50 within 4x PING p50.
    for o in r.handoff.iter().filter(|o| o.strategy == "redbell") {
        if let Some(gap) = o.gap_us.p50 {
            let x = gap as f64 / ping;
            let _ = writeln!(
                s,
                "- Hand-off gap p50 within 4× PING p50, W={}: {} = {x:.1}× — {}",
                o.workers,
                fmt_us(gap),
                mark(x <= 4.0)
            );
        }
    }

    // 2. Round trips per hand-off at most 3, flat from 1 to 1,000 waiters.
    let rb: Vec<(u32, f64, f64)> = r
        .scaling
        .iter()
        .filter(|o| o.strategy == "redbell")
        .filter_map(|o| {
            let c = o.commands.as_ref()?;
            Some((
                o.workers - 1,
                c.per_handoff(c.round_trips)?,
                c.per_handoff(c.all)?,
            ))
        })
        .collect();
    if !rb.is_empty() {
        let max = rb.iter().map(|v| v.1).fold(0.0, f64::max);
        let min = rb.iter().map(|v| v.1).fold(f64::MAX, f64::min);
        let list: Vec<String> = rb
            .iter()
            .map(|(w, rt, all)| format!("{w}: {rt:.2} ({all:.1} incl. in-script)"))
            .collect();
        let _ = writeln!(
            s,
            "- Round trips per hand-off ≤ 3 and flat over waiters [{}] — ≤ 3 (to 2 decimals, +0.05 for stray retries): {}; flat (max/min {:.2} ≤ 1.25): {}",
            list.join(", "),
            mark(max <= 3.05),
            max / min,
            mark(max / min <= 1.25)
        );
    }
    let missing: Vec<u32> = r
        .scaling
        .iter()
        .filter(|o| o.strategy == "redbell" && o.commands.is_none())
        .map(|o| o.workers - 1)
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "- (command counts missing for waiters {missing:?}: the run was too short to catch the window)"
        );
    }

    // 3. Uncontended: redbell against rslock, same workload, same run:
    //    ops/s around the critical section (a lock around work), Redis
    //    CPU per lock+unlock from the loop with nothing in between.
    let row = |u: &super::floor::Uncontended, name: &str| {
        u.rows.iter().find(|x| x.strategy == name).cloned()
    };
    if let (Some(wb), Some(ws), Some(rb), Some(rs)) = (
        row(&r.uncontended_work, "redbell"),
        row(&r.uncontended_work, "rslock"),
        row(&r.uncontended, "redbell"),
        row(&r.uncontended, "rslock"),
    ) {
        let ops = wb.ops_per_s / ws.ops_per_s.max(1e-9);
        let bare = rb.ops_per_s / rs.ops_per_s.max(1e-9);
        let cpu = rb.cpu_us_per_op / rs.cpu_us_per_op.max(1e-9);
        let _ = writeln!(
            s,
            "- Uncontended, {} workers: redbell ops/s ≥ 1.0× rslock's around the critical section: {:.0} vs {:.0} = {ops:.2}× — {} (lock+unlock alone, Redis-bound: {bare:.2}×); Redis CPU per lock+unlock ≤ 1.3× rslock's: {:.1} vs {:.1} µs = {cpu:.2}× — {} ({:.1} vs {:.1} commands)",
            r.uncontended.workers,
            wb.ops_per_s,
            ws.ops_per_s,
            mark(ops >= 1.0),
            rb.cpu_us_per_op,
            rs.cpu_us_per_op,
            mark(cpu <= 1.3),
            rb.commands_per_op,
            rs.commands_per_op,
        );
    }

    // 4. Hand-off, plain and fair, against the serial floor, in commands,
    //    and in the wait a user feels; beside rslock and the poll recipe
    //    only by hand-offs to *another* worker (their releaser mostly
    //    re-takes its own lock).
    let all = |o: &Outcome| o.commands.as_ref().and_then(|c| c.per_handoff(c.all));
    for w in [8, 32] {
        for (label, budget) in [("redbell", 12.0), ("redbell fair", 14.0)] {
            let Some(o) = find(&r.handoff, label, w) else {
                continue;
            };
            let floor = r.of_floor(o.handoffs_per_s).unwrap_or(0.0);
            let _ = writeln!(
                s,
                "- W={w} {label}: hand-offs/s ≥ 0.6× the serial floor: {:.0}/s = {floor:.2}× — {}; commands per hand-off ≤ {budget:.0} (+0.05 for stray retries, as above): {} — {}",
                o.handoffs_per_s,
                mark(floor >= 0.6),
                all(o).map_or("–".to_owned(), |v| format!("{v:.2}")),
                mark(all(o).is_some_and(|v| v <= budget + 0.05)),
            );
        }
        if let (Some(fair), Some(plain)) = (
            find(&r.handoff, "redbell fair", w),
            find(&r.handoff, "redbell", w),
        ) && let (Some(a), Some(b)) = (fair.wait_us.p99, plain.wait_us.p99)
        {
            let _ = writeln!(
                s,
                "- W={w} fair acquire wait p99 ≤ plain's: {} vs {} ({:.2}×) — {}",
                fmt_us(a),
                fmt_us(b),
                a as f64 / b.max(1) as f64,
                mark(a <= b)
            );
        }
    }
    if let Some(ev) = find(&r.handoff, "redbell", 8) {
        for other in ["rslock", "poll 10ms", "poll 100ms"] {
            let Some(o) = find(&r.handoff, other, 8) else {
                continue;
            };
            let _ = writeln!(
                s,
                "- W=8 hand-offs/s to another worker ≥ {other}'s: {:.0}/s vs {:.0}/s ({:.0}% vs {:.0}% of their hand-offs) — {}",
                ev.handovers_per_s,
                o.handovers_per_s,
                ev.handover_share * 100.0,
                o.handover_share * 100.0,
                mark(ev.handovers_per_s >= o.handovers_per_s)
            );
            // What a waiter behind another worker feels: the waits of the
            // acquisitions that took the lock from another worker (a
            // polling releaser's own re-takes, most of its acquisitions,
            // wait for nobody and would flatter it).
            if let (Some(a), Some(b)) = (ev.handover_wait_us.p99, o.handover_wait_us.p99) {
                let _ = writeln!(
                    s,
                    "- W=8 lock() wait p99 when the lock came from another worker lower than {other}'s: {} vs {} ({} vs {} such acquisitions; max {} vs {}) — {}",
                    fmt_us(a),
                    fmt_us(b),
                    ev.handover_waits.len(),
                    o.handover_waits.len(),
                    fmt_us(ev.handover_wait_max_us),
                    fmt_us(o.handover_wait_max_us),
                    mark(a <= b)
                );
            }
        }
        let fair = 1.0 / 8.0;
        let _ = writeln!(
            s,
            "- W=8 fair shares: busiest worker took {:.1}% (fair {:.1}%; rslock {}, poll 10ms {}, poll 100ms {}) — {} (≤ 1.5× fair)",
            ev.busiest_share * 100.0,
            fair * 100.0,
            share(find(&r.handoff, "rslock", 8)),
            share(find(&r.handoff, "poll 10ms", 8)),
            share(find(&r.handoff, "poll 100ms", 8)),
            mark(ev.busiest_share <= 1.5 * fair)
        );
    }
    if let Some(fair) = find(&r.handoff, "redbell fair", 8) {
        let _ = writeln!(
            s,
            "- W=8 fair lock hand-off ratio (to another worker) ≥ 0.9: {:.2} (busiest worker {:.1}%, fair 12.5%) — {}",
            fair.handover_share,
            fair.busiest_share * 100.0,
            mark(fair.handover_share >= 0.9)
        );
    }

    // The cluster rows against the same mutex on one server, reported.
    for c in r.handoff.iter().filter(|o| o.strategy == "redbell cluster") {
        let Some(one) = find(&r.handoff, "redbell", c.workers) else {
            continue;
        };
        let rt = |o: &Outcome| {
            o.commands
                .as_ref()
                .and_then(|m| m.per_handoff(m.round_trips))
                .map_or("–".to_owned(), |v| format!("{v:.2}"))
        };
        let p50 = |o: &Outcome| o.gap_us.p50.map_or("–".to_owned(), fmt_us);
        let _ = writeln!(
            s,
            "- W={} redbell cluster against redbell on one server, reported: {:.0}/s vs {:.0}/s ({:.2}×); gap p50 {} vs {}; round trips / hand-off {} vs {}",
            c.workers,
            c.handoffs_per_s,
            one.handoffs_per_s,
            c.handoffs_per_s / one.handoffs_per_s.max(1e-9),
            p50(c),
            p50(one),
            rt(c),
            rt(one),
        );
    }

    // 5. Crash takeover within 10 ms of lease expiry.
    let redbell = r.takeover.iter().find(|t| t.strategy == "redbell");
    if let Some((t, p50)) = redbell.and_then(|t| Some((t, t.takeover_us.p50?))) {
        let _ = writeln!(
            s,
            "- Crash takeover p50 within 10 ms of lease expiry: {} over {} runs — {}",
            fmt_us(p50),
            t.runs,
            mark(p50 <= 10_000)
        );
    }
    s
}

fn share(o: Option<&Outcome>) -> String {
    o.map_or("–".to_owned(), |o| {
        format!("{:.1}%", o.busiest_share * 100.0)
    })
}
