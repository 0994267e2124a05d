//! The client's background worker: releases of dropped guards and of
//! acquires cancelled in flight, and wake-ups passed on by waiters that left.
//! `Drop` impls cannot await, so they hand the work to this task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::conn::Conn;
use crate::keys::LockKeys;
use crate::scripts;

/// Work for the background task.
pub(crate) enum Work {
    /// Release `token` (a dropped guard, or an acquire cancelled in flight).
    Release { keys: Arc<LockKeys>, token: String },
    /// Take `member` out of the lock's queue and pass any wake-up on (a
    /// waiter left without the lock, or a wake-up reached a gone waiter).
    PassOn { keys: Arc<LockKeys>, member: String },
}

/// Where work is sent. Unbounded so that `Drop` never blocks or loses a
/// release; the task drains it and ends when every sender is gone.
pub(crate) type Sender = mpsc::UnboundedSender<Work>;

/// Starts the task; it ends once every [`Sender`] is dropped and the queue
/// is drained.
pub(crate) fn start(conn: Conn) -> Sender {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(conn, rx));
    tx
}

/// Runs background work in order, retrying connection failures a few times.
async fn run(conn: Conn, mut rx: mpsc::UnboundedReceiver<Work>) {
    const BACKOFF: [u64; 3] = [0, 50, 250];
    while let Some(work) = rx.recv().await {
        for (attempt, delay) in BACKOFF.iter().enumerate() {
            if *delay > 0 {
                tokio::time::sleep(Duration::from_millis(*delay)).await;
            }
            let (keys, result) = match &work {
                Work::Release { keys, token } => {
                    (keys, scripts::release(&conn, keys, token).await.map(drop))
                }
                Work::PassOn { keys, member } => {
                    (keys, scripts::pass(&conn, keys, member).await.map(drop))
                }
            };
            match result {
                Ok(()) => break,
                Err(e) if e.is_retryable() && attempt + 1 < BACKOFF.len() => continue,
                Err(e) => {
                    tracing::warn!(lock = %keys.name, error = %e,
                        "background release or pass-on failed; leases and queue expiry bound the damage");
                    break;
                }
            }
        }
    }
}
