//! [`Proxy`]: a TCP proxy on loopback that can hold back, drop, partition,
//! black-hole, half-open and cut the connections it relays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio::task::JoinHandle;

use crate::{Error, Result, poll_until};

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
    /// Reads and discards everything both ways; closes pass.
    Dropping,
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
            Flow::Forward | Flow::Dropping | Flow::Cut => false,
            Flow::Paused => direction == Direction::Down,
            Flow::Partitioned => true,
        }
    }
}

/// A TCP proxy from 127.0.0.1:[`port`](Proxy::port) to 127.0.0.1:`upstream`,
/// for faults a real server cannot be made to show on its own. Cut on drop.
///
/// The side that connects to the proxy is the *client* (a redbell client, a
/// replica on its replication link, a soak worker), the server the proxy
/// connects to for each of them is the *upstream*. Every accepted
/// connection is relayed to a connection of its own to the upstream, byte
/// for byte, in both directions, until one end closes or the proxy is cut:
///
/// | call | upstream -> client | client -> upstream | closes | new connections |
/// | --- | --- | --- | --- | --- |
/// | (start), [`resume`](Proxy::resume) | forwarded | forwarded | passed on | relayed |
/// | [`pause`](Proxy::pause) | held back | forwarded | passed on | relayed |
/// | [`partition`](Proxy::partition) | held back | held back | held back | relayed, then held back |
/// | [`drop_all`](Proxy::drop_all) | discarded | discarded | passed on | relayed, then discarded |
/// | [`blackhole`](Proxy::blackhole) | never again | read and discarded | upstream closed, client's left open | relayed |
/// | [`half_open`](Proxy::half_open)`(i)` | as `blackhole`, for the `i`-th connection only | | | |
/// | [`cut`](Proxy::cut) | dropped | dropped | all closed | refused |
/// | [`lag_replies`](Proxy::lag_replies)`(d)` | each chunk `d` late | forwarded | passed on | relayed |
///
/// What is held back stays in the proxy (one read per connection and
/// direction) and in the kernel's buffers, and goes through, in order, on
/// [`resume`](Proxy::resume); what is discarded is gone. A close held back
/// by a partition leaves the other end's connection open: kill the upstream
/// behind a partition and the client holds a half-open connection, which
/// only its own timeouts (or a `resume`/`cut`) end. `CLIENT KILL` cannot do
/// any of this: the client notices at once and reconnects.
///
/// [`blackhole`](Proxy::blackhole) is what a NAT or load balancer that
/// dropped its state, a firewall flush or a host that died without a reset
/// do to every connection open at that moment: the server's side is gone
/// (the proxy closes it, so the server frees the client), while the
/// client's socket stays open, swallows what the client sends and never
/// answers, closes or resets. Unlike a partition it is not undone by
/// `resume`: only the connections the client opens afterwards work.
/// [`half_open`](Proxy::half_open) does the same to one connection (a
/// client's pub/sub connection, say), picked by the order of acceptance.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    flow: watch::Sender<Flow>,
    /// Per direction (down, up): held by a relay while it writes that way,
    /// and by the calls that change the flow or the holes, so once they
    /// return no write they stop is under way.
    gates: [Arc<AsyncMutex<()>>; 2],
    /// Relays alive (each holds its two connections, or a black-holed
    /// client's socket).
    live: Arc<AtomicUsize>,
    /// Connections accepted so far; the next one gets this index.
    accepted: Arc<AtomicUsize>,
    /// How long each chunk from the upstream waits before it is written to
    /// the client, in milliseconds ([`Proxy::lag_replies`]); 0: none.
    lag: Arc<AtomicU64>,
    /// Which relays are black-holed; only grows.
    holes: watch::Sender<Holes>,
    accept: JoinHandle<()>,
}

