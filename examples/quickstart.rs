//! Two tasks contend for one lock; the second is woken the moment the first
//! unlocks. Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart`.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), redbell::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redbell::Client::connect(url.as_str()).await?;
    let name = format!("quickstart-{}", std::process::id());

    let guard = client.mutex(&name).lock().await?;
    println!(
        "holder:  acquired {} with fence {}",
        guard.name(),
        guard.fence()
    );

    let waiter = {
        let mutex = client.mutex(&name);
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = mutex.lock().await?;
            println!(
                "waiter:  acquired after {:?}, fence {}",
                started.elapsed(),
                guard.fence()
            );
            guard.unlock().await
        })
    };

    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    guard.unlock().await?;
    println!("holder:  unlocked");
    waiter.await.expect("waiter task panicked")?;
    println!("hand-off within {:?} of the unlock", released.elapsed());
    // Let the releases still queued in the background finish first.
    client.shutdown().await?;
    Ok(())
}
