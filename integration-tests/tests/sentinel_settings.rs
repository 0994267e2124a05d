//! Sentinel with the primary's own connection settings, and a check of what
//! the sentinels say:
//!
//! - on `scripts/redis/sentinel.sh --requirepass PW --sentinel-pass SPW`
//!   (servers and sentinels with passwords of their own), a client given
//!   the primary's password and a database number locks, unlocks and hands
//!   off, in that database, before and after a failover (the primary
//!   SIGKILLed): the new primary is opened with the same settings;
//! - a stale sentinel, listed first, that names the replica as the master
//!   is not believed: the node is asked `ROLE`, answers `slave`, and the
//!   next sentinel is asked.

use std::time::Duration;

use redbell::{Client, Error};
use redbell_integration_tests::sentinel::{MASTER, Topology, free_layout_base, works_again};
use redbell_integration_tests::{
    POLL, eventually_every, get, hand_off, lock_key, promptly, raw, unique,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const PW: &str = "primary-secret";
const SPW: &str = "sentinel-secret";
const DB: i64 = 2;

fn assert_woken(what: &str, handoff: Duration) {
    eprintln!("{what}: hand-off {handoff:?}");
    assert!(
        handoff < Duration::from_secs(1),
        "{what}: the waiter got the lock {handoff:?} after the release (not woken)"
    );
}

/// `SENTINEL get-master-addr-by-name` on a password-protected sentinel.
async fn named_port(sentinel_url: &str) -> Option<u16> {
    let client = redis::Client::open(sentinel_url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .query_async(&mut conn)
        .await
        .ok()?;
    addr.map(|(_, port)| port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_credentials_and_db_are_kept_across_a_failover() {
    let base = free_layout_base();
    let (topo, urls) =
        Topology::start_at(base, &["--requirepass", PW, "--sentinel-pass", SPW]).await;
    let sentinels = &urls;
    // The sentinels' password is not the primary's: without the primary's
    // own, the client cannot use the primary it found.
    let without = promptly("connect without the primary's password", async {
        Client::sentinel(sentinels, MASTER).await
    })
    .await;
    assert!(
        matches!(&without, Err(Error::Redis(e)) if e.code() == Some("NOAUTH")
            || e.kind() == redis::ErrorKind::AuthenticationFailed),
        "connected to a password-protected primary without its password: {without:?}"
    );

    let connect = || {
        Client::sentinel_builder(sentinels, MASTER)
            .primary_password(PW)
            .primary_db(DB)
            .connect()
    };
    let a = promptly("connect a", connect()).await.expect("connect a");
    let b = promptly("connect b", connect()).await.expect("connect b");
    let in_db = |port: u16| format!("redis://:{PW}@127.0.0.1:{port}/{DB}");

    let name = unique("auth");
    let guard = a.mutex(&name).lock().await.expect("lock on the primary");
    let mut primary = raw(&in_db(base)).await;
    assert_eq!(
        get(&mut primary, &lock_key(&name)).await.as_deref(),
        Some(guard.token()),
        "the lock is not in db {DB} of the primary"
    );
    guard.unlock().await.expect("unlock");
    assert_woken("before the failover", hand_off(&a, &b).await);

    topo.kill_primary().await;
    let replica = base + 1;
    let url = urls[0].clone();
    let failed_over = eventually_every(Duration::from_secs(30), POLL, || {
        let url = url.clone();
        async move { named_port(&url).await == Some(replica) }
    })
    .await;
    assert!(failed_over, "no failover to the replica within 30 s");

    let after = unique("auth-after");
    // Each client follows the failover on its first failed call.
    for (who, client) in [("a", &a), ("b", &b)] {
        let failed = works_again(client, Duration::from_secs(20)).await;
        eprintln!("{who} locked on the new primary after {failed} retryable errors");
    }
    let g = a
        .mutex(&after)
        .lock()
        .await
        .expect("lock on the new primary");
    let mut new_primary = raw(&in_db(replica)).await;
    assert_eq!(
        get(&mut new_primary, &lock_key(&after)).await.as_deref(),
        Some(g.token()),
        "the lock is not in db {DB} of the new primary"
    );
    g.unlock().await.expect("unlock on the new primary");
    assert_woken("after the failover", hand_off(&a, &b).await);
}

/// A fake sentinel that names `port` as the master to whoever asks: enough
/// RESP for redis-rs's connection setup (`CLIENT SETINFO`, `PING`) and
/// `SENTINEL get-master-addr-by-name`.
async fn stale_sentinel(port: u16) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                while let Some(command) = read_command(&mut read).await {
                    let reply = match command.first().map(|c| c.to_ascii_uppercase()) {
                        Some(c) if c == "SENTINEL" => {
                            let port = port.to_string();
                            format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
                        }
                        Some(c) if c == "PING" => "+PONG\r\n".to_owned(),
                        Some(c) if c == "CLIENT" => "+OK\r\n".to_owned(),
                        _ => "-ERR unknown command\r\n".to_owned(),
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// One RESP array of bulk strings; `None` at the end of the stream.
async fn read_command(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<String>> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        read.read_line(&mut line).await.ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        read.read_exact(&mut buf).await.ok()?;
        buf.truncate(len);
        args.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Some(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_names_a_replica_is_not_believed() {
    let topo = Topology::start().await;
    let stale = stale_sentinel(topo.replica_port()).await;
    let mut urls = vec![stale];
    urls.extend(topo.sentinel_urls());
    let client = promptly("connect", Client::sentinel(&urls, MASTER))
        .await
        .expect("connect past the stale sentinel");
    let name = unique("role");
    let guard = promptly("lock", client.mutex(&name).lock())
        .await
        .expect("a lock on the primary, not on the replica the stale sentinel named");
    let mut primary = raw(&topo.primary_url()).await;
    assert_eq!(
        get(&mut primary, &lock_key(&name)).await.as_deref(),
        Some(guard.token())
    );
    guard.unlock().await.expect("unlock");
    let other = Client::sentinel(&urls, MASTER)
        .await
        .expect("a second client");
    assert_woken("past a stale sentinel", hand_off(&client, &other).await);
}
