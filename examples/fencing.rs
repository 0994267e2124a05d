//! Fencing tokens: a storage that remembers the highest fence it has seen
//! rejects a holder whose lease expired while it was paused.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example fencing`.

use std::time::Duration;

/// A stand-in for the protected resource: it accepts a write only with a
/// fence at least as high as every fence it has seen.
#[derive(Default)]
struct Storage {
    highest_fence: u64,
    value: String,
}

impl Storage {
    fn write(&mut self, fence: u64, value: &str) -> Result<(), String> {
        if fence < self.highest_fence {
            return Err(format!("stale fence {fence} < {}", self.highest_fence));
        }
        self.highest_fence = fence;
        self.value = value.to_owned();
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), redbell::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redbell::Client::connect(url.as_str()).await?;
    let name = format!("fencing-example-{}", std::process::id());
    let mut storage = Storage::default();

    // Client A takes the lock with a short fixed lease, then "pauses" (a GC
    // pause, a slow disk) for longer than the lease.
    let a = client
        .mutex(&name)
        .with_lease(Duration::from_millis(200))
        .lock()
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("A: paused past its lease; is_lost() = {}", a.is_lost());

    // Meanwhile B got the lock and wrote.
    let b = client.mutex(&name).lock().await?;
    storage
        .write(b.fence(), "written by B")
        .expect("B's fence is current");
    println!("B: wrote with fence {}", b.fence());

    // A wakes up and tries to write: the storage rejects its stale fence.
    match storage.write(a.fence(), "written by A") {
        Ok(()) => unreachable!("a stale fence must be rejected"),
        Err(e) => println!("A: write rejected: {e}"),
    }
    assert_eq!(storage.value, "written by B");
    assert!(matches!(a.unlock().await, Err(redbell::Error::NotHeld)));
    b.unlock().await?;
    // Let the releases still queued in the background finish first.
    client.shutdown().await?;
    Ok(())
}
