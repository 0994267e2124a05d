//! `redbell run` workers: a driver process (`soak-worker --kind run`) runs
//! `redbell run --ttl LEASE --kill-grace KILL_GRACE LOCK -- redbell-bench
//! soak-store ...` over and over; the command (the hidden `soak-store`
//! subcommand) reads `REDBELL_FENCE` and does the critical section a
//! library worker does: logs the acquisition, writes the fence to the store
//! on entry and on the way out, logs the hold. The driver logs the waits,
//! and a failed `redbell run` as an error `run:exit:CODE`.
//!
//! The command also appends to its lock's **unfenced log**
//! (`unfenced-LOCK.jsonl` beside the workers' logs), as a cron job writes
//! to a file that knows nothing of fences: a line when it starts (with its
//! pid and its `redbell run`'s, which the faults aimed at either read), a
//! line every [`RUN_LINE_EVERY`] while it runs, for [`RUN_HOLD`] (long
//! past the lease), and a line at its end. A SIGTERM ends it at once, with
//! an end line `sigterm` and exit code 143, as a command that does not
//! catch it would die. Two commands' lines that interleave are two
//! commands running at once (`checker/run.rs`).
//!
//! The driver runs in a process group of its own with its `redbell`: a
//! SIGKILL or SIGSTOP of the worker hits both; the command, in `redbell`'s
//! own group, runs on. So the plain SIGSTOP of a worker spares `run`
//! workers (`faults.rs`): it is `SigstopRun`, with its own judgement.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use super::checker::Event;
use super::plan::{KILL_GRACE, LEASE, RUN_HOLD, RUN_LINE_EVERY, WorkerKind};
use super::worker_io::{Log, Store, WorkerArgs, now_us, stopped};
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
    /// The lock's unfenced log.
    #[arg(long)]
    pub unfenced_log: PathBuf,
}

/// The unfenced log of `lock`'s commands, beside the worker's log `log`.
pub fn unfenced_log(log: &Path, lock: &str) -> PathBuf {
    log.with_file_name(format!("unfenced-{lock}.jsonl"))
}

/// `redbell-bench soak-store`: one critical section under `redbell run`.
pub async fn store(args: StoreArgs) -> Result<(), Failure> {
    let got = now_us();
    let mut unfenced = Log::open(&args.unfenced_log, &args.id, WorkerKind::Run, &args.lock)?;
    let pids = (std::process::id(), std::os::unix::process::parent_id());
    unfenced.put_run(Event::RunStart, args.seq, "start", Some(pids));
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Failure::new(EX_FAILURE, format!("soak-store: no SIGTERM handler: {e}")))?;
    let fence: u64 = std::env::var("REDBELL_FENCE")
        .ok()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| Failure::new(EX_FAILURE, "soak-store: no REDBELL_FENCE"))?;
    let mut log = Log::open(&args.log, &args.id, WorkerKind::Run, &args.lock)?;
    log.put(
        Event::Acquired,
        args.seq,
        Some(fence),
        (args.wait_us, Some(got)),
        None,
    );
    let mut store = Store::open(&args.store_url, &args.lock).await?;
    let first = store.write(fence, &mut log, args.seq).await;
    let end = tokio::time::Instant::now() + Duration::from_millis(args.hold_ms);
    let mut lines = tokio::time::interval(RUN_LINE_EVERY);
    lines.tick().await;
    let mut sigterm = false;
    while tokio::time::Instant::now() < end {
        tokio::select! {
            _ = lines.tick() => unfenced.put_run(Event::RunLine, args.seq, "running", None),
            _ = term.recv() => {
                sigterm = true;
                break;
            }
        }
    }
    let outcome = if sigterm || first != "accepted" {
        first
    } else {
        store.write(fence, &mut log, args.seq).await
    };
    let how = if sigterm { "sigterm" } else { "done" };
    unfenced.put_run(Event::RunEnd, args.seq, how, None);
    log.put(
        Event::Hold,
        args.seq,
        Some(fence),
        (got, Some(now_us())),
        Some(outcome),
    );
    if sigterm {
        return Err(Failure::new(128 + 15, "soak-store: SIGTERM"));
    }
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
    let target = args.target.cli_args(url);
    let ttl = format!("{}ms", LEASE.as_millis());
    let grace = format!("{}ms", KILL_GRACE.as_millis());
    let unfenced = unfenced_log(&args.log, &args.lock);
    let hold_ms = RUN_HOLD.as_millis().to_string();
    // `redbell run -v`'s own account (wait, hold and release times), for
    // whoever reads a failed run: a line naming each section first.
    let stderr_path = args.log.with_extension("redbell.log");
    let mut seq = 0;
    while !stopped(&args.stop_file) {
        seq += 1;
        let wait = now_us();
        log.put(Event::Wait, seq, None, (wait, None), None);
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "== {} seq {seq} wait_us {wait}", args.id)?;
                Ok(std::process::Stdio::from(f))
            })
            .unwrap_or_else(|_| std::process::Stdio::null());
        let status = tokio::process::Command::new(&redbell)
            .args(&target)
            .args([
                "run",
                "-v",
                "--ttl",
                &ttl,
                "--kill-grace",
                &grace,
                &args.lock,
                "--",
            ])
            .arg(&me)
            .arg("soak-store")
            .args(["--id", &args.id, "--lock", &args.lock])
            .arg("--log")
            .arg(&args.log)
            .args(["--seq", &seq.to_string(), "--wait-us", &wait.to_string()])
            .args(["--hold-ms", &hold_ms])
            .args(["--store-url", &store_url])
            .arg("--unfenced-log")
            .arg(&unfenced)
            .stdin(std::process::Stdio::null())
            .stderr(stderr)
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
