//! [`Proxy`]: a TCP proxy on loopback that can hold back, partition,
//! black-hole and cut the connections it relays.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio::task::JoinHandle;

use crate::eventually_every;

/// What the proxy does with the bytes of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Forwards both ways.
    Forward,
    /// Holds back everything from the upstream; the client's bytes still
    /// go through.
    Paused,
    /// Holds back everything both ways, closes included.
    Partitioned,
    /// Connections dropped, with whatever they held; no new ones.
    Cut,
}

/// One direction of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Upstream -> client.
    Down,
    /// Client -> upstream.
    Up,
}

impl Flow {
    /// Whether bytes going `direction` are held back.
    fn holds(self, direction: Direction) -> bool {
        match self {
            Flow::Forward | Flow::Cut => false,
            Flow::Paused => direction == Direction::Down,
            Flow::Partitioned => true,
        }
    }
}

/// A TCP proxy from 127.0.0.1:[`port`](Proxy::port) to 127.0.0.1:`upstream`,
/// for faults a real server cannot be made to show on its own. Cut on drop.
///
/// The side that connects to the proxy is the *client* (a redbell client, a
/// replica on its replication link), the server the proxy connects to for
/// each of them is the *upstream*. Every accepted connection is relayed to
/// a connection of its own to the upstream, byte for byte, in both
/// directions, until one end closes or the proxy is cut:
///
/// | call | upstream -> client | client -> upstream | closes | new connections |
/// | --- | --- | --- | --- | --- |
/// | (start), [`resume`](Proxy::resume) | forwarded | forwarded | passed on | relayed |
/// | [`pause`](Proxy::pause) | held back | forwarded | passed on | relayed |
/// | [`partition`](Proxy::partition) | held back | held back | held back | relayed, then held back |
/// | [`blackhole`](Proxy::blackhole) | never again | read and discarded | upstream closed, client's left open | relayed |
/// | [`cut`](Proxy::cut) | dropped | dropped | all closed | refused |
///
/// What is held back stays in the proxy (one read per connection and
/// direction) and in the kernel's buffers, and goes through, in order, on
/// [`resume`](Proxy::resume). A close held back by a partition leaves the
/// other end's connection open: kill the upstream behind a partition and
/// the client holds a half-open connection, which only its own timeouts (or
/// a `resume`/`cut`) end. `CLIENT KILL` cannot do any of this: the client
/// notices at once and reconnects.
///
/// [`blackhole`](Proxy::blackhole) is what a NAT or load balancer that
/// dropped its state, a firewall flush or a host that died without a reset
/// do to every connection open at that moment: the server's side is gone
/// (the proxy closes it, so the server frees the client), while the
/// client's socket stays open, swallows what the client sends and never
/// answers, closes or resets. Unlike a partition it is not undone by
/// `resume`: only the connections the client opens afterwards work.
///
/// # Example
///
/// ```no_run
/// # async fn example() {
/// use redbell_integration_tests::{PrivateRedis, Proxy, client};
///
/// let redis = PrivateRedis::start().await;
/// let proxy = Proxy::start(0, redis.port()).await;
/// let c = client(&proxy.url()).await;
/// proxy.partition().await; // c's connections stay open, and hear nothing
/// // ... what does c do now?
/// proxy.resume();
/// # drop(c);
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    flow: watch::Sender<Flow>,
    /// Per direction (down, up): held by a relay while it writes that way,
    /// and by `pause`/`partition`/`cut` while they change the flow, so once
    /// they return no write they stop is under way.
    gates: [Arc<AsyncMutex<()>>; 2],
    /// Relays alive (each holds its two connections, or a black-holed
    /// client's socket).
    live: Arc<AtomicUsize>,
    /// Counts [`blackhole`](Proxy::blackhole) calls: a relay accepted when
    /// it was `n` is black-holed once it exceeds `n`.
    holes: watch::Sender<u64>,
    accept: JoinHandle<()>,
}

