//! The hidden `scale-waiters` subcommand: the process whose parked waiters
//! the parked-at-scale row measures (its RSS is read from outside, by the
//! bench, from `/proc`).
//!
//! Protocol with the bench (`parked.rs`), over stdin/stdout: connect one
//! client, print `ready`; on `go`, spawn `--waiters` tasks (all at once,
//! or `--batch` at a time), task `i`
//! calling `lock()` on lock `i % --locks` (names `BASE-<index>`), and
//! print `spawned` and `sizes <lock() future> <task future> <Mutex>`
//! (bytes); for each acquisition print `acq <index> <µs since the epoch>
//! <the times of the last polls of its lock()>` and keep the guard; on
//! `heap` (before `go`, or parked) print the live heap (`crate::heap`); on `exit` (or end of input) abort the
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

/// Poll times kept per waiter.
const POLLS: usize = 8;

fn say(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(EX_FAILURE, format!("stdout: {e}")))
}

/// Runs a `scale-waiters` process.
pub async fn run(url: &str, args: WaitersArgs) -> Result<(), Failure> {
    crate::heap::enable();
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect", &e))?;
    say("ready")?;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        match stdin.next_line().await {
            Ok(Some(line)) if line == "go" => break,
            Ok(Some(line)) if line == "heap" => say(&crate::heap::snapshot().line())?,
            _ => return Ok(()),
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let locks = args.locks.max(1);
    let mut parked = Vec::with_capacity(args.waiters as usize);
    let (mut lock_future, mut task_future) = (0, 0);
    for i in 0..args.waiters {
        if args.batch > 0 && i > 0 && i.is_multiple_of(args.batch) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let index = i % locks;
        let mutex = client.mutex(&format!("{}-{index}", args.base));
        let tx = tx.clone();
        if i == 0 {
            lock_future = std::mem::size_of_val(&mutex.lock());
        }
        let task = async move {
            // The times of the last polls of `lock()`: the first after a
            // release is when the woken task ran (the bench splits the
            // wake-up there).
            let mut polls = [0u64; POLLS];
            let mut n = 0;
            let mut lock = std::pin::pin!(mutex.lock());
            let got = std::future::poll_fn(|cx| {
                polls[n % POLLS] = now_us();
                n += 1;
                lock.as_mut().poll(cx)
            })
            .await;
            let _ = tx.send((index, now_us(), polls, got));
        };
        task_future = std::mem::size_of_val(&task);
        parked.push(tokio::spawn(task));
    }
    drop(tx);
    say("spawned")?;
    say(&format!(
        "sizes {lock_future} {task_future} {}",
        std::mem::size_of::<redbell::Mutex>()
    ))?;
    let mut held = Vec::new();
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((index, at, polls, Ok(guard))) => {
                    held.push(guard);
                    let polls: Vec<String> = polls.iter().map(u64::to_string).collect();
                    say(&format!("acq {index} {at} {}", polls.join(" ")))?;
                }
                Some((index, _, _, Err(e))) => {
                    return Err(Failure::lock(url, &format!("lock {index}"), &e));
                }
                None => break,
            },
            line = stdin.next_line() => match line {
                Ok(Some(l)) if l == "heap" => say(&crate::heap::snapshot().line())?,
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
    while let Some((_, _, _, got)) = rx.recv().await {
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
