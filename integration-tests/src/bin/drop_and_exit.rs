//! A program that takes a lock, drops its guard and returns from `main`
//! at once, with or without `Client::shutdown` first: the shutdown tests
//! check whether the dropped guard's release reached Redis.
//!
//! Usage: `drop_and_exit NAME [--shutdown]`, with `REDIS_URL` set.
//! Runs on a current-thread runtime, so nothing runs in the background
//! between the drop and the end of `main` unless `main` waits for it.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .ok_or("usage: drop_and_exit NAME [--shutdown]")?;
    let shutdown = match args.next().as_deref() {
        None => false,
        Some("--shutdown") => true,
        Some(other) => return Err(format!("unknown argument {other:?}").into()),
    };
    let url = std::env::var("REDIS_URL")?;
    let client = redbell::Client::connect(url.as_str()).await?;
    let guard = client.mutex(&name).lock().await?;
    println!("locked {name} (fence {})", guard.fence());
    drop(guard);
    if shutdown {
        client.shutdown().await?;
        println!("shut down");
    }
    Ok(())
}
