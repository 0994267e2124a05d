//! The counted part's section of the scale page: parts 2 and 4 again, with
//! the servers under Callgrind (`scale/counted.rs`).

use std::fmt::Write;

use super::super::cluster::Shard;
use super::super::names::NamesRow;
use super::{Report, group, shard_median};

pub(super) fn counted(s: &mut String, r: &Report) {
    let Some(c) = &r.counted else { return };
    let ops = c.names.iter().find(|n| !n.contended).map_or(0, |n| n.ops);
    let _ = writeln!(
        s,
        "## 5. Counted: instructions per operation\n\n\
         A server's CPU time per operation moves with whatever else the machine runs: on this \
         project's shared 2-core VM the same workload on the same server measured twice the \
         µs from one minute to the next. So parts 2 and 4 run once more (one round) with every \
         server under Valgrind's Callgrind (`scripts/redis/callgrind.sh`), which counts the \
         instructions the server executes, however it is scheduled, and simulates its \
         caches. The counts are the servers' only (the client runs natively); the primaries' \
         idle work (cluster bus) is taken out as in part 4. A server under Callgrind runs \
         some ten times slower, so the contended rows see more contention than parts 2 and 4 \
         (more commands per acquisition); compare instructions per command across them. \
         The last-level cache misses are simulated (an 8 MiB, 16-way cache, smaller than most \
         servers' shared caches, so a growing keyspace shows early): what a larger keyspace \
         costs beyond the instructions. Rows take {} uncontended acquisitions ({} contended).\n",
        group(ops),
        group(ops / 2),
    );
    if !c.names.is_empty() {
        names(s, &c.names);
    }
    if let Some(cl) = &c.cluster {
        let one = |row: &NamesRow| row.counted.unwrap_or_default();
        let [su, sc] = [one(&cl.single_uncontended), one(&cl.single_contended)];
        let _ = writeln!(
            s,
            "Part 4, counted: instructions per acquisition on one server, on a server with a \
             replica, and on each cluster shard (the acquisitions whose names hash to it), \
             over {} names.\n\n\
             | server | uncontended instructions/op | vs one server | per command | \
             contended instructions/op | vs one server | per command |\n\
             |---|---:|---:|---:|---:|---:|---:|",
            group(cl.names.into())
        );
        let row = |s: &mut String, what: &str, u: [f64; 2], k: [f64; 2], cmds: [f64; 2]| {
            let _ = writeln!(
                s,
                "| {what} | {} | {:.2} | {} | {} | {:.2} | {} |",
                group(u[0] as u64),
                u[0] / su[0].max(1e-9),
                group((u[0] / cmds[0].max(1e-9)) as u64),
                group(k[0] as u64),
                k[0] / sc[0].max(1e-9),
                group((k[0] / cmds[1].max(1e-9)) as u64),
            );
        };
        row(
            s,
            "one server",
            su,
            sc,
            [
                cl.single_uncontended.cmds_per_op,
                cl.single_contended.cmds_per_op,
            ],
        );
        if let Some(rep) = &cl.replicated {
            row(
                s,
                "one server + a replica",
                one(&rep.uncontended),
                one(&rep.contended),
                [rep.uncontended.cmds_per_op, rep.contended.cmds_per_op],
            );
        }
        for sh in &cl.shards {
            let [u, k] = sh.counted.unwrap_or_default();
            row(s, &format!("shard :{}", sh.port), u, k, sh.cmds_per_op);
        }
        let med = |f: fn(&Shard) -> f64| shard_median(&cl.shards, f);
        let rep = cl.replicated.as_ref().map_or([0.0; 2], |rep| {
            [
                one(&rep.uncontended)[0] / su[0].max(1e-9),
                one(&rep.contended)[0] / sc[0].max(1e-9),
            ]
        });
        let _ = writeln!(
            s,
            "\nA shard (median) executed {:.2} × one server's instructions per uncontended \
             acquisition and {:.2} × per contended one; a server with a replica, {:.2} × and \
             {:.2} ×. So a shard costs what a server with a replica costs, plus what cluster \
             mode adds to each command (the key's slot is checked on every call, inside \
             scripts too; `SPUBLISH` also goes to the shard's replica over the cluster bus). \
             The rest of part 4's CPU ratios is time per instruction, not work: how this \
             machine schedules and caches seven server processes and the bench on {} \
             cores.\n",
            med(|sh| sh.counted.map_or(0.0, |c| c[0][0])) / su[0].max(1e-9),
            med(|sh| sh.counted.map_or(0.0, |c| c[1][0])) / sc[0].max(1e-9),
            rep[0],
            rep[1],
            r.cores,
        );
    }
}

fn names(s: &mut String, rows: &[NamesRow]) {
    let _ = writeln!(
        s,
        "Part 2, counted (one round):\n\n\
         | kind | names | commands/op | instructions/op | vs 1 name | instructions per command | \
         vs 1 name | LL misses/op |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for contended in [false, true] {
        let mine: Vec<&NamesRow> = rows.iter().filter(|n| n.contended == contended).collect();
        let per_cmd = |n: &NamesRow| n.counted.map_or(0.0, |c| c[0]) / n.cmds_per_op.max(1e-9);
        let Some(first) = mine.iter().min_by_key(|n| n.names) else {
            continue;
        };
        let [i0, _] = first.counted.unwrap_or_default();
        let p0 = per_cmd(first);
        for n in &mine {
            let [i, m] = n.counted.unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {} | {:+.1} % | {} | {:+.1} % | {:.2} |",
                if contended {
                    "contended"
                } else {
                    "uncontended"
                },
                group(n.names.into()),
                n.cmds_per_op,
                group(i as u64),
                (i / i0.max(1e-9) - 1.0) * 100.0,
                group(per_cmd(n) as u64),
                (per_cmd(n) / p0.max(1e-9) - 1.0) * 100.0,
                m,
            );
        }
    }
    // What the misses could cost, beside the instructions: at the most
    // names, uncontended, at an assumed 100 ns a miss.
    let most = rows
        .iter()
        .filter(|n| !n.contended)
        .max_by_key(|n| n.names)
        .and_then(|n| n.counted.map(|c| (n.names, c[1])));
    if let Some((k, misses)) = most {
        let _ = writeln!(
            s,
            "\nAt {} names the simulated misses, at an assumed 100 ns each, would add {:.2} µs \
             per uncontended acquisition to a server's CPU time.",
            group(k.into()),
            misses * 0.1,
        );
    }
    s.push('\n');
}