/// Which relays are black-holed.
#[derive(Debug, Clone, Default)]
struct Holes {
    /// [`Proxy::blackhole`] calls: a relay accepted when it was `n` is
    /// black-holed once it exceeds `n`.
    epoch: u64,
    /// Indices of relays black-holed one by one ([`Proxy::half_open`]).
    picked: Vec<usize>,
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
    /// # Errors
    ///
    /// When it cannot listen on `port`.
    pub async fn start(port: u16, upstream: u16) -> Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| Error::new(format!("the proxy cannot listen on {port}: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::new(format!("the proxy's address: {e}")))?
            .port();
        let (flow, _) = watch::channel(Flow::Forward);
        let gates = [Arc::new(AsyncMutex::new(())), Arc::new(AsyncMutex::new(()))];
        let live = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let lag = Arc::new(AtomicU64::new(0));
        let (holes, _) = watch::channel(Holes::default());
        let accept = tokio::spawn({
            let (flow, gates, live) = (flow.clone(), gates.clone(), live.clone());
            let (holes, accepted, lag) = (holes.clone(), accepted.clone(), lag.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *flow.borrow() == Flow::Cut {
                        continue;
                    }
                    live.fetch_add(1, Ordering::SeqCst);
                    let alive = Live(live.clone());
                    let (rx, gates, lag) = (flow.subscribe(), gates.clone(), lag.clone());
                    // Read at accept: a later `blackhole` swallows this one.
                    let hole = Hole {
                        rx: holes.subscribe(),
                        epoch: holes.borrow().epoch,
                        index: accepted.fetch_add(1, Ordering::SeqCst),
                    };
                    tokio::spawn(async move {
                        let _alive = alive;
                        relay(client, upstream, (rx, lag), gates, hole).await;
                    });
                }
            }
        });
        Ok(Proxy {
            port,
            flow,
            gates,
            live,
            accepted,
            lag,
            holes,
            accept,
        })
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The proxy's URL, `redis://127.0.0.1:<port>`, to point a client at.
    pub fn url(&self) -> String {
        crate::node_url(self.port)
    }

    /// How many relayed connections are open.
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// How many connections the proxy has accepted so far (closed ones
    /// included): the index the next one gets for
    /// [`half_open`](Proxy::half_open).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Stops forwarding from the upstream to the clients; the clients'
    /// bytes (a replica's acknowledgements, a client's commands) still go
    /// through. Once this returns nothing more reaches a client.
    pub async fn pause(&self) {
        self.set(Flow::Paused).await;
    }

    /// Stops forwarding both ways, closes included, while every connection
    /// stays open: neither end notices but by its own timeouts. Once this
    /// returns nothing more reaches either end.
    pub async fn partition(&self) {
        self.set(Flow::Partitioned).await;
    }

    /// Reads and discards what either end sends (as a router dropping
    /// every packet, but closes still pass); nothing is kept for
    /// [`resume`](Proxy::resume). Once this returns nothing more reaches
    /// either end.
    pub async fn drop_all(&self) {
        self.set(Flow::Dropping).await;
    }

    /// Black-holes every connection open now: closes its upstream side
    /// (the server sees the client leave), and from then on reads and
    /// discards whatever the client sends and never answers, closes or
    /// resets it (until the proxy is cut or dropped, or the client closes).
    /// Connections accepted afterwards are relayed as before. Once this
    /// returns nothing more reaches a black-holed client. Returns how many
    /// connections the proxy has accepted so far.
    pub async fn blackhole(&self) -> usize {
        let _down = self.gates[0].lock().await;
        let _up = self.gates[1].lock().await;
        self.holes.send_modify(|h| h.epoch += 1);
        self.accepted()
    }

    /// Black-holes only the `index`-th connection accepted (from 0), as
    /// [`blackhole`](Proxy::blackhole) does every one: its server side
    /// closed, its client side open and silent.
    pub async fn half_open(&self, index: usize) {
        let _down = self.gates[0].lock().await;
        let _up = self.gates[1].lock().await;
        self.holes.send_modify(|h| h.picked.push(index));
    }

    /// Delays what the upstream sends: from now on each chunk read from it
    /// is written to the client `lag` later (a slow link; zero: at once
    /// again). An answer the server gives reaches the client `lag` after
    /// it was given, so it can be stale by then; a connection's handshake
    /// takes `lag` per round trip. A chunk whose lag is over is still
    /// subject to [`pause`](Proxy::pause) and the rest.
    pub fn lag_replies(&self, lag: Duration) {
        let ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX);
        self.lag.store(ms, Ordering::SeqCst);
    }

