//! `redbell-bench scale`: what redbell costs at scale, measured: many
//! parked waiters (part 1, `scale/parked.rs`), the cost per operation
//! as the number of lock names grows (part 2, `scale/names.rs`), many
//! clients (part 3) and a cluster's shards (part 4), with a
//! capacity model derived from the measured costs (`scale/page.rs`).
//! `make bench-scale` runs it and writes `docs/scale.md`, generated whole.
//!
//! Run it on a private server: it runs `CONFIG RESETSTAT`, and every
//! command another client sends lands in its counts. Every key it writes
//! carries the run id; the rows count what is left and delete it.
//! `--render results.json` re-renders a run's page without measuring.
//!
//! Part 3 (`scale/clients.rs`) runs many client processes and their
//! reconnect storms; part 4 (`scale/cluster.rs`) starts a local cluster
//! and measures the per-shard cost (`--no-cluster` skips it).

use std::path::PathBuf;
use std::time::Duration;

use crate::fail::{EX_FAILURE, Failure};

mod callgrind;
mod client;
mod clients;
mod cluster;
mod counted;
mod names;
mod page;
mod parked;
mod server;
mod waiters;

pub use client::ClientArgs;
pub use counted::CountedArgs;
pub use waiters::WaitersArgs;

/// Options of `redbell-bench scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleArgs {
    /// Parked waiters per row of part 1 (each on `N/10` locks).
    #[arg(long, value_delimiter = ',', default_value = "100,10000,100000")]
    pub waiters: Vec<u32>,
    /// Distinct lock names per row of part 2.
    #[arg(long, value_delimiter = ',', default_value = "1,100,10000,100000")]
    pub names: Vec<u32>,
    /// Uncontended lock+unlock operations per row of part 2 (the
    /// contended rows take half as many locks).
    #[arg(long, default_value_t = 50_000)]
    pub ops: u64,
    /// The quiet window of part 1 (nothing released).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub quiet: Duration,
    /// Wake-ups timed per row of part 1.
    #[arg(long, default_value_t = 200)]
    pub samples: u32,
    /// Rounds of part 2 (medians; the rounds interleave the K values).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Render the report from a previous run's `results.json` instead of
    /// measuring (after a change to the page's text).
    #[arg(long, value_name = "JSON")]
    pub render: Option<PathBuf>,
    /// Skip part 4 (it starts a local cluster of six nodes).
    #[arg(long)]
    pub no_cluster: bool,
    /// Client processes of part 3 (0: skip the part).
    #[arg(long, default_value_t = 200)]
    pub clients: u32,
    /// Uncontended operations per row of the counted part (contended:
    /// half): a server under Callgrind runs some ten times slower.
    #[arg(long, default_value_t = 10_000)]
    pub counted_ops: u64,
    /// Skip the counted part (parts 2 and 4 again, the servers under
    /// Valgrind's Callgrind: instructions per operation; skipped anyway
    /// when Valgrind is not installed).
    #[arg(long)]
    pub no_counted: bool,
    /// Only one part.
    #[arg(long, value_parser = ["parked", "names", "clients", "cluster", "counted"])]
    pub only: Option<String>,
    /// A smoke test in well under a minute: small N and K, few samples.
    #[arg(long)]
    pub quick: bool,
    /// Also write the report as a Markdown page to FILE (`make
    /// bench-scale` writes `docs/scale.md`), and the raw rows as JSON
    /// beside it in `target/scale/results.json`.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// Runs a hidden `scale-waiters` process.
pub async fn waiters(url: &str, args: WaitersArgs) -> Result<(), Failure> {
    waiters::run(url, args).await
}

/// Runs a hidden `scale-client` process.
pub async fn client(url: &str, args: ClientArgs) -> Result<(), Failure> {
    client::run(url, args).await
}

/// Runs a hidden `scale-counted` process.
pub async fn counted(args: CountedArgs) -> Result<(), Failure> {
    counted::child(args).await
}

/// Whether part `part` runs (`--only`).
fn part(a: &ScaleArgs, part: &str) -> bool {
    a.only.as_deref().is_none_or(|only| only == part)
}

