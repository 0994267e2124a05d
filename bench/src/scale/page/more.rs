//! The report's parts 3 and 4 (many clients, the cluster's per-shard
//! cost), with their method; the parent module renders the rest.

use std::fmt::Write;

use super::{Report, group};

pub(super) fn clients(s: &mut String, r: &Report) {
    let Some(c) = &r.clients else { return };
    let n = f64::from(c.clients.max(1));
    let _ = writeln!(
        s,
        "## 3. Many clients\n\n\
         {clients} client processes (`scale-client`, one `redbell::Client` each on a \
         current-thread runtime), {tasks} tasks per process; task `t` of process `p` loops on \
         lock `(p × {tasks} + t) mod {names}`: `lock()`, hold {hold} ms, `unlock()`, pause \
         0–{hold} ms at random. So each of the {names} locks is shared by {share} tasks of \
         {share} processes: at any time a holder and parked waiters, in different processes. \
         Connections are the processes' lines of `CLIENT LIST` after a warm-up. Each window \
         starts at `T0` and ends when every task has acquired its lock again (each process \
         reports its tasks' first acquisition at or after `T0`; limit 60 s). The calm window \
         is the baseline; in a storm `T0` is a `CLIENT KILL TYPE normal` (the command \
         connections) or `TYPE pubsub` (the subscription connections) of every client at \
         once. Meanwhile one bench connection polls `INFO stats` and `INFO cpu` as fast as \
         the loaded machine lets it: `total_connections_received` tells when the reconnects \
         arrived, and the CPU delta, minus the polls' own `usec`, is the server's during the \
         window. The command connections reconnect when next used (redis-rs's \
         `ConnectionManager`); the pub/sub connection of a client reconnects 0–50 ms after \
         the loss, at random, then with jittered backoff (50 ms to 1 s), resubscribes, and \
         wakes its waiters, which attempt again. The slow lane (a third connection, for `WAIT`) opens on a client's \
         first `WAIT` only; no call here uses `WAIT`.\n",
        clients = c.clients,
        tasks = c.tasks_per_client,
        names = group(c.names.into()),
        hold = c.hold_ms,
        share = c.clients * c.tasks_per_client / c.names.max(1),
    );
    let _ = writeln!(
        s,
        "| clients | connections per client | pub/sub per client | after the storms | keys left (fence) |\n\
         |---:|---:|---:|---:|---:|\n\
         | {} | {:.2} | {:.2} | {:.2} ({:.2}) | {} ({}) |\n",
        c.clients,
        c.connections as f64 / n,
        c.pubsub_connections as f64 / n,
        c.connections_after as f64 / n,
        c.pubsub_connections_after as f64 / n,
        c.keys_left,
        c.fence_keys_left,
    );
    let _ = writeln!(
        s,
        "| window | killed | tasks not served | served again p50 / p99 / max | Redis CPU | \
         reconnects | first / median / last reconnect | most in one poll | lock / unlock errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for w in &c.windows {
        let what = if w.kill.is_empty() {
            "calm".to_owned()
        } else {
            format!("`CLIENT KILL TYPE {}`", w.kill)
        };
        let _ = writeln!(
            s,
            "| {what} | {} | {} of {} | {:.0} / {:.0} / {:.0} ms | {:.0} ms ({:.1} % of a core) | {} | \
             {:.1} / {:.1} / {:.1} ms | {} in {:.1} ms | {} / {} |",
            w.killed,
            w.unserved,
            w.tasks,
            w.served_p50_ms,
            w.served_p99_ms,
            w.served_max_ms,
            w.cpu_us / 1e3,
            w.cpu_pct,
            w.reconnects,
            w.reconnect_first_ms,
            w.reconnect_p50_ms,
            w.reconnect_last_ms,
            w.busiest_poll,
            w.busiest_poll_ms,
            w.lock_errors,
            w.unlock_errors,
        );
    }
    let poll = c.windows.iter().map(|w| w.poll_ms).fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "\n*Served again*: ms from `T0` to each task's next acquisition; in the calm window \
         that is the wait of a task that shares its lock with {} others, the baseline. *Redis \
         CPU*: the server's CPU from `T0` until every task was served again. *Reconnects*: \
         connections the server accepted in the window, timed at the poll that saw them (the \
         polls were at most {poll:.1} ms apart, median); *most in one poll* is the largest \
         burst between two polls.\n",
        c.clients * c.tasks_per_client / c.names.max(1) - 1,
    );
}

