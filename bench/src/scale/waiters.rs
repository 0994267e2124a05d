//! The hidden `scale-waiters` subcommand: the process whose parked waiters
//! the parked-at-scale row measures (its RSS is read from outside, by the
//! bench, from `/proc`).
//!
//! Protocol with the bench (`parked.rs`), over stdin/stdout: connect one
//! client, print `ready`; on `go`, spawn `--waiters` tasks (all at once,
//! or `--batch` at a time), task `i`
//! calling `lock()` on lock `i % --locks` (names `BASE-<index>`), and
//! print `spawned`; for each acquisition print `acq <index> <µs since the
//! epoch>` and keep the guard; on `exit` (or end of input) abort the
//! parked tasks first (else each unlock below would hand its lock to this
//! process's next waiter, whose guard would die with the process and hold
//! the lock for a lease), then unlock the guards held, and exit.

use std::io::Write;

use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::server::now_us;
use crate::fail::{EX_FAILURE, Failure};

/// Options of the hidden `scale-waiters` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitersArgs {
    /// Lock names are `BASE-<index>`.
    #[arg(long)]
    pub base: String,
    /// Number of locks.
    #[arg(long)]
    pub locks: u32,
    /// Number of waiting tasks (task `i` waits on lock `i % locks`).
    #[arg(long)]
    pub waiters: u32,
    /// Spawn the tasks this many at a time, 50 ms apart (0: all at once).
    #[arg(long, default_value_t = 0)]
    pub batch: u32,
}

fn say(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(EX_FAILURE, format!("stdout: {e}")))
}

/// Runs a `scale-waiters` process.
pub async fn run(url: &str, args: WaitersArgs) -> Result<(), Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect", &e))?;
    say("ready")?;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    match stdin.next_line().await {
        Ok(Some(line)) if line == "go" => {}
        _ => return Ok(()),
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let locks = args.locks.max(1);
    let mut parked = Vec::with_capacity(args.waiters as usize);
    for i in 0..args.waiters {
        if args.batch > 0 && i > 0 && i.is_multiple_of(args.batch) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let index = i % locks;
        let mutex = client.mutex(&format!("{}-{index}", args.base));
        let tx = tx.clone();
        parked.push(tokio::spawn(async move {
            let got = mutex.lock().await;
            let _ = tx.send((index, now_us(), got));
        }));
    }
    drop(tx);
    say("spawned")?;
    let mut held = Vec::new();
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((index, at, Ok(guard))) => {
                    held.push(guard);
                    say(&format!("acq {index} {at}"))?;
                }
                Some((index, _, Err(e))) => {
                    return Err(Failure::lock(url, &format!("lock {index}"), &e));
                }
                None => break,
            },
            line = stdin.next_line() => match line {
                Ok(Some(l)) if l != "exit" => {}
                _ => break,
            },
        }
    }
    for task in &parked {
        task.abort();
    }
    for task in parked {
        let _ = task.await;
    }
    rx.close();
    while let Some((_, _, got)) = rx.recv().await {
        if let Ok(guard) = got {
            held.push(guard);
        }
    }
    for guard in held {
        let _ = guard.unlock().await;
    }
    // The aborted waiters' queue members go with the next releases (no
    // receiver once this process is gone), as a crashed process's do.
    std::process::exit(0);
}
