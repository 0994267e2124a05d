//! The frozen-host fault (`frozen_host.rs`) on an election: standby
//! replicas campaign (`Election::campaign` is `Mutex::lock`), three of them
//! on a host that freezes (a paused VM or container). When the leader
//! resigns, the live standby must be elected within 1 s of the release
//! (asserted with slack for a loaded machine), not after the leader's
//! lease (12 s, renewed every 4 s). With standbys to the next two only, it
//! was elected 10.5 s after the resignation.

use std::time::Duration;

use redbell::Client;
use redbell_integration_tests::{raw, redis_url, signal, unique, wait_for_members, waiters_key};
use tokio::time::{Instant, sleep, timeout};

const LEASE: Duration = Duration::from_secs(12);
const BOUND: Duration = Duration::from_millis(2500);

async fn lease_client(url: &str) -> Client {
    Client::builder(url)
        .default_lease(LEASE)
        .renew_every(LEASE / 3)
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_frozen_campaigners_ahead_of_a_live_one() {
    let url = redis_url();
    let name = unique("elect-host");
    let conn = raw(&url).await;
    let leader_client = lease_client(&url).await;
    let leadership = leader_client
        .election(&name)
        .campaign("leader")
        .await
        .expect("leader");
    let bin = env!("CARGO_BIN_EXE_campaigner").as_ref();
    let lease_ms = LEASE.as_millis().to_string();
    let mut frozen = Vec::new();
    for i in 0..3 {
        let id = format!("frozen-{i}");
        // Its stdin stays open: a campaigner exits at the end of stdin.
        let p = Campaigner::start(bin, &[&name, &id, &lease_ms]);
        wait_for_members(&conn, &waiters_key(&name), i + 1, Duration::from_millis(10)).await;
        frozen.push(p);
    }
    // Let each subscribe to its wake channel (PUBLISH then counts it).
    sleep(Duration::from_millis(500)).await;
    for p in &frozen {
        signal(p.0.id(), "STOP");
    }
    // Let the leader renew, so the live standby queues behind them.
    sleep(LEASE / 3 + Duration::from_millis(500)).await;
    let live_client = lease_client(&url).await;
    let live = tokio::spawn(async move {
        let e = live_client.election(&name).campaign("live").await;
        (Instant::now(), e.map(|l| l.term()))
    });
    wait_for_members(
        &conn,
        &waiters_key(&leadership_name(&leadership)),
        4,
        Duration::from_millis(10),
    )
    .await;
    sleep(Duration::from_millis(300)).await;
    let q: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(waiters_key(&leadership_name(&leadership)))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    eprintln!("queue before the resignation: {q:?}");
    let resigned = Instant::now();
    leadership.resign().await.expect("resign");
    let (at, term) = timeout(LEASE + Duration::from_secs(10), live)
        .await
        .expect("the live standby was never elected")
        .unwrap();
    let waited = at - resigned;
    eprintln!("the live standby was elected {waited:?} after the resignation (term {term:?})");
    drop(frozen);
    assert!(
        waited < BOUND,
        "a live standby behind three frozen ones was elected {waited:?} after the leader \
         resigned (bound 1 s, slack {BOUND:?})"
    );
}

/// A campaigner process with its stdin held open; killed on drop.
struct Campaigner(std::process::Child);

impl Campaigner {
    fn start(bin: &std::path::Path, args: &[&str]) -> Campaigner {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start campaigner");
        let out = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(out).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l == "ready" => break,
                Some(Ok(_)) => {}
                _ => panic!("the campaigner never said ready"),
            }
        }
        // Keep reading (and dropping) its output, so it never blocks.
        std::thread::spawn(move || for _ in lines {});
        Campaigner(child)
    }
}

impl Drop for Campaigner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn leadership_name(l: &redbell::Leadership) -> String {
    l.name().to_owned()
}