    /// Forwards both ways again, first what was held back.
    pub fn resume(&self) {
        self.flow.send_replace(Flow::Forward);
    }

    /// Drops every relayed connection with what it held, and stops
    /// listening (new connections are refused); waits (up to 5 s) until the
    /// connections are closed.
    ///
    /// # Errors
    ///
    /// When they are not closed within 5 s.
    pub async fn cut(&self) -> Result<()> {
        self.set(Flow::Cut).await;
        self.accept.abort();
        let live = self.live.clone();
        let closed = poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
            let live = live.clone();
            async move { live.load(Ordering::SeqCst) == 0 }
        })
        .await;
        if closed {
            Ok(())
        } else {
            Err(Error::new("the proxy's connections did not close"))
        }
    }

    /// Changes the flow with both gates held: no write it stops is under
    /// way once it returns.
    async fn set(&self, flow: Flow) {
        let _down = self.gates[0].lock().await;
        let _up = self.gates[1].lock().await;
        self.flow.send_replace(flow);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flow.send_replace(Flow::Cut);
        self.accept.abort();
    }
}

/// Whether a relay has been black-holed: the proxy's holes, and what the
/// relay was when its connection was accepted.
#[derive(Clone)]
struct Hole {
    rx: watch::Receiver<Holes>,
    /// [`Holes::epoch`] at accept.
    epoch: u64,
    /// The connection's index in the order of acceptance.
    index: usize,
}

impl Hole {
    fn covers(&self, holes: &Holes) -> bool {
        holes.epoch > self.epoch || holes.picked.contains(&self.index)
    }

    fn open(&self) -> bool {
        self.covers(&self.rx.borrow())
    }
}

/// Relays one connection until either end closes (and the close is not
/// held back) or the proxy is cut; once black-holed, drops the upstream
/// side and swallows the client's bytes instead.
async fn relay(
    client: TcpStream,
    upstream: u16,
    (mut flow, lag): (watch::Receiver<Flow>, Arc<AtomicU64>),
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
        (Direction::Down, Some(&*lag)),
        64 * 1024,
        (flow.clone(), hole.clone()),
        down_gate,
    );
    let up = pump(
        &mut from_client,
        &mut to_server,
        (Direction::Up, None),
        16 * 1024,
        (flow.clone(), hole.clone()),
        up_gate,
    );
    let me = hole.clone();
    tokio::select! {
        () = down => {}
        () = up => {}
        _ = hole.rx.wait_for(|h| me.covers(h)) => {}
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
/// written (after the `lag` in milliseconds, if any, set when it was read)
/// only while `direction` is not held back, under `gate`, and
/// nothing more is read meanwhile (a chunk read while dropping is
/// discarded). Returns when `from` closes (once a partition no longer
/// holds the close back), `to` fails, the proxy is cut, or the relay is
/// black-holed (checked under `gate`, so no write follows
/// [`Proxy::blackhole`]).
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    (direction, lag): (Direction, Option<&AtomicU64>),
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
        let lag = lag.map_or(0, |l| l.load(Ordering::SeqCst));
        if lag > 0 {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(lag)) => {}
                _ = flow.wait_for(|f| *f == Flow::Cut) => return,
            }
        }
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
            if now != Flow::Dropping && to.write_all(&buf[..n]).await.is_err() {
                return;
            }
            break;
        }
    }
}

#[cfg(test)]
mod tests;
