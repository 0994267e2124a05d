//! A separate process using a semaphore, for tests/semaphore.rs.
//!
//! Usage, with `REDIS_URL` set:
//!
//! - `sem_worker loop NAME PERMITS ITERATIONS`: acquires a permit
//!   ITERATIONS times; inside each hold it INCRs the gauge
//!   `redbell-test:{NAME}:gauge`, checks it is at most PERMITS, sleeps a
//!   moment, DECRs it and releases. Prints `max=<highest gauge seen>
//!   over=<holds that saw more than PERMITS> done=<acquisitions>`.
//! - `sem_worker hold NAME PERMITS LEASE_MS`: acquires one permit with a
//!   renewed lease of LEASE_MS (renewed every third), prints `held <token>`
//!   and holds it until killed.

use std::io::Write;
use std::time::Duration;

use rand::Rng;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, name, permits, n] = args.as_slice() else {
        return Err("usage: sem_worker loop|hold NAME PERMITS ITERATIONS|LEASE_MS".into());
    };
    let permits: u32 = permits.parse()?;
    let n: u64 = n.parse()?;
    let url = std::env::var("REDIS_URL")?;
    match mode.as_str() {
        "loop" => {
            let client = redbell::Client::connect(url.as_str()).await?;
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let gauge = format!("redbell-test:{{{name}}}:gauge");
            let semaphore = client.semaphore(name, permits);
            let (mut max, mut over) = (0, 0);
            for _ in 0..n {
                let permit = semaphore.acquire().await?;
                let now: i64 = redis::cmd("INCR")
                    .arg(&gauge)
                    .query_async(&mut conn)
                    .await?;
                max = max.max(now);
                if now > i64::from(permits) {
                    over += 1;
                }
                let pause = rand::rng().random_range(0..3);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let _: i64 = redis::cmd("DECR")
                    .arg(&gauge)
                    .query_async(&mut conn)
                    .await?;
                permit.unlock().await?;
            }
            println!("max={max} over={over} done={n}");
            client.shutdown().await?;
        }
        "hold" => {
            let lease = Duration::from_millis(n);
            let client = redbell::Client::builder(url.as_str())
                .default_lease(lease)
                .renew_every(lease / 3)
                .connect()
                .await?;
            let permit = client.semaphore(name, permits).acquire().await?;
            println!("held {}", permit.token());
            std::io::stdout().flush()?;
            std::future::pending::<()>().await;
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    }
    Ok(())
}