pub(super) fn cluster(s: &mut String, r: &Report) {
    let Some(c) = &r.cluster else { return };
    let su = c.single_uncontended.cpu_us_per_op;
    let sc = c.single_contended.cpu_us_per_op;
    let _ = writeln!(
        s,
        "## 4. Cluster: the per-shard cost\n\n\
         A local Redis Cluster of three primaries and three replicas \
         (`scripts/redis/cluster.sh`, on this machine's {} cores with everything else). The \
         part-2 workloads over {} names ({} uncontended acquisitions, {} contended) on the \
         run's server, on a fresh server with one replica attached (as each shard has one), \
         and through a cluster client, in turn, {} rounds, medians. Each primary's CPU delta (minus its \
         idle rate: cluster bus and replication pings) ÷ the acquisitions whose names hash to \
         its slots (computed from the names). The primaries' CPU includes feeding their \
         replica. The names per shard are computed; the fence keys (one per name) are counted \
         on each primary afterwards. Throughput through the cluster is not a cluster's \
         capacity here: all six nodes and the bench share {} cores.\n",
        r.cores,
        group(c.names.into()),
        group(c.ops),
        group(c.ops / 2),
        c.rounds,
        r.cores,
    );
    let even = f64::from(c.names) / c.shards.len().max(1) as f64;
    let _ = writeln!(
        s,
        "| shard | slots | names | vs even | fence keys | idle CPU |\n|---|---:|---:|---:|---:|---:|"
    );
    for sh in &c.shards {
        let _ = writeln!(
            s,
            "| :{} | {} | {} | {:+.1} % | {} | {:.2} % |",
            sh.port,
            group(sh.slots.into()),
            group(sh.names.into()),
            (f64::from(sh.names) / even - 1.0) * 100.0,
            group(sh.fence_keys),
            sh.idle_cpu_pct,
        );
    }
    let _ = writeln!(
        s,
        "\nRedis CPU per acquisition; the commands per acquisition and the µs a script call \
         ran (`INFO commandstats`) split it: the rest is the server's I/O, the replication \
         stream to the replica and the cluster's bookkeeping.\n\n\
         | server | uncontended µs/op | vs one server | commands/op | µs per script call | \
         contended µs/op | vs one server | commands/op | µs per script call |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n\
         | one server | {su:.2} | 1.00 | {:.2} | {:.2} | {sc:.2} | 1.00 | {:.2} | {:.2} |",
        c.single_uncontended.cmds_per_op,
        c.single_script_us[0],
        c.single_contended.cmds_per_op,
        c.single_script_us[1],
    );
    if let Some(r) = &c.replicated {
        let (u, k) = (r.uncontended.cpu_us_per_op, r.contended.cpu_us_per_op);
        let _ = writeln!(
            s,
            "| one server + a replica | {u:.2} | {:.2} | {:.2} | {:.2} | {k:.2} | {:.2} | {:.2} | {:.2} |",
            u / su.max(1e-9),
            r.uncontended.cmds_per_op,
            r.script_us[0],
            k / sc.max(1e-9),
            r.contended.cmds_per_op,
            r.script_us[1],
        );
    }
    for sh in &c.shards {
        let _ = writeln!(
            s,
            "| shard :{} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            sh.port,
            sh.uncontended_cpu_us,
            sh.uncontended_cpu_us / su.max(1e-9),
            sh.cmds_per_op[0],
            sh.script_us[0],
            sh.contended_cpu_us,
            sh.contended_cpu_us / sc.max(1e-9),
            sh.cmds_per_op[1],
            sh.script_us[1],
        );
    }
    let med = |f: fn(&super::super::cluster::Shard) -> f64| super::shard_median(&c.shards, f);
    if let Some(rep) = &c.replicated {
        let _ = writeln!(
            s,
            "\nIn this run a shard (median) spent {:.2} × one server's CPU per uncontended \
             acquisition and {:.2} × per hand-off; a server with a replica, {:.2} × and {:.2} ×. \
             The commands are the same; the script calls themselves ran {:.2} × and {:.2} × \
             longer on a shard (wall time inside the server, which includes being descheduled). \
             Part 5 counts the instructions instead, which this machine's load does not move.",
            med(|sh| sh.uncontended_cpu_us) / su.max(1e-9),
            med(|sh| sh.contended_cpu_us) / sc.max(1e-9),
            rep.uncontended.cpu_us_per_op / su.max(1e-9),
            rep.contended.cpu_us_per_op / sc.max(1e-9),
            med(|sh| sh.script_us[0]) / c.single_script_us[0].max(1e-9),
            med(|sh| sh.script_us[1]) / c.single_script_us[1].max(1e-9),
        );
    }
    let _ = writeln!(
        s,
        "\nAcquisitions/s through the cluster client on this machine: {} uncontended, {} \
         contended (one server: {}, {}).\n\n\
         A waiter client's hub: one client parks one task on each of {} locks (held by another \
         client under a fixed lease). Its connections on each primary (`CLIENT LIST`, ids new \
         since it connected; the command and the subscription connection of redis-rs's \
         cluster client), those subscribed to shard channels (`ssub`), and its shard \
         channels; every lock's wake channel had exactly one subscriber (`PUBSUB \
         SHARDNUMSUB`) except {}.\n\n\
         | shard | locks waited on | the client's connections | with shard subscriptions | shard channels |\n\
         |---|---:|---:|---:|---:|",
        group(c.cluster_uncontended_per_s as u64),
        group(c.cluster_contended_per_s as u64),
        group(c.single_uncontended.ops_per_s as u64),
        group(c.single_contended.ops_per_s as u64),
        c.waited,
        c.channels_not_one,
    );
    for sh in &c.shards {
        let _ = writeln!(
            s,
            "| :{} | {} | {} | {} | {} |",
            sh.port,
            sh.waited,
            sh.waiter_connections,
            sh.waiter_subscribed_connections,
            sh.waiter_channels
        );
    }
    s.push('\n');
}
