//! Leader election: two candidates, one leader at a time, and an observer
//! that sees every change as it happens.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example leader`.

use std::time::Duration;

use tokio_stream::StreamExt;

#[tokio::main]
async fn main() -> Result<(), redbell::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let name = format!("leader-example-{}", std::process::id());
    // Two candidates, as two services would be.
    let a = redbell::Client::connect(url.as_str()).await?;
    let b = redbell::Client::connect(url.as_str()).await?;

    // The observer: first the current leader (none yet), then each change.
    let mut changes = a.election(&name).observe();
    if let Some(first) = changes.next().await {
        println!("observer: at first, {:?}", first?);
    }
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(change) = changes.next().await {
            let line = match change? {
                Some(leader) => format!("leader {:?} (term {})", leader.value, leader.term),
                None => "no leader".to_owned(),
            };
            println!("observer: {line}");
            seen.push(line);
            if seen.len() == 5 {
                break;
            }
        }
        Ok::<_, redbell::Error>(seen)
    });

    // A wins at once; B waits (event-driven) for A to step down.
    let leading = a.election(&name).campaign("a.example:8080").await?;
    println!("A: leading in term {}", leading.term());
    let candidate = b.election(&name);
    let b_campaign = tokio::spawn(async move { candidate.campaign("b.example:8080").await });

    // A leader says where to find it; observers are told at once.
    leading.proclaim("a.example:9090").await?;
    let current = b.election(&name).leader().await?;
    println!("B reads: {current:?}");

    // A works while it leads, stopping if the leadership is lost.
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(50)) => {}
        () = leading.lost() => eprintln!("A: lost the leadership"),
    }
    let a_term = leading.term();
    leading.resign().await?;

    let b_leads = b_campaign.await.expect("the campaign task")?;
    println!(
        "B: leading in term {} (greater than A's {a_term})",
        b_leads.term()
    );
    assert!(b_leads.term() > a_term);
    b_leads.resign().await?;

    let seen = tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("the observer saw every change")
        .expect("the observer task")?;
    assert_eq!(seen.len(), 5);
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(())
}
