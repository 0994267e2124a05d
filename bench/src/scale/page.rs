//! The scale report as Markdown (`--report`, `make bench-scale` writes
//! `docs/scale.md`, generated whole): the run's facts, the method once,
//! the two parts' tables, and the capacity model derived from them.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::cluster::median as mid;
use super::names::NamesRow;

mod counted;
mod more;
use super::parked::ParkedRow;

/// One run, as rendered and as written to `target/scale/results.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub date: String,
    pub cores: usize,
    pub redis_version: String,
    pub build: String,
    pub quick: bool,
    pub command: String,
    pub quiet_secs: f64,
    pub idle_cpu_pct: f64,
    pub parked: Vec<ParkedRow>,
    pub names: Vec<NamesRow>,
    /// Part 3, absent from older runs.
    #[serde(default)]
    pub clients: Option<super::clients::ClientsRow>,
    /// Part 4, absent from older runs.
    #[serde(default)]
    pub cluster: Option<super::cluster::ClusterRow>,
    /// The counted part, absent from older runs and where Valgrind is not
    /// installed.
    #[serde(default)]
    pub counted: Option<super::counted::CountedRun>,
    /// `DBSIZE` at the end, after the rows deleted their fence keys.
    pub dbsize_after: u64,
}

/// The date and time, UTC.
pub fn today() -> String {
    crate::bench::plan::utc_now()
}

/// This process's command line.
pub fn command_line() -> String {
    crate::bench::page::command_line()
}

const METHOD: &str = "\
## Method

- **1. Parked at scale.** One process (`scale-waiters`) parks N tasks in `lock()` on N/10 \
  locks (10 tasks per lock, one client) that the bench holds under a fixed 900 s lease (no \
  renewals). Client memory is that process's RSS after parking minus before (connected, no \
  task yet), ÷ N; Redis memory is `used_memory` after minus before, ÷ N. Connections and \
  channels are the process's lines of `CLIENT LIST`. Then a quiet window: the commands the \
  server counted (`INFO commandstats` after `CONFIG RESETSTAT`), minus those of the same \
  window before any waiter existed, and the server's CPU (`INFO cpu`, `used_cpu_sys + \
  used_cpu_user`). Then the bench unlocks locks one at a time, 20 ms apart, and times each \
  wake-up: from just before its `unlock()` to the woken task's `lock()` returning (both \
  stamps from the one machine clock), split at the woken task's first poll after the \
  release. N = 100 is repeated with fresh processes until it has the samples. The waiter \
  process also counts its own heap (a counting global allocator in the bench binary: live \
  bytes, blocks and size classes, after parking minus before).
- **2. Cost flat in the number of locks.** K distinct names. *Uncontended*: one task, one \
  client, sequential `lock()` + `unlock()` on name `i % K`. *Contended*: two tasks on two \
  clients meet at a barrier on name `step % K`, both call `lock()`, each takes it twice (hold \
  100 µs), and move on: the same two-way contention on every name whatever K. Before each \
  run the K names' fence keys are set, as earlier locks of them would have left them: the \
  server holds K names' keys even where a run takes fewer locks than K. Redis CPU and \
  commands (those inside scripts included) per acquisition, K values interleaved over the \
  rounds, medians. After each run the run's keys are counted: lock keys and queues must be \
  gone; fence keys stay by design, one per name, each expiring after the fence TTL (7 days \
  by default) so one-off names do not leak forever.

";

/// Published figures of the coordination services, for scale only: they
/// are generic replicated writes on other hardware, not lock benchmarks.
const PEERS: &str = "
**Published figures, for scale.** Neither etcd nor ZooKeeper publishes a lock benchmark; \
their published write rates are the nearest figure, and a lock+unlock costs them at least \
two replicated writes (create or lease + delete). They replicate every write to a quorum and \
sync it to disk; Redis here does neither (see the reliability page for what redbell offers \
instead: fencing, `WAIT`, Sentinel, Cluster), so this is not a like-for-like comparison.

