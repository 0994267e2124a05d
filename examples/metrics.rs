//! redbell's figures on a Prometheus endpoint (the `metrics` feature).
//!
//! Installs the Prometheus exporter on a loopback port, runs a contended
//! workload (8 tasks × 25 lock/unlock on one lock, and one `try_lock` that
//! finds it held), then scrapes its own endpoint over HTTP and checks that
//! the figures add up: acquired = released + held, wake-ups sent =
//! received + skipped (each wake-up that arrived for one of the client's
//! waiters found it or was passed on), a hand-off gap sample for the
//! hand-offs between the client's own tasks, and the counters match
//! `Client::stats()`; every redbell metric on the page has its `# HELP`
//! line, and `redbell_wait_seconds` is a histogram with the buckets set
//! below. Exits 1 if any check fails.
//!
//! **Buckets.** `metrics-exporter-prometheus` renders a histogram as a
//! summary (quantiles) unless given buckets. The example sets them for
//! `redbell_wait_seconds`: 1 ms to 30 s, covering an uncontended
//! acquisition (a round trip, under a millisecond on a LAN), hand-offs
//! (milliseconds) and waits for a long holder or an expired lease (seconds;
//! the default lease is 30 s). Pick your own to match your leases.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example metrics --features metrics
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The buckets of `redbell_wait_seconds`, in seconds (see above).
const WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0, 30.0,
];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr: SocketAddr = listener.local_addr()?;
    drop(listener); // the exporter binds it again
    // Installed before the first client connects: building a client
    // describes redbell's metrics to the recorder installed then.
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Full("redbell_wait_seconds".into()), &WAIT_BUCKETS)?
        .install()?;

    let client = redbell::Client::connect(url.as_str()).await?;
    let name = format!("metrics-example-{}", std::process::id());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mutex = client.mutex(&name);
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = mutex.lock().await?;
                tokio::time::sleep(Duration::from_micros(200)).await;
                guard.unlock().await?;
            }
            Ok::<_, redbell::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let held = client.mutex(&name).lock().await?;
    let busy = client.mutex(&name).try_lock().await?;
    assert!(busy.is_none());

    let page = scrape(addr).await?;
    let value = |metric: &str, labels: &[&str]| -> f64 {
        page.lines()
            .filter(|l| l.starts_with(metric) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            + 0.0 // an empty sum is -0
    };
    let acquired = value("redbell_acquisitions_total", &["outcome=\"acquired\""]);
    let busy = value("redbell_acquisitions_total", &["outcome=\"busy\""]);
    let released = value("redbell_releases_total", &[]);
    let guards = value("redbell_guards", &[]);
    let waits = value("redbell_wait_seconds_count", &[]);
    let sent = value("redbell_wakeups_sent_total", &[]);
    let received = value("redbell_wakeups_total", &["outcome=\"received\""]);
    let skipped = value("redbell_wakeups_total", &["outcome=\"skipped\""]);
    let gaps = value("redbell_handoff_gap_seconds_count", &[]);
    println!(
        "scraped http://{addr}/metrics: acquired {acquired}, busy {busy}, released {released}, \
         guards {guards}, wait samples {waits}, wake-ups sent {sent} = received {received} + \
         skipped {skipped}, hand-off gap samples {gaps}"
    );
    // Every redbell metric on the page (a `# TYPE` line) and those of them
    // without a `# HELP` line.
    let typed: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|m| m.starts_with("redbell_"))
        .collect();
    let undescribed: Vec<&str> = typed
        .iter()
        .copied()
        .filter(|m| !page.lines().any(|l| l.starts_with(&format!("# HELP {m} "))))
        .collect();
    println!("redbell metrics on the page: {typed:?}; without # HELP: {undescribed:?}");
    let wait_buckets = page
        .lines()
        .filter(|l| l.starts_with("redbell_wait_seconds_bucket"))
        .count();
    let stats = client.stats();
    let checks = [
        (
            "every redbell metric has a # HELP line",
            typed.len() >= 8 && undescribed.is_empty(),
        ),
        (
            "redbell_wait_seconds is a histogram with the example's buckets",
            page.contains("# TYPE redbell_wait_seconds histogram")
                && wait_buckets == WAIT_BUCKETS.len() + 1,
        ),
        ("acquired = released + held", acquired == released + guards),
        (
            "the scrape matches Client::stats",
            acquired == stats.acquired as f64,
        ),
        ("one try_lock found it held", busy == 1.0),
        ("one wait sample per acquisition", waits == acquired),
        (
            "wake-ups sent = received + skipped",
            sent == received + skipped && sent == stats.wakeups_sent as f64,
        ),
        (
            "hand-offs between the client's own tasks were timed",
            gaps > 0.0 && gaps == stats.local_handoffs as f64,
        ),
    ];
    held.unlock().await?;

    // Lock names as a label, for a client that opts in; the first client's
    // series stay without it.
    let named = redbell::Client::builder(url.as_str())
        .metrics_lock_names(true)
        .connect()
        .await?;
    let labelled = format!("{name}-labelled");
    named.mutex(&labelled).lock().await?.unlock().await?;
    let page = scrape(addr).await?;
    let lock_label = |n: &str| format!("lock=\"{n}\"");
    let named_acquired = page
        .lines()
        .filter(|l| l.starts_with("redbell_acquisitions_total"))
        .filter(|l| l.contains(&lock_label(&labelled)) && l.contains("outcome=\"acquired\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    let unlabelled = !page.contains(&lock_label(&name));
    named.shutdown().await?;
    let checks = checks.into_iter().chain([
        (
            "an opted-in client labels its series with the lock name",
            named_acquired == 1.0,
        ),
        ("a default client does not", unlabelled),
    ]);

    client.shutdown().await?;
    let mut ok = true;
    for (what, holds) in checks {
        println!("{} {what}", if holds { "ok  " } else { "FAIL" });
        ok &= holds;
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

/// `GET /metrics` on the exporter, the body as text.
async fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response
        .split_once("\r\n\r\n")
        .map_or(response.clone(), |(_, body)| body.to_owned()))
}
