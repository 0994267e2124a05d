//! Parts 2 and 4 counted rather than timed: the same workloads on servers
//! that run under Callgrind, which counts the instructions each server
//! executes and simulates its caches. On a shared machine a server's CPU
//! time per operation moves with what else runs (the same run of the same
//! code gave twice the µs from one minute to the next on this project's
//! 2-core VM); its instruction count does not, so it says whether the
//! work per operation grows with the names, and what a cluster shard adds
//! to one server's. The simulated last-level cache misses stand for what
//! a larger keyspace costs beyond the instructions.
//!
//! The parent (`scale`) runs the part as a child process,
//! `redbell-bench scale-counted`, with `REDBELL_REDIS_SERVER` pointing at
//! `scripts/redis/callgrind.sh` (every server the child starts, through
//! the test kit or the cluster script, runs under Callgrind) and
//! `REDBELL_CALLGRIND_DIR` at the directory its counts are dumped to. The
//! child prints its rows as JSON on stdout; the rows read the counts with
//! [`callgrind::take`](super::callgrind::take).

use std::process::Stdio;

use serde::{Deserialize, Serialize};

use super::callgrind::DIR_VAR;
use super::cluster::{self, ClusterRow};
use super::names::{self, NamesRow};
use super::server::Server;
use crate::fail::{EX_FAILURE, Failure};

/// The part's rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CountedRun {
    /// Part 2's workloads, one round, their `counted` set.
    pub names: Vec<NamesRow>,
    /// Part 4, one round, its shards' `counted` set.
    pub cluster: Option<ClusterRow>,
}

/// Options of the hidden `scale-counted` process.
#[derive(Debug, Clone, clap::Args)]
pub struct CountedArgs {
    /// Distinct lock names per row of part 2.
    #[arg(long, value_delimiter = ',')]
    pub names: Vec<u32>,
    /// Uncontended acquisitions per row (contended: half).
    #[arg(long)]
    pub ops: u64,
    /// Skip part 4.
    #[arg(long)]
    pub no_cluster: bool,
}

/// Runs the part as a child process with its servers under Callgrind:
/// `None` (and a line on stderr) when Valgrind is not installed.
pub async fn run_child(
    names: &[u32],
    ops: u64,
    no_cluster: bool,
) -> Result<Option<CountedRun>, Failure> {
    let installed = tokio::process::Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !installed {
        eprintln!("scale: valgrind is not installed; skipping the counted part");
        return Ok(None);
    }
    let root = redbell_testkit::repo_root();
    let dir = root.join("target/callgrind");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot make {}: {e}", dir.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find this program: {e}")))?;
    let list = names
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("scale-counted")
        .arg("--names")
        .arg(list)
        .arg("--ops")
        .arg(ops.to_string())
        .env("REDBELL_REDIS_REAL", redbell_testkit::redis_server_bin())
        .env(
            "REDBELL_REDIS_SERVER",
            root.join("scripts/redis/callgrind.sh"),
        )
        .env(DIR_VAR, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if no_cluster {
        cmd.arg("--no-cluster");
    }
    eprintln!("scale: the counted part (servers under Callgrind, {ops} operations per row)");
    // `spawn`, not `output`: the child's progress lines go to stderr.
    let out = cmd
        .spawn()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot run scale-counted: {e}")))?
        .wait_with_output()
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("scale-counted: {e}")))?;
    if !out.status.success() {
        return Err(Failure::new(EX_FAILURE, "scale-counted failed"));
    }
    serde_json::from_slice(&out.stdout)
        .map(Some)
        .map_err(|e| Failure::new(EX_FAILURE, format!("scale-counted printed no rows: {e}")))
}

/// The child: a counted server of its own, part 2's rows on it (one
/// round), then part 4 (one round); the rows as JSON on stdout.
pub async fn child(args: CountedArgs) -> Result<(), Failure> {
    let server = redbell_testkit::Server::start(redbell_testkit::ServerOptions::default())
        .await
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot start a counted server: {e}")))?;
    let url = server.url();
    let mut srv = Server::connect(&url).await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut rows = Vec::new();
    for contended in [false, true] {
        for &k in &args.names {
            let ops = if contended { args.ops / 2 } else { args.ops };
            let row = names::row(&url, &mut srv, &run, contended, k, ops).await?;
            eprintln!("scale-counted: {row:?}");
            rows.push(row);
        }
    }
    let cluster = if args.no_cluster {
        None
    } else {
        Some(cluster::row(&url, &mut srv, &run, args.ops, 1).await?)
    };
    let json = serde_json::to_string(&CountedRun {
        names: rows,
        cluster,
    })
    .map_err(|e| Failure::new(EX_FAILURE, format!("cannot write the rows: {e}")))?;
    println!("{json}");
    Ok(())
}