- etcd v2.1.0 ([etcd benchmarks](https://etcd.io/docs/v2/benchmarks/etcd-2-1-0-alpha-benchmarks/)): \
  3 members on GCE n1-highcpu-2 (2 vCPUs each), writing one key: 60 writes/s with 1 client, \
  1,742 with 64, 3,982 with 256 (leader only): about 2,000 writes/s per leader core, so \
  ≤ ~1,000 lock+unlock/s per core.
- etcd v3 ([performance guide](https://etcd.io/docs/v3.3/op-guide/performance/)): a \
  three-member cluster on n-4 class machines completes more than 30,000 requests/s under \
  heavy load.
- ZooKeeper: 21,000 writes/s on a three-server ensemble, as reported by Hunt et al. \
  (USENIX ATC 2010), quoted in \
  [this benchmark write-up](http://blog.runfigures.com/how-much-can-you-get-of-zookeeper-in-aws/).
";

/// The page.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<!-- Generated by `make bench-scale` (redbell-bench scale --report). Do not edit: \
         rerun it. The text comes from bench/src/scale/page.rs. -->\n\n# Cost at scale\n"
    );
    let _ = writeln!(
        s,
        "Run {} on {} cores, Redis {}, {} build{}. Reproduce with `make bench-scale`, or against \
         your own (private) server with `redbell-bench --url redis://HOST:PORT scale`; this \
         run's command:\n\n```sh\n{}\n```\n",
        r.date,
        r.cores,
        r.redis_version,
        r.build,
        if r.quick {
            " (`--quick`: a smoke test, the numbers are indicative only)"
        } else {
            ""
        },
        r.command,
    );
    s.push_str(METHOD);
    if !r.parked.is_empty() {
        parked(&mut s, r);
    }
    if !r.names.is_empty() {
        names(&mut s, r);
    }
    more::clients(&mut s, r);
    more::cluster(&mut s, r);
    counted::counted(&mut s, r);
    capacity(&mut s, r);
    s
}

fn parked(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "## 1. Parked at scale\n\n\
         Goals: ≤ 1 KiB client memory and ≤ 256 B Redis memory per waiter; no command on lock \
         keys while parked; wake-up p99 at the most waiters within 1.5× of the fewest.\n\n\
         | waiters | locks | client B/waiter (all at once) | client B/waiter (1,000 at a time) | Redis B/waiter | queue members | bytes per queue | connections (pub/sub) | channels | parking took |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in &r.parked {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.1} | {} | {} | {} ({}) | {} | {:.1} s |",
            group(p.waiters.into()),
            group(p.locks.into()),
            p.rss_per_waiter,
            p.rss_per_waiter_batched,
            p.redis_per_waiter,
            group(p.members),
            p.queue_bytes,
            p.connections,
            p.pubsub_connections,
            group(p.channels),
            p.park_secs,
        );
    }
    let _ = writeln!(
        s,
        "\nWhile parked, a {:.0} s quiet window (idle server: {:.2} % of a core):\n\n\
         | waiters | commands/s above idle | script calls (lock keys) | commands counted | Redis CPU |\n\
         |---:|---:|---:|---|---:|",
        r.quiet_secs, r.idle_cpu_pct
    );
    for p in &r.parked {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {:.2} % |",
            group(p.waiters.into()),
            p.quiet_cmds_per_s,
            p.quiet_script_calls,
            if p.quiet_breakdown.is_empty() {
                "none"
            } else {
                &p.quiet_breakdown
            },
            p.cpu_parked_pct,
        );
    }
    let _ = writeln!(
        s,
        "\nWake-up of one release among the parked waiters:\n\n\
         | waiters | samples | p50 | p99 | max | p99 ÷ p99 at {} | keys left (fence) |\n\
         |---:|---:|---:|---:|---:|---:|---:|",
        group(r.parked[0].waiters.into())
    );
    let base = pct(&r.parked[0].wake_ms, 99.0);
    for p in &r.parked {
        let p99 = pct(&p.wake_ms, 99.0);
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} | {} ({}) |",
            group(p.waiters.into()),
            p.wake_ms.len(),
            pct(&p.wake_ms, 50.0),
            p99,
            pct(&p.wake_ms, 100.0),
            p99 / base,
            p.keys_left,
            p.fence_keys_left,
        );
    }
    heap(s, r);
    wake_parts(s, r);
    let _ = writeln!(
        s,
        "\n*Queue members*: a client keeps one place per lock in the queue (its oldest waiter); \
         its other waiters park in the client. *Channels*: one wake channel per lock the client \
         waits on. *Keys left*: after every lock was released and the waiter process exited; \
         only fence keys may stay.\n\n\
         *Client memory.* A parked task keeps its tokio task (the caller's: here the bench's \
         future, which holds the `Mutex` handle and the `lock()` future), its place in the \
         client's hub (its owner token, a `Notify` and a few flags behind an `Arc`, and a slot \
         in the lock's map of local waiters; its queue member is built only to be sent) and, \
         shared by every handle of one lock and kind in the client, the lock's keys (one \
         buffer of a few hundred bytes, once per lock). A `lock()` future is as big as its biggest await point: the \
         script call's state (~11 KB) is boxed for the call alone, so the parked future stays \
         small (`integration-tests/tests/parked_memory.rs` bounds it), and a client has at \
         most 256 attempts in flight, so a burst of waiters neither allocates all those calls \
         at once (memory the allocator would keep afterwards) nor queues them all on the \
         connection past its response timeout (the same test file parks 30,000 at once). The \
         heap profile is the waiter process's own count (a counting allocator in the bench \
         binary); the RSS columns add what the allocator keeps beyond it.\n"
    );
}

