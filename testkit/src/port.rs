//! Free loopback ports: one for a server or a proxy, a base for a topology
//! whose ports sit at fixed offsets from it.

use std::net::TcpListener;
use std::sync::Mutex as StdMutex;

use rand::Rng;

use crate::{Error, Result};

/// The ports developers' own servers use (`make redis-up`, `REDBELL_TEST_PORT`):
/// never handed out.
const RESERVED: std::ops::RangeInclusive<u16> = 6390..=6399;

/// A loopback port nobody listens on right now, picked by the kernel,
/// outside 6390–6399 and below 55000 (a cluster node needs port + 10000
/// for its bus too).
///
/// # Errors
///
/// When the kernel offers none such in 20 tries.
pub fn free_port() -> Result<u16> {
    for _ in 0..20 {
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::new(format!("no free port: {e}")))?
            .port();
        if !RESERVED.contains(&port) && port < 55_000 {
            return Ok(port);
        }
    }
    Err(Error::new("no free port below 55000"))
}

/// Where the kernel's ephemeral port range starts (Linux's default
/// `net.ipv4.ip_local_port_range` is 32768-60999).
const EPHEMERAL: u16 = 32_768;

/// A base port for a topology, `20000 + step × k` for a random `k`, below
/// 32000, such that `base + o` is free for every `o` in `offsets` (probed
/// by binding each), is below 32768 (where the kernel's ephemeral range
/// starts: a cluster node's bus port, `base + 10000 + i`, there could be
/// taken by any outgoing connection between this probe and the node's
/// bind), and was never handed out before in this process (two tests of
/// one binary never share a base, even before either has bound its
/// ports).
///
/// # Errors
///
/// When no such base is found in 1000 tries; `what` names the topology.
pub fn free_base(step: u16, offsets: &[u16], what: &str) -> Result<u16> {
    /// Every port handed out so far.
    static TAKEN: StdMutex<Vec<u16>> = StdMutex::new(Vec::new());
    let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    let mut rng = rand::rng();
    let step = step.max(1);
    let top = 32_000u16.min(EPHEMERAL.saturating_sub(offsets.iter().copied().max().unwrap_or(0)));
    let bases = top.saturating_sub(20_000) / step;
    if bases == 0 {
        return Err(Error::new(format!(
            "no base port for {what}: its offsets reach past {EPHEMERAL}"
        )));
    }
    for _ in 0..1000 {
        let base = 20_000 + step * rng.random_range(0..bases);
        let ports: Vec<u16> = offsets.iter().map(|o| base + o).collect();
        let free = ports
            .iter()
            .all(|&p| !taken.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            taken.extend(ports);
            return Ok(base);
        }
    }
    Err(Error::new(format!(
        "no free base port for {what} in 20000-{top}"
    )))
}

/// The loopback URL of `port`: `redis://127.0.0.1:<port>`.
pub fn node_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}
