//! Leases that outlive slow work, and work that stops when the lease is lost.
//!
//! 1. A job that takes 3 s runs under a 1 s lease: the client's renewal task
//!    keeps the lease alive (every ⅓ s here), so another client cannot get in.
//! 2. A job selects on `guard.lost()`: when the key is deleted behind its
//!    back (as an operator's `DEL`, or a failover losing it, would), the job
//!    stops within one renewal period instead of running on unprotected.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example watchdog`.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redbell::Client::builder(url.as_str())
        .default_lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(333))
        .connect()
        .await?;
    let rival = redbell::Client::connect(url.as_str()).await?;
    let name = format!("watchdog-example-{}", std::process::id());

    // 1. A long job under a short, renewed lease.
    let guard = client.mutex(&name).lock().await?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let taken = rival.mutex(&name).try_lock().await?.is_some();
        println!(
            "job 1: {:>4} ms in, lease held: {}, rival got in: {taken}",
            started.elapsed().as_millis(),
            !guard.is_lost()
        );
        assert!(!taken, "the renewed lease kept the rival out");
    }
    guard.unlock().await?;
    println!(
        "job 1: done after {:?} under a 1 s lease",
        started.elapsed()
    );

    // 2. A job that stops the moment its lease is lost.
    let guard = client.mutex(&name).lock().await?;
    let raw = redis::Client::open(url.as_str())?;
    let mut conn = raw.get_multiplexed_async_connection().await?;
    let sabotage = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let _: i64 = redis::cmd("DEL")
            .arg(format!("redbell:{{{name}}}"))
            .query_async(&mut conn)
            .await?;
        println!("job 2: the lock key was deleted from outside");
        Ok::<_, redis::RedisError>(Instant::now())
    });
    let work = async {
        for step in 1.. {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if step % 5 == 0 {
                println!("job 2: step {step}");
            }
        }
    };
    tokio::select! {
        _ = work => unreachable!("the work loop never ends"),
        _ = guard.lost() => {
            let deleted = sabotage.await??;
            println!("job 2: lease lost, work aborted {:?} after the key vanished", deleted.elapsed());
        }
    }
    assert!(guard.is_lost());
    // Unlocking a lost lock reports it: nothing of ours was deleted.
    assert!(matches!(guard.unlock().await, Err(redbell::Error::NotHeld)));
    // Let the releases still queued in the background finish first.
    client.shutdown().await?;
    Ok(())
}