/// Counts a relay as alive while it exists.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` (0: any free port, see
    /// [`port`](Proxy::port)) and relays each connection to
    /// 127.0.0.1:`upstream`, forwarding both ways.
    ///
    /// # Panics
    ///
    /// When it cannot listen on `port`.
    pub async fn start(port: u16, upstream: u16) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("the proxy cannot listen on {port}: {e}"));
        let port = listener.local_addr().expect("the proxy's address").port();
        let (flow, _) = watch::channel(Flow::Forward);
        let gates = [Arc::new(AsyncMutex::new(())), Arc::new(AsyncMutex::new(()))];
        let live = Arc::new(AtomicUsize::new(0));
        let (holes, _) = watch::channel(0);
        let accept = tokio::spawn({
            let (flow, gates, live) = (flow.clone(), gates.clone(), live.clone());
            let holes = holes.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *flow.borrow() == Flow::Cut {
                        continue;
                    }
                    live.fetch_add(1, Ordering::SeqCst);
                    let alive = Live(live.clone());
                    let (rx, gates) = (flow.subscribe(), gates.clone());
                    // Read at accept: a later `blackhole` swallows this one.
                    let hole = Hole {
                        rx: holes.subscribe(),
                        accepted: *holes.borrow(),
                    };
                    tokio::spawn(async move {
                        let _alive = alive;
                        relay(client, upstream, rx, gates, hole).await;
                    });
                }
            }
        });
        Proxy {
            port,
            flow,
            gates,
            live,
            holes,
            accept,
        }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The proxy's URL, `redis://127.0.0.1:<port>`, to point a client at.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How many relayed connections are open.
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Stops forwarding from the upstream to the clients; the clients'
    /// bytes (a replica's acknowledgements, a client's commands) still go
    /// through. Once this returns nothing more reaches a client.
    pub async fn pause(&self) {
        let _down = self.gates[0].lock().await;
        self.flow.send_replace(Flow::Paused);
    }

    /// Stops forwarding both ways, closes included, while every connection
    /// stays open: neither end notices but by its own timeouts. Once this
    /// returns nothing more reaches either end.
    pub async fn partition(&self) {
        let _down = self.gates[0].lock().await;
        let _up = self.gates[1].lock().await;
        self.flow.send_replace(Flow::Partitioned);
    }

    /// Black-holes every connection open now: closes its upstream side
    /// (the server sees the client leave), and from then on reads and
    /// discards whatever the client sends and never answers, closes or
    /// resets it (until the proxy is cut or dropped, or the client closes).
    /// Connections accepted afterwards are relayed as before. Once this
    /// returns nothing more reaches a black-holed client.
    pub async fn blackhole(&self) {
        let _down = self.gates[0].lock().await;
        let _up = self.gates[1].lock().await;
        self.holes.send_modify(|n| *n += 1);
    }

    /// Forwards both ways again, first what was held back.
    pub fn resume(&self) {
        self.flow.send_replace(Flow::Forward);
    }

    /// Drops every relayed connection with what it held, and stops
    /// listening (new connections are refused); waits (up to 5 s) until the
    /// connections are closed.
    ///
    /// # Panics
    ///
    /// When they are not closed within 5 s.
    pub async fn cut(&self) {
        {
            let _down = self.gates[0].lock().await;
            let _up = self.gates[1].lock().await;
            self.flow.send_replace(Flow::Cut);
        }
        self.accept.abort();
        let live = self.live.clone();
        let closed = eventually_every(Duration::from_secs(5), Duration::from_millis(50), || {
            let live = live.clone();
            async move { live.load(Ordering::SeqCst) == 0 }
        })
        .await;
        assert!(closed, "the proxy's connections did not close");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flow.send_replace(Flow::Cut);
        self.accept.abort();
    }
}

/// Whether a relay has been black-holed: [`Proxy::blackhole`]'s count, and
/// what it was when the relay's connection was accepted.
#[derive(Clone)]
struct Hole {
    rx: watch::Receiver<u64>,
    accepted: u64,
}

impl Hole {
    fn open(&self) -> bool {
        *self.rx.borrow() > self.accepted
    }
}

/// Relays one connection until either end closes (and the close is not
/// held back) or the proxy is cut; once black-holed, drops the upstream
/// side and swallows the client's bytes instead.
async fn relay(
    client: TcpStream,
    upstream: u16,
    mut flow: watch::Receiver<Flow>,
    gates: [Arc<AsyncMutex<()>>; 2],
    mut hole: Hole,
) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut from_server, mut to_server) = server.into_split();
    let (mut from_client, mut to_client) = client.into_split();
    let [down_gate, up_gate] = gates;
    let down = pump(
        &mut from_server,
        &mut to_client,
        Direction::Down,
        64 * 1024,
        (flow.clone(), hole.clone()),
        down_gate,
    );
    let up = pump(
        &mut from_client,
        &mut to_server,
        Direction::Up,
        16 * 1024,
        (flow.clone(), hole.clone()),
        up_gate,
    );
    let accepted = hole.accepted;
    tokio::select! {
        () = down => {}
        () = up => {}
        _ = hole.rx.wait_for(|n| *n > accepted) => {}
    }
    if !hole.open() {
        return;
    }
    // Black-holed: the server's side closes here; the client's stays open
    // (its write half is kept, unused: no FIN, no RST) and is drained.
    drop((from_server, to_server));
    let _open = to_client;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            r = from_client.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = flow.wait_for(|f| *f == Flow::Cut) => return,
        }
    }
}

/// Copies `from` to `to` in chunks of up to `chunk` bytes: a chunk read is
/// written only while `direction` is not held back, under `gate`, and
/// nothing more is read meanwhile. Returns when `from` closes (once a
/// partition no longer holds the close back), `to` fails, the proxy is
/// cut, or the relay is black-holed (checked under `gate`, so no write
/// follows [`Proxy::blackhole`]).
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    direction: Direction,
    chunk: usize,
    (mut flow, hole): (watch::Receiver<Flow>, Hole),
    gate: Arc<AsyncMutex<()>>,
) {
    let mut buf = vec![0u8; chunk];
    loop {
        let read = tokio::select! {
            r = from.read(&mut buf) => r,
            _ = flow.wait_for(|f| *f == Flow::Cut) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => {
                let _ = flow.wait_for(|f| *f != Flow::Partitioned).await;
                return;
            }
            Ok(n) => n,
        };
        loop {
            match flow.wait_for(|f| !f.holds(direction)).await {
                Ok(f) if *f == Flow::Cut => return,
                Ok(_) => {}
                Err(_) => return,
            }
            let _gate = gate.lock().await;
            let now = *flow.borrow();
            if now == Flow::Cut || hole.open() {
                return;
            }
            if now.holds(direction) {
                continue;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
            break;
        }
    }
}

#[cfg(test)]
mod tests {
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
        let proxy = Proxy::start(0, upstream.local_addr().unwrap().port()).await;
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
        proxy.cut().await;
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
        let proxy = Proxy::start(0, upstream.local_addr().unwrap().port()).await;
        let mut client = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        let (mut server, _) = upstream.accept().await.unwrap();
        client.write_all(b"1").await.unwrap();
        assert_eq!(byte(&mut server).await, b'1');

        proxy.blackhole().await;
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

        proxy.cut().await;
        closed(&mut client).await;
    }
}
