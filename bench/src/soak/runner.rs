//! `redbell run` workers: a driver process (`soak-worker --kind run`) runs
//! `redbell run --ttl LEASE LOCK -- redbell-bench soak-store ...` over and
//! over; the command (the hidden `soak-store` subcommand) reads
//! `REDBELL_FENCE` and does the critical section a library worker does:
//! logs the acquisition, writes the fence to the store on entry and on the
//! way out, logs the hold. The driver logs the waits, and a failed
//! `redbell run` as an error `run:exit:CODE`.
//!
//! The driver runs in a process group of its own with its `redbell`: a
//! SIGKILL or SIGSTOP of the worker hits both (the command, in `redbell`'s
//! own group, runs its few ms to the end).

use std::path::PathBuf;
use std::time::Duration;

use super::checker::Event;
use super::plan::{LEASE, WorkerKind};
use super::worker::{Log, Store, WorkerArgs, now_us, stopped};
use crate::fail::{EX_FAILURE, Failure};

/// Options of the hidden `soak-store` subcommand (the command `redbell
/// run` runs; its fence comes from `REDBELL_FENCE`).
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// The worker's id.
    #[arg(long)]
    pub id: String,
    /// The lock name.
    #[arg(long)]
    pub lock: String,
    /// The worker's log.
    #[arg(long)]
    pub log: PathBuf,
    /// The critical section's sequence number.
    #[arg(long)]
    pub seq: u64,
    /// When the driver started waiting (µs).
    #[arg(long)]
    pub wait_us: u64,
    /// How long to hold, in ms.
    #[arg(long)]
    pub hold_ms: u64,
    /// The store's server.
    #[arg(long)]
    pub store_url: String,
}

/// `redbell-bench soak-store`: one critical section under `redbell run`.
pub async fn store(args: StoreArgs) -> Result<(), Failure> {
    let got = now_us();
    let fence: u64 = std::env::var("REDBELL_FENCE")
        .ok()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| Failure::new(EX_FAILURE, "soak-store: no REDBELL_FENCE"))?;
    let mut log = Log::open(&args.log, &args.id, WorkerKind::Run, &args.lock)?;
    let mut store = Store::open(&args.store_url, &args.lock).await?;
    let hold = Duration::from_millis(args.hold_ms);
    Store::section(
        Some(&mut store),
        &mut log,
        args.seq,
        (args.wait_us, got, fence),
        hold,
    )
    .await;
    Ok(())
}

/// The `redbell` binary beside this one.
fn redbell_exe() -> Result<PathBuf, Failure> {
    let me = std::env::current_exe()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
    let exe = me.with_file_name("redbell");
    if exe.exists() {
        Ok(exe)
    } else {
        Err(Failure::new(
            EX_FAILURE,
            format!(
                "{} not found: build the CLI too (cargo build -p redbell-cli)",
                exe.display()
            ),
        ))
    }
}

/// The driver of a `redbell run` worker, until the stop file appears.
pub async fn drive(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    let redbell = redbell_exe()?;
    let me = std::env::current_exe()
        .map_err(|e| Failure::new(EX_FAILURE, format!("cannot find my own executable: {e}")))?;
    let mut log = Log::open(&args.log, &args.id, args.kind, &args.lock)?;
    let store_url = args.target.store_url(url).to_owned();
    let ttl = format!("{}ms", LEASE.as_millis());
    let mut seq = 0;
    while !stopped(&args.stop_file) {
        seq += 1;
        let wait = now_us();
        log.put(Event::Wait, seq, None, (wait, None), None);
        let status = tokio::process::Command::new(&redbell)
            .arg("--url")
            .arg(url)
            .args([
                "run",
                "--ttl",
                &ttl,
                "--kill-grace",
                "500ms",
                &args.lock,
                "--",
            ])
            .arg(&me)
            .arg("soak-store")
            .args(["--id", &args.id, "--lock", &args.lock])
            .arg("--log")
            .arg(&args.log)
            .args(["--seq", &seq.to_string(), "--wait-us", &wait.to_string()])
            .args(["--hold-ms", &args.hold_ms.to_string()])
            .args(["--store-url", &store_url])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        let code = match status {
            Ok(s) if s.success() => None,
            Ok(s) => Some(
                s.code()
                    .map_or_else(|| "signal".to_owned(), |c| c.to_string()),
            ),
            Err(e) => Some(format!("spawn:{}", e.kind())),
        };
        if let Some(code) = code {
            let t = now_us();
            log.put(
                Event::Error,
                seq,
                None,
                (wait, Some(t)),
                Some(format!("run:exit:{code}")),
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
