//! The markdown report on stdout: the tables, then every expectation set
//! for the bench against what was measured (`verdict.rs`).

use std::fmt::Write;

use super::contend::Outcome;
use super::lock::Strategy;
use super::results::{Results, fmt_us};

/// Redis CPU per hand-off over the measured window.
fn cpu(o: &Outcome) -> String {
    o.commands
        .as_ref()
        .and_then(|c| c.per_handoff(1).map(|per| c.cpu_us * per))
        .map_or("–".to_owned(), |v| format!("{v:.1} µs"))
}

fn per(o: &Outcome, round_trips: bool) -> String {
    o.commands
        .as_ref()
        .and_then(|c| c.per_handoff(if round_trips { c.round_trips } else { c.all }))
        .map_or("–".to_owned(), |v| format!("{v:.2}"))
}

/// The whole report, as markdown.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# redbell bench{}\n\n{} · {} cores · Redis {} · {} build · hold {} µs per acquisition\n",
        if r.quick {
            " (--quick: smoke test, numbers indicative only)"
        } else {
            ""
        },
        r.date,
        r.cores,
        r.redis_version,
        r.build,
        r.hold_us
    );
    if let Some(c) = &r.cluster {
        let _ = writeln!(
            s,
            "`{}` rows: Redis Cluster {} ({} primaries, {} replicas, Redis {}).\n",
            Strategy::Cluster.label(),
            c.nodes.join(", "),
            c.primaries,
            c.replicas,
            c.redis_version
        );
    }
    let f = &r.floor;
    let _ = writeln!(
        s,
        "## 1. Floor ({} sequential calls on one idle connection)\n",
        f.samples
    );
    let _ = writeln!(s, "| call | p50 | p99 |\n|---|---|---|");
    for (name, p) in [
        ("PING (redis-rs ConnectionManager)", f.ping_us),
        ("acquire script (`try_lock`, free lock)", f.acquire_us),
        ("release script (`unlock`, nobody waiting)", f.release_us),
    ] {
        let _ = writeln!(s, "| {name} | {} | {} |", r.lat(p.p50), r.lat(p.p99));
    }
    let _ = writeln!(
        s,
        "\nLatencies below are also given as multiples of the PING p50 ({} µs).\n",
        r.ping()
    );

    let _ = writeln!(
        s,
        "## 2–3. Hand-off on one lock (W workers, each with its own client, over 2 processes)\n\n\
         What a user feels first: how often the lock reaches *another* worker (a polling releaser mostly \
         re-takes its own lock, which is no hand-off), and how long `lock()` waits.\n"
    );
    let sf = &r.serial_floor;
    let _ = writeln!(
        s,
        "Serial floor: **{:.0} iterations/s** (the workers' loop with no lock: counter `INCR` within the {} µs spun hold, \
         the bench's timestamps and record, serially on one connection, N={}, fastest of {} runs; one iteration p50 {}, p99 {}). \
         \"% of floor\" = hand-offs/s over this rate.\n",
        sf.iterations_per_s,
        sf.hold_us,
        sf.n,
        sf.runs_per_s.len(),
        r.lat(sf.iteration_us.p50),
        r.lat(sf.iteration_us.p99),
    );
    let _ = writeln!(
        s,
        "| strategy | W | N | hand-offs/s to another worker (× rslock) | all hand-offs/s (% of floor) | share to another worker | busiest worker's share (fair) | wait p50 | wait p99 | wait max | wait p99 / max, lock from another worker | cmds / hand-off | round trips / hand-off | Redis CPU / hand-off |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for o in &r.handoff {
        let rs = r
            .handoff
            .iter()
            .find(|x| x.strategy == "rslock" && x.workers == o.workers);
        let _ = writeln!(
            s,
            "| {} | {} | {} | **{:.0}**{} | {:.0}{} | {:.0}% | {:.0}% ({:.0}%) | {} | {} | {} | {} / {} | {} | {} | {} |",
            o.strategy,
            o.workers,
            o.n,
            o.handovers_per_s,
            rs.filter(|x| x.handovers_per_s > 0.0)
                .map_or(String::new(), |x| format!(
                    " ({:.1}×)",
                    o.handovers_per_s / x.handovers_per_s
                )),
            o.handoffs_per_s,
            r.of_floor(o.handoffs_per_s)
                .map_or(String::new(), |f| format!(" ({:.0}%)", f * 100.0)),
            o.handover_share * 100.0,
            o.busiest_share * 100.0,
            100.0 / f64::from(o.workers),
            r.lat(o.wait_us.p50),
            r.lat(o.wait_us.p99),
            fmt_us(o.wait_max_us),
            o.handover_wait_us.p99.map_or("–".into(), fmt_us),
            if o.handover_waits.is_empty() {
                "–".into()
            } else {
                fmt_us(o.handover_wait_max_us)
            },
            per(o, false),
            per(o, true),
            cpu(o),
        );
    }

    let _ = writeln!(
        s,
        "\n## 4. Waiter scaling (waiters + 1 holder on one lock, over 4 processes, one client per process)\n"
    );
    let _ = writeln!(
        s,
        "| strategy | waiters | N | hand-offs/s | gap p50 | gap p99 | round trips / hand-off | all cmds / hand-off |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for o in &r.scaling {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            o.strategy,
            o.workers - 1,
            o.n,
            o.handoffs_per_s,
            r.lat(o.gap_us.p50),
            r.lat(o.gap_us.p99),
            per(o, true),
            per(o, false),
        );
    }

    s.push_str(&uncontended(&r.uncontended));
    s.push_str(&uncontended(&r.uncontended_work));

    let _ = writeln!(
        s,
        "\n## 6. Crash takeover (holder leaks its guard; time from lease expiry to the next holder)\n"
    );
    let _ = writeln!(
        s,
        "| strategy | lease | runs | p50 | p99 | max |\n|---|---|---|---|---|---|"
    );
    for t in &r.takeover {
        let _ = writeln!(
            s,
            "| {} | {} ms | {} | {} | {} | {} |",
            t.strategy,
            t.lease_ms,
            t.runs,
            t.takeover_us.p50.map_or("–".into(), fmt_us),
            t.takeover_us.p99.map_or("–".into(), fmt_us),
            t.max_us.map_or("–".into(), fmt_us),
        );
    }
    let m = &r.semaphore;
    let _ = writeln!(
        s,
        "\n## 7. Semaphore ({} permits, {} workers, each with its own client, in one process)\n",
        m.permits, m.workers
    );
    let _ = writeln!(
        s,
        "| acquisitions | acquisitions/s | wait p50 | wait p99 | round trips / acq. | all cmds / acq. |\n|---|---|---|---|---|---|"
    );
    let per = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let _ = writeln!(
        s,
        "| {} | {:.0} | {} | {} | {} | {} |",
        m.acquisitions,
        m.acquisitions_per_s,
        m.wait_us.p50.map_or("–".into(), fmt_us),
        m.wait_us.p99.map_or("–".into(), fmt_us),
        per(m.round_trips_per_acquisition),
        per(m.commands_per_acquisition),
    );
    s.push_str(&metrics_cost(&r.metrics));
    s.push_str(NOTES);
    if r.cluster.is_some() {
        s.push_str(CLUSTER_NOTES);
    }
    s.push_str(&super::verdict::expectations(r));
    s
}