/// The waiter process's heap per parked waiter, and its pieces.
fn heap(s: &mut String, r: &Report) {
    if r.parked.iter().all(|p| p.heap_blocks_per_waiter == 0.0) {
        return;
    }
    let _ = writeln!(
        s,
        "\nWhere a parked waiter's client memory goes (the waiter process's live heap, counted \
         by its allocator, after parking minus before; sizes from `size_of`):\n\n\
         | waiters | heap B/waiter | reserved by malloc | blocks/waiter | RSS B/waiter | \
         `lock()` future | the task's future (bench) | `Mutex` handle |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in &r.parked {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.1} | {:.0} | {} B | {} B | {} B |",
            group(p.waiters.into()),
            p.heap_per_waiter,
            p.heap_usable_per_waiter,
            p.heap_blocks_per_waiter,
            p.rss_per_waiter_batched,
            p.sizes.0,
            p.sizes.1,
            p.sizes.2,
        );
    }
    if let Some(p) = r.parked.last() {
        let classes: Vec<String> = p
            .heap_classes
            .iter()
            .map(|(class, blocks, bytes)| format!("{blocks:.2} × ≤ {class} B ({bytes:.0} B)"))
            .collect();
        let _ = writeln!(
            s,
            "\nAt {} waiters, per waiter, by size class: {}. The largest block is the tokio \
             task that holds the caller's future (its header and the future: {} B, of which \
             the `lock()` future is {} B).",
            group(p.waiters.into()),
            classes.join("; "),
            p.sizes.1,
            p.sizes.0,
        );
    }
}

/// The parts of each wake-up (see [`ParkedRow::wake_parts`]).
fn wake_parts(s: &mut String, r: &Report) {
    if r.parked.iter().all(|p| p.wake_parts.is_empty()) {
        return;
    }
    let _ = writeln!(
        s,
        "\nEach wake-up in parts, p50 / p99: the holder's `unlock()` (a round trip; the \
         PUBLISH runs in its script); from the release until the woken task ran (its first \
         poll after it), and that time minus the unlock: the message's way out of the server, \
         through the pub/sub socket, the hub's dispatch (a hash lookup) and the runtime's \
         scheduling among the parked tasks, the only part that could grow with the number \
         parked; then the woken task's own attempt (a round trip).\n\n\
         | waiters | unlock | release → task runs | minus the unlock | the attempt |\n\
         |---:|---:|---:|---:|---:|"
    );
    for p in &r.parked {
        let part = |f: fn(&(f64, f64, f64)) -> f64| {
            let v: Vec<f64> = p.wake_parts.iter().map(f).collect();
            format!("{:.2} / {:.2} ms", pct(&v, 50.0), pct(&v, 99.0))
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            group(p.waiters.into()),
            part(|w| w.0),
            part(|w| w.1),
            part(|w| (w.1 - w.0).max(0.0)),
            part(|w| w.2),
        );
    }
}

