//! The proxy's modes, on raw TCP connections.

use super::*;
use tokio::time::timeout;

/// Nothing arrives on `conn` within 200 ms (no byte, no close).
async fn silent(conn: &mut TcpStream, what: &str) {
    let mut b = [0u8; 1];
    let r = timeout(Duration::from_millis(200), conn.read(&mut b)).await;
    assert!(r.is_err(), "{what}: got {r:?}");
}

/// The next byte on `conn`.
async fn byte(conn: &mut TcpStream) -> u8 {
    let mut b = [0u8; 1];
    timeout(Duration::from_secs(5), conn.read_exact(&mut b))
        .await
        .expect("a byte in time")
        .expect("a byte");
    b[0]
}

/// `conn` is closed (reads end) within 5 s.
async fn closed(conn: &mut TcpStream) {
    let mut b = [0u8; 1];
    let n = timeout(Duration::from_secs(5), conn.read(&mut b))
        .await
        .expect("closed in time");
    assert!(matches!(n, Ok(0) | Err(_)), "read {n:?}");
}

#[tokio::test]
async fn pause_partition_resume_and_cut() {
    let upstream = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let proxy = Proxy::start(0, upstream.local_addr().unwrap().port())
        .await
        .unwrap();
    let mut client = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (mut server, _) = upstream.accept().await.unwrap();
    assert_eq!(proxy.connections(), 1);

    client.write_all(b"1").await.unwrap();
    assert_eq!(byte(&mut server).await, b'1');
    server.write_all(b"2").await.unwrap();
    assert_eq!(byte(&mut client).await, b'2');

    // Paused: the client's bytes go up, the server's are held back.
    proxy.pause().await;
    server.write_all(b"3").await.unwrap();
    client.write_all(b"4").await.unwrap();
    assert_eq!(byte(&mut server).await, b'4');
    silent(&mut client, "paused").await;
    proxy.resume();
    assert_eq!(byte(&mut client).await, b'3');

    // Partitioned: nothing either way, not even the server's close.
    proxy.partition().await;
    client.write_all(b"5").await.unwrap();
    silent(&mut server, "partitioned, up").await;
    proxy.resume();
    assert_eq!(byte(&mut server).await, b'5');
    proxy.partition().await;
    server.write_all(b"6").await.unwrap();
    drop(server);
    silent(&mut client, "partitioned, the server gone").await;
    assert_eq!(proxy.connections(), 1, "the half-open connection stays");
    proxy.resume();
    assert_eq!(byte(&mut client).await, b'6');
    closed(&mut client).await;

    // Cut: connections closed, new ones refused.
    let mut client = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (_server, _) = upstream.accept().await.unwrap();
    proxy.cut().await.unwrap();
    closed(&mut client).await;
    assert_eq!(proxy.connections(), 0);
    assert!(
        TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .is_err(),
        "a cut proxy accepted a connection"
    );
}

#[tokio::test]
async fn blackhole_closes_upstream_and_swallows_the_client() {
    let upstream = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let proxy = Proxy::start(0, upstream.local_addr().unwrap().port())
        .await
        .unwrap();
    let mut client = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (mut server, _) = upstream.accept().await.unwrap();
    client.write_all(b"1").await.unwrap();
    assert_eq!(byte(&mut server).await, b'1');

    assert_eq!(proxy.blackhole().await, 1);
    // The server's side is closed; the client hears nothing, not even
    // a close, and may go on writing.
    closed(&mut server).await;
    server.write_all(b"2").await.ok();
    for _ in 0..3 {
        client.write_all(&[b'3'; 4096]).await.unwrap();
    }
    silent(&mut client, "black-holed").await;
    assert_eq!(proxy.connections(), 1, "the client's socket stays open");

    // A new connection is relayed.
    let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (mut server, _) = upstream.accept().await.unwrap();
    fresh.write_all(b"4").await.unwrap();
    assert_eq!(byte(&mut server).await, b'4');
    server.write_all(b"5").await.unwrap();
    assert_eq!(byte(&mut fresh).await, b'5');
    silent(&mut client, "still black-holed").await;

    proxy.cut().await.unwrap();
    closed(&mut client).await;
}

/// A proxy in front of a fresh listener, one client connected through it:
/// (listener, proxy, client, the client's server side).
async fn relayed() -> (TcpListener, Proxy, TcpStream, TcpStream) {
    let upstream = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let proxy = Proxy::start(0, upstream.local_addr().unwrap().port())
        .await
        .unwrap();
    let client = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (server, _) = upstream.accept().await.unwrap();
    (upstream, proxy, client, server)
}

#[tokio::test]
async fn drop_all_discards_both_ways_until_resumed() {
    let (_upstream, proxy, mut client, mut server) = relayed().await;
    proxy.drop_all().await;
    client.write_all(b"1").await.unwrap();
    server.write_all(b"2").await.unwrap();
    silent(&mut server, "dropping, up").await;
    silent(&mut client, "dropping, down").await;
    assert_eq!(proxy.connections(), 1, "the connection stays open");
    proxy.resume();
    // What was dropped is gone; what follows goes through.
    client.write_all(b"3").await.unwrap();
    assert_eq!(byte(&mut server).await, b'3');
    server.write_all(b"4").await.unwrap();
    assert_eq!(byte(&mut client).await, b'4');
}

#[tokio::test]
async fn half_open_swallows_one_connection_only() {
    let (upstream, proxy, mut first, mut first_server) = relayed().await;
    let mut second = TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let (mut second_server, _) = upstream.accept().await.unwrap();
    assert_eq!(proxy.accepted(), 2);

    proxy.half_open(1).await;
    closed(&mut second_server).await;
    second.write_all(b"1").await.unwrap();
    silent(&mut second, "half-open").await;
    // The other connection is untouched.
    first.write_all(b"2").await.unwrap();
    assert_eq!(byte(&mut first_server).await, b'2');
    first_server.write_all(b"3").await.unwrap();
    assert_eq!(byte(&mut first).await, b'3');
    assert_eq!(proxy.connections(), 2, "the half-open socket stays open");
}

#[tokio::test]
async fn lag_replies_delays_the_upstream_only() {
    let (_upstream, proxy, mut client, mut server) = relayed().await;
    proxy.lag_replies(Duration::from_millis(300));
    let sent = tokio::time::Instant::now();
    client.write_all(b"1").await.unwrap();
    assert_eq!(byte(&mut server).await, b'1');
    server.write_all(b"2").await.unwrap();
    silent(&mut client, "lagged").await;
    assert_eq!(byte(&mut client).await, b'2');
    assert!(sent.elapsed() >= Duration::from_millis(300));
    proxy.lag_replies(Duration::ZERO);
    server.write_all(b"3").await.unwrap();
    assert_eq!(byte(&mut client).await, b'3');
}