/// Section 5: the uncontended table.
pub fn uncontended(u: &super::floor::Uncontended) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## 5{}. Uncontended lock+unlock{} ({} workers, each with its own client and its own lock; median of {} rounds of {:.1} s, strategies in turn)\n",
        if u.hold_us.is_some() { "b" } else { "a" },
        u.hold_us
            .map_or(" alone: Redis CPU per lock+unlock".to_owned(), |h| format!(
                " around a critical section (INCR of the worker's counter, {h} µs hold): ops/s"
            )),
        u.workers,
        u.rounds,
        u.seconds
    );
    let _ = writeln!(
        s,
        "| strategy | ops/s (× rslock) | cmds / op (× rslock) | round trips / op | Redis CPU / op (× rslock) | bench process CPU / op (× rslock) | commands in one op |\n|---|---|---|---|---|---|---|"
    );
    let rs = u.rows.iter().find(|x| x.strategy == "rslock");
    let ratio = |a: f64, b: Option<f64>| {
        b.filter(|b| *b > 0.0)
            .map_or(String::new(), |b| format!(" ({:.2}×)", a / b))
    };
    for row in &u.rows {
        let mut cmds: Vec<&(String, f64)> = row.by_command.iter().filter(|c| c.1 >= 0.05).collect();
        cmds.sort_by(|a, b| b.1.total_cmp(&a.1));
        let list: Vec<String> = cmds.iter().map(|(n, v)| format!("{n} {v:.1}")).collect();
        let _ = writeln!(
            s,
            "| {} | {:.0}{} | {:.2}{} | {:.2} | {:.1} µs{} | {:.1} µs{} | {} |",
            row.strategy,
            row.ops_per_s,
            ratio(row.ops_per_s, rs.map(|x| x.ops_per_s)),
            row.commands_per_op,
            ratio(row.commands_per_op, rs.map(|x| x.commands_per_op)),
            row.round_trips_per_op,
            row.cpu_us_per_op,
            ratio(row.cpu_us_per_op, rs.map(|x| x.cpu_us_per_op)),
            row.client_cpu_us_per_op,
            ratio(row.client_cpu_us_per_op, rs.map(|x| x.client_cpu_us_per_op)),
            list.join(", "),
        );
    }
    s
}

