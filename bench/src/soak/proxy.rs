//! A worker's TCP proxy to the soak's server, for network faults a server
//! cannot show on its own:
//!
//! - **partition**: nothing is forwarded either way (closes included) until
//!   it is healed; the worker's connections stay open and hear nothing.
//! - **black hole** ([`Proxy::black_hole`]; the `HalfOpen` and `BlackHole`
//!   faults): the server side of every connection open now is closed,
//!   while the worker's side is left open and silent: never written to,
//!   never closed, no RST, what the worker sends read and dropped, as when
//!   a NAT or a firewall on the way forgets the connections. Only the
//!   worker's own timeouts end it. New connections are relayed as usual.
//!   (The two faults are the same on the wire; they differ in what the
//!   checker then demands of the worker: `BlackHole` that it work again,
//!   `checker/run.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A proxy from 127.0.0.1:`port` to 127.0.0.1:`upstream`; stops on drop.
pub struct Proxy {
    pub port: u16,
    partitioned: watch::Sender<bool>,
    /// Bumped by each black hole: connections older than it are cut.
    epoch: Arc<watch::Sender<u64>>,
    accepted: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    pub async fn start(upstream: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let (partitioned, _) = watch::channel(false);
        let epoch = Arc::new(watch::channel(0).0);
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn({
            let (partitioned, epoch, accepted) =
                (partitioned.clone(), epoch.clone(), accepted.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let (part, ep) = (partitioned.subscribe(), epoch.subscribe());
                    tokio::spawn(relay(client, upstream, part, ep));
                }
            }
        });
        Ok(Proxy {
            port,
            partitioned,
            epoch,
            accepted,
            accept,
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn partition(&self, on: bool) {
        self.partitioned.send_replace(on);
    }

    /// Black-holes the connections open now: their server side closed,
    /// the worker's side open and silent for good. Returns how many
    /// connections the proxy has relayed so far.
    pub fn black_hole(&self) -> u64 {
        self.epoch.send_modify(|e| *e += 1);
        self.accepted.load(Ordering::Relaxed)
    }
}

async fn relay(
    mut client: TcpStream,
    upstream: u16,
    mut partitioned: watch::Receiver<bool>,
    mut epoch: watch::Receiver<u64>,
) {
    let born = *epoch.borrow_and_update();
    // A connection made during a partition waits for the heal.
    while *partitioned.borrow_and_update() {
        if partitioned.changed().await.is_err() {
            return;
        }
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (mut up, mut down) = ([0u8; 16 * 1024], [0u8; 16 * 1024]);
    loop {
        if *epoch.borrow() != born {
            // Black hole: the server side goes; the client's stays open and
            // silent, its bytes read and dropped, until it closes.
            drop(server);
            while matches!(client.read(&mut up).await, Ok(n) if n > 0) {}
            return;
        }
        let cut = *partitioned.borrow();
        tokio::select! {
            r = client.read(&mut up), if !cut => match r {
                Ok(n) if n > 0 => if server.write_all(&up[..n]).await.is_err() { return },
                _ => return,
            },
            r = server.read(&mut down), if !cut => match r {
                Ok(n) if n > 0 => if client.write_all(&down[..n]).await.is_err() { return },
                _ => return,
            },
            r = partitioned.changed() => if r.is_err() { return },
            r = epoch.changed() => if r.is_err() { return },
        }
    }
}
