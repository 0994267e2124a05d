//! The hidden `scale-client` subcommand: one of the many client processes
//! of the many-clients row (`clients.rs`). Kept light: a current-thread
//! runtime (`main.rs`), one `redbell::Client`, a few tasks.
//!
//! Each task `t` works on one lock, `BASE-<(index × tasks + t) % names>`,
//! shared with tasks of other processes: it loops `lock()`, holds for
//! `--hold`, `unlock()`s, pauses a random 0..`--hold`, and notes the time
//! of every acquisition. So each lock has a holder and waiters parked on
//! it at any time, in different processes.
//!
//! Protocol with the bench, over stdin/stdout: connect, print `ready`; on
//! `go`, start the tasks; on `first T0` print `first <lock errors>
//! <unlock errors> <t_0> <t_1> ...`, `t_i` the first acquisition of task
//! `i` at or after `T0` (µs since the epoch), 0 if none yet; on `exit` (or
//! end of input) stop the tasks (each unlocks what it holds, a waiter
//! stops waiting) and exit.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

use super::server::now_us;
use crate::fail::{EX_FAILURE, Failure};

/// Options of the hidden `scale-client` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Lock names are `BASE-<index>`.
    #[arg(long)]
    pub base: String,
    /// This process's index among the clients.
    #[arg(long)]
    pub index: u32,
    /// Distinct lock names shared by all the clients.
    #[arg(long)]
    pub names: u32,
    /// Tasks in this process (each on its own lock).
    #[arg(long, default_value_t = 3)]
    pub tasks: u32,
    /// How long each acquisition is held, ms.
    #[arg(long, default_value_t = 200)]
    pub hold_ms: u64,
}

/// What the tasks share with the command loop.
#[derive(Default)]
struct Log {
    /// Acquisition times per task, µs since the epoch.
    acquired: Vec<Vec<u64>>,
    lock_errors: u64,
    unlock_errors: u64,
}

fn say(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(EX_FAILURE, format!("stdout: {e}")))
}

/// A small xorshift stream for the pauses (no cryptographic need).
struct Rand(u64);

impl Rand {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Runs a `scale-client` process.
pub async fn run(url: &str, args: ClientArgs) -> Result<(), Failure> {
    let client = redbell::Client::connect(url)
        .await
        .map_err(|e| Failure::lock(url, "cannot connect", &e))?;
    say("ready")?;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    match stdin.next_line().await {
        Ok(Some(line)) if line == "go" => {}
        _ => return Ok(()),
    }
    let log = Arc::new(Mutex::new(Log {
        acquired: vec![Vec::new(); args.tasks as usize],
        ..Log::default()
    }));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let lock = (args.index * args.tasks + t) % args.names.max(1);
        let mutex = client.mutex(&format!("{}-{lock}", args.base));
        let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        tasks.push(tokio::spawn(work(
            mutex,
            t as usize,
            Duration::from_millis(args.hold_ms),
            Rand(seed),
            log.clone(),
            stop_rx.clone(),
        )));
    }
    loop {
        let line = match stdin.next_line().await {
            Ok(Some(line)) => line,
            _ => break,
        };
        if let Some(t0) = line.strip_prefix("first ") {
            let t0: u64 = t0.trim().parse().unwrap_or(u64::MAX);
            let reply = {
                let log = log.lock().unwrap_or_else(|e| e.into_inner());
                let firsts: Vec<String> = log
                    .acquired
                    .iter()
                    .map(|times| times.iter().find(|&&t| t >= t0).copied().unwrap_or(0))
                    .map(|t| t.to_string())
                    .collect();
                format!(
                    "first {} {} {}",
                    log.lock_errors,
                    log.unlock_errors,
                    firsts.join(" ")
                )
            };
            say(&reply)?;
        } else if line == "exit" {
            break;
        }
    }
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    let _ = client.shutdown().await;
    std::process::exit(0);
}

/// One task's loop: lock, hold, unlock, pause, until stopped.
async fn work(
    mutex: redbell::Mutex,
    task: usize,
    hold: Duration,
    mut rand: Rand,
    log: Arc<Mutex<Log>>,
    mut stop: watch::Receiver<bool>,
) {
    let hold_ms = hold.as_millis() as u64;
    loop {
        let got = tokio::select! {
            got = mutex.lock() => got,
            _ = stop.wait_for(|s| *s) => return,
        };
        match got {
            Ok(guard) => {
                let at = now_us();
                log.lock().unwrap_or_else(|e| e.into_inner()).acquired[task].push(at);
                tokio::time::sleep(hold).await;
                if guard.unlock().await.is_err() {
                    log.lock().unwrap_or_else(|e| e.into_inner()).unlock_errors += 1;
                }
            }
            Err(_) => {
                log.lock().unwrap_or_else(|e| e.into_inner()).lock_errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if *stop.borrow() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(rand.below(hold_ms))).await;
    }
}