/// Section 8: the `metrics` feature's cost.
pub fn metrics_cost(m: &super::metrics_cost::MetricsCost) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## 8. Cost of the `metrics` feature (hand-off, W={}, N={}, {} interleaved rounds, medians)\n",
        m.workers, m.n, m.rounds
    );
    if let Some(why) = &m.skipped {
        let _ = writeln!(s, "Not measured: {why}.");
        return s;
    }
    let _ = writeln!(
        s,
        "| build | hand-offs/s (median) | vs feature off (medians) | vs feature off (paired, median of rounds) | rounds (hand-offs/s) |\n|---|---|---|---|---|"
    );
    for (i, (label, rounds)) in m.variants.iter().enumerate() {
        let all: Vec<String> = rounds.iter().map(|r| format!("{r:.0}")).collect();
        let pct = |c: Option<f64>| {
            if i == 0 {
                "–".to_owned()
            } else {
                c.map_or("–".into(), |c| format!("{:+.1}%", c * 100.0))
            }
        };
        let _ = writeln!(
            s,
            "| {label} | {} | {} | {} | {} |",
            m.median(i).map_or("–".into(), |v| format!("{v:.0}")),
            pct(m.change(i)),
            pct(m.paired(i)),
            all.join(", "),
        );
    }
    let _ = writeln!(
        s,
        "\n*feature off*: the bench's workers built without redbell's `metrics` feature; \
         *feature on*: the same workers built with it (`redbell-bench-metrics`), without a \
         recorder (the facade's no-op) or with a Prometheus recorder installed in each worker \
         (no HTTP server; upkeep every 5 s). *paired*: each round's run over the feature-off run of \
         the same round. The target is a cost under 3%; the rounds show the run-to-run spread, \
         which on a busy machine can be larger than that: a difference within the spread is \
         noise, not cost."
    );
    s
}

const NOTES: &str = "
Definitions: *hand-offs/s to another worker* = acquisitions per second where the lock changed \
worker (all hand-offs/s × the share that changed worker): a polling releaser mostly re-takes the \
lock itself, which hands nothing to anyone. *wait* = `lock()` returning minus `lock()` called, for \
every call before the N-th release, cut off there (a starved worker shows in *wait max*); \
*lock from another worker*: only the waits of the acquisitions whose previous holder was another \
worker, what a worker queued behind someone feels (a polling releaser's re-takes wait for nobody). \
*serial floor* = the hand-off loop without the lock (no acquire, no unlock), one task on one \
connection: the rate with zero lock overhead. *redbell fair* = `client.fair_mutex()`: FIFO, the \
release grants the lock to the head waiter. *rslock* = the `rslock` crate (Redlock over redis-rs \
on one server: `SET NX PX`, and after a failed try its compare-and-delete and a random 0–200 ms \
sleep). *gap* (scaling table) = next holder's `lock()` returning minus the previous holder's \
`unlock()` returning. *cmds* = every Redis command, those run inside Lua scripts included; \
*round trips* = the commands the clients sent (script calls; `SET`; SUBSCRIBE). *Redis CPU* = \
`used_cpu_sys + used_cpu_user` of `INFO cpu` over the window, per operation. Commands and CPU \
are counted between N/10 and N (`CONFIG RESETSTAT`, `INFO commandstats`), the bench's own \
bookkeeping commands excluded.
";

const CLUSTER_NOTES: &str = "
*redbell cluster* = `client.mutex()` exactly as *redbell*, but every worker's client is \
`Client::cluster(nodes)` on the Redis Cluster above (wake-ups by sharded pub/sub: SPUBLISH \
inside the release script, SSUBSCRIBE). Its counter shares the lock's `{name}` hash tag, so it \
lives on the primary that owns the lock's slot (`CLUSTER KEYSLOT`, `CLUSTER NODES`); its \
commands are counted on that primary only (`CONFIG RESETSTAT` and `INFO commandstats` there; \
the other primaries serve no key of the lock, and the replicas' replication stream is not \
counted), *round trips* with SSUBSCRIBE/SUNSUBSCRIBE in place of SUBSCRIBE/UNSUBSCRIBE. \
Its \"% of floor\" and ×PING multiples are against the single server's serial floor and PING.
";