/// `redbell-bench scale`.
pub async fn run(url: &str, args: &ScaleArgs) -> Result<(), Failure> {
    let mut a = args.clone();
    if a.quick {
        a.waiters = vec![100, 1_000];
        a.names = vec![1, 100, 1_000];
        a.ops = 2_000;
        a.quiet = Duration::from_secs(2);
        a.samples = 20;
        a.rounds = 1;
        a.counted_ops = 2_000;
        a.clients = a.clients.min(20);
    }
    if let Some(json) = &a.render {
        let text = std::fs::read_to_string(json).map_err(|e| {
            Failure::new(EX_FAILURE, format!("cannot read {}: {e}", json.display()))
        })?;
        let report: page::Report = serde_json::from_str(&text)
            .map_err(|e| Failure::new(EX_FAILURE, format!("{}: {e}", json.display())))?;
        return write(&a, &report);
    }
    let mut srv = server::Server::connect(url).await?;
    let info = srv.info("server").await?;
    let version = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut parked_rows = Vec::new();
    let mut idle_cpu = 0.0;
    if part(&a, "parked") {
        eprintln!("scale: idle window ({:?})", a.quiet);
        let idle = parked::idle(url, &mut srv, a.quiet).await?;
        idle_cpu = idle.cpu_pct;
        for &n in &a.waiters {
            eprintln!("scale: {n} parked waiters");
            let row = parked::row(url, &mut srv, &run, n, a.samples, a.quiet, &idle).await?;
            eprintln!("scale:   {row:?}");
            parked_rows.push(row);
        }
    }
    let mut names_rows = Vec::new();
    if part(&a, "names") {
        for round in 0..a.rounds.max(1) {
            for contended in [false, true] {
                for &k in &a.names {
                    let ops = if contended { a.ops / 2 } else { a.ops };
                    let tag = format!("{run}r{round}");
                    let row = names::row(url, &mut srv, &tag, contended, k, ops).await?;
                    eprintln!("scale: round {round} {row:?}");
                    names_rows.push(row);
                }
            }
        }
    }
    let mut clients_row = None;
    if part(&a, "clients") && a.clients > 0 {
        eprintln!("scale: {} client processes", a.clients);
        let plan = clients::Plan {
            clients: a.clients,
            tasks: 3,
            names: a.clients,
            hold_ms: 200,
        };
        clients_row = Some(clients::row(url, &mut srv, &run, plan).await?);
    }
    let mut cluster_row = None;
    if part(&a, "cluster") && !a.no_cluster {
        let row = cluster::row(url, &mut srv, &run, a.ops, a.rounds).await?;
        eprintln!("scale: {row:?}");
        cluster_row = Some(row);
    }
    let mut counted_run = None;
    if part(&a, "counted") && !a.no_counted {
        // A failure here must not lose the parts measured before it.
        counted_run = counted::run_child(&a.names, a.counted_ops, a.no_cluster)
            .await
            .unwrap_or_else(|e| {
                eprintln!("scale: the counted part failed, left out of the report: {e}");
                None
            });
    }
    let dbsize = srv.dbsize().await?;
    let report = page::Report {
        date: page::today(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        redis_version: version,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
        quick: a.quick,
        command: page::command_line(),
        quiet_secs: a.quiet.as_secs_f64(),
        idle_cpu_pct: idle_cpu,
        parked: parked_rows,
        names: names_rows,
        clients: clients_row,
        cluster: cluster_row,
        counted: counted_run,
        dbsize_after: dbsize,
    };
    if a.report.is_some() {
        let _ = std::fs::create_dir_all("target/scale");
        if let Ok(json) = serde_json::to_string_pretty(&report) {
            let _ = std::fs::write("target/scale/results.json", json);
        }
    }
    write(&a, &report)
}

/// Prints the report, and writes it to `--report` if given.
fn write(a: &ScaleArgs, report: &page::Report) -> Result<(), Failure> {
    let md = page::render(report);
    println!("{md}");
    if let Some(path) = &a.report {
        std::fs::write(path, &md).map_err(|e| {
            Failure::new(EX_FAILURE, format!("cannot write {}: {e}", path.display()))
        })?;
        eprintln!("scale: wrote {}", path.display());
    }
    Ok(())
}
