//! A read-write lock: readers share it, a writer has it alone, and a writer
//! that waits holds new readers back so it cannot starve.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example rwlock`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), redbell::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redbell::Client::connect(url.as_str()).await?;
    let lock = client.rwlock(&format!("rwlock-example-{}", std::process::id()));

    // Readers at once: 0 = free, >0 = readers inside, -1 = a writer inside.
    let inside = Arc::new(AtomicI64::new(0));
    let most_readers = Arc::new(AtomicI64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for reader in 0..6 {
        let (lock, inside, most) = (lock.clone(), inside.clone(), most_readers.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = lock.read().await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now > 0, "a reader met a writer");
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
            }
            let _ = reader;
            Ok::<_, redbell::Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let asked = Instant::now();
    let writer = lock.write().await?;
    assert_eq!(inside.swap(-1, Ordering::SeqCst), 0, "the writer is alone");
    println!(
        "writer: in {:?} after asking, while 6 readers kept reading (fence {})",
        asked.elapsed(),
        writer.fence()
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    inside.store(0, Ordering::SeqCst);
    writer.unlock().await?;
    for task in tasks {
        task.await.expect("reader task panicked")?;
    }
    println!(
        "readers: up to {} inside together; all done in {:?}",
        most_readers.load(Ordering::SeqCst),
        started.elapsed()
    );
    // Let the releases still queued in the background finish first.
    client.shutdown().await?;
    Ok(())
}