fn names(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "## 2. Cost flat in the number of locks\n\n\
         Goal: Redis CPU per operation flat within ±15 % from 1 to 100,000 names. Medians of \
         the rounds; the last column is the run's keys left afterwards, fence keys in brackets \
         (by design, see the method).\n\n\
         | kind | names | acquisitions/s | Redis CPU µs/op | vs 1 name | commands/op | script calls/op | (un)subscribes/op | keys left (fence) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for contended in [false, true] {
        let mut ks: Vec<u32> = r
            .names
            .iter()
            .filter(|n| n.contended == contended)
            .map(|n| n.names)
            .collect();
        ks.sort_unstable();
        ks.dedup();
        let first = ks
            .first()
            .map_or(0.0, |&k| median(r, contended, k, |n| n.cpu_us_per_op));
        for k in ks {
            let m = |f: fn(&NamesRow) -> f64| median(r, contended, k, f);
            let last = r
                .names
                .iter()
                .rev()
                .find(|n| n.contended == contended && n.names == k);
            let cpu = m(|n| n.cpu_us_per_op);
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.2} | {:+.0} % | {:.2} | {:.2} | {:.3} | {} ({}) |",
                if contended {
                    "contended"
                } else {
                    "uncontended"
                },
                group(k.into()),
                m(|n| n.ops_per_s),
                cpu,
                (cpu / first - 1.0) * 100.0,
                m(|n| n.cmds_per_op),
                m(|n| n.scripts_per_op),
                m(|n| n.subs_per_op),
                last.map_or(0, |n| n.keys_left),
                last.map_or(0, |n| n.fence_keys_left),
            );
        }
    }
    let _ = writeln!(s, "\n`DBSIZE` after the run: {}.\n", r.dbsize_after);
}

fn capacity(s: &mut String, r: &Report) {
    let max_k = |contended: bool| {
        r.names
            .iter()
            .filter(|n| n.contended == contended)
            .map(|n| n.names)
            .max()
    };
    let _ = writeln!(
        s,
        "## Capacity model\n\n\
         Derived from the measured costs above (Redis is single-threaded: one core runs one \
         server or one cluster shard). Per-core rates are 10⁶ ÷ the Redis CPU µs per operation \
         at the most names; an S-shard cluster multiplies a shard's rate by S when the names \
         spread evenly{}. Redo it for your own server and workload with `redbell-bench --url \
         redis://HOST:PORT scale` on a server nobody else uses (it runs `CONFIG RESETSTAT`; \
         `--only names`, `--only clients`, `--only parked` or `--only counted` for one part; \
         parts 4 and 5 start their own local servers, part 5 under Valgrind).\n\n\
         | quantity | value | from |\n|---|---:|---|",
        if r.cluster.is_some() {
            " (part 4 measured the per-shard cost and the spread)"
        } else {
            " (the cluster's per-shard cost was not measured in this run)"
        }
    );
    for (contended, what) in [
        (false, "lock+unlock/s per Redis core"),
        (true, "hand-offs/s per Redis core"),
    ] {
        if let Some(k) = max_k(contended) {
            let cpu = median(r, contended, k, |n| n.cpu_us_per_op);
            let _ = writeln!(
                s,
                "| {what} | {} | {cpu:.2} µs of Redis CPU per acquisition at {} names |",
                group((1e6 / cpu) as u64),
                group(k.into())
            );
        }
    }
    if let Some(p) = r.parked.last() {
        let _ = writeln!(
            s,
            "| Redis memory per held lock (key + fence key) | {:.0} B | `used_memory` ÷ {} held locks |\n\
             | Redis memory per parked waiter | {:.1} B | at {} waiters, 10 per lock and client |\n\
             | client memory per parked waiter | {:.0} B | RSS at {} waiters, parked 1,000 at a time |",
            p.redis_per_lock,
            group(p.locks.into()),
            p.redis_per_waiter,
            group(p.waiters.into()),
            p.rss_per_waiter_batched,
            group(p.waiters.into()),
        );
    }
    if let Some(c) = &r.clients {
        let n = f64::from(c.clients.max(1));
        let _ = writeln!(
            s,
            "| connections per client (pub/sub among them) | {:.2} ({:.2}) | `CLIENT LIST` of {} client processes |",
            c.connections as f64 / n,
            c.pubsub_connections as f64 / n,
            c.clients
        );
        let calm = c.windows.iter().find(|w| w.kill.is_empty());
        for w in c.windows.iter().filter(|w| !w.kill.is_empty()) {
            // Above the calm window's rate over the same span: what the
            // storm itself cost.
            let span_us = w.cpu_us / (w.cpu_pct / 100.0).max(1e-9);
            let excess = w.cpu_us - calm.map_or(0.0, |k| k.cpu_pct / 100.0 * span_us);
            let _ = writeln!(
                s,
                "| Redis CPU of a reconnect storm (`TYPE {}`), above the calm rate | {} | {:.0} ms of CPU in {:.1} s ({:.1} % of a core) vs {:.1} % calm, {} clients, part 3 |",
                w.kill,
                if excess > 0.0 {
                    format!("{:.0} µs per client", excess / n)
                } else {
                    "none measurable".to_owned()
                },
                w.cpu_us / 1e3,
                span_us / 1e6,
                w.cpu_pct,
                calm.map_or(0.0, |k| k.cpu_pct),
                c.clients
            );
        }
    } else if let Some(p) = r.parked.last() {
        let _ = writeln!(
            s,
            "| connections per client (pub/sub among them) | {} ({}) | `CLIENT LIST` |",
            p.connections, p.pubsub_connections,
        );
    }
    match &r.cluster {
        Some(c) => {
            let med = |f: fn(&super::cluster::Shard) -> f64| shard_median(&c.shards, f);
            let (u, k) = (
                med(|sh| sh.uncontended_cpu_us),
                med(|sh| sh.contended_cpu_us),
            );
            let even = f64::from(c.names) / c.shards.len().max(1) as f64;
            let spread = c
                .shards
                .iter()
                .map(|sh| (f64::from(sh.names) / even - 1.0).abs() * 100.0)
                .fold(0.0, f64::max);
            // A shard's rate: one server's, divided by the counted ratio
            // when part 5 ran (the CPU ratio on a shared machine is mostly
            // scheduling), else by part 4's CPU ratio.
            let counted = r.counted.as_ref().and_then(|x| x.cluster.as_ref());
            for (w, what, cpu, single) in [
                (
                    0,
                    "lock+unlock/s per cluster shard (one core each)",
                    u,
                    &c.single_uncontended,
                ),
                (1, "hand-offs/s per cluster shard", k, &c.single_contended),
            ] {
                let cpu_ratio = cpu / single.cpu_us_per_op.max(1e-9);
                let base = max_k(w == 1).map_or(single.cpu_us_per_op, |k| {
                    median(r, w == 1, k, |n| n.cpu_us_per_op)
                });
                let (ratio, from) = match counted {
                    Some(cl) => {
                        let one = |row: &NamesRow| row.counted.map_or(0.0, |c| c[0]);
                        let single_i = if w == 0 {
                            one(&cl.single_uncontended)
                        } else {
                            one(&cl.single_contended)
                        };
                        let shard =
                            shard_median(&cl.shards, |sh| sh.counted.map_or(0.0, |c| c[w][0]));
                        let ratio = shard / single_i.max(1e-9);
                        (
                            ratio,
                            format!(
                                "one core's rate ÷ {ratio:.2}, a shard's instructions per \
                                 acquisition over one server's (part 5); part 4's CPU ratio \
                                 on this shared machine: {cpu_ratio:.2}"
                            ),
                        )
                    }
                    None => (
                        cpu_ratio,
                        format!(
                            "{cpu:.2} µs per acquisition on a shard, {cpu_ratio:.2} × one \
                             server's (part 4, median shard)"
                        ),
                    ),
                };
                let _ = writeln!(
                    s,
                    "| {what} | {} | {from} |",
                    group((1e6 / (base * ratio).max(1e-9)) as u64),
                );
            }
            let _ = writeln!(
                s,
                "| S-shard cluster | S × the per-shard rates | {} names within ±{spread:.1} % of even over {} shards; \
                 a waiter client holds one subscription connection per shard |",
                group(c.names.into()),
                c.shards.len()
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| S-shard cluster | S × the per-core rates | derived, not measured |"
            );
        }
    }
    s.push_str(PEERS);
}

fn median(r: &Report, contended: bool, k: u32, f: fn(&NamesRow) -> f64) -> f64 {
    mid(r
        .names
        .iter()
        .filter(|n| n.contended == contended && n.names == k)
        .map(f)
        .collect())
}

/// The median over a cluster's shards of `f`.
fn shard_median(
    shards: &[super::cluster::Shard],
    f: impl Fn(&super::cluster::Shard) -> f64,
) -> f64 {
    mid(shards.iter().map(f).collect())
}

/// The `p`th percentile (nearest rank) of `v`, 0 when empty.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// `12345` as `12,345`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentiles_and_grouping() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(super::pct(&v, 50.0), 50.0);
        assert_eq!(super::pct(&v, 99.0), 99.0);
        assert_eq!(super::pct(&[], 99.0), 0.0);
        assert_eq!(super::group(100_000), "100,000");
        assert_eq!(super::group(10), "10");
    }
}
