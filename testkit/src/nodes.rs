//! Who serves what in a Redis Cluster: `CLUSTER NODES` parsed, and the
//! slot of a lock.

/// CRC16 (XMODEM), the hash of Redis Cluster's key slots: written here
/// again on purpose, as an oracle independent of the library's (the tests
/// check it against the server's `CLUSTER KEYSLOT`).
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of every key and channel of lock `name` (their hash tag is
/// `{name}`).
pub fn slot_of(name: &str) -> u16 {
    crc16(name.as_bytes()) % 16384
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node id.
    pub id: String,
    /// The address clients use, `host:port` (bus port and hostname cut).
    pub addr: String,
    /// The node's port.
    pub port: u16,
    /// Its flags (`master`, `slave`, `fail`, `fail?`, ...), without
    /// `myself`.
    pub flags: Vec<String>,
    /// The primary's id, for a replica.
    pub master: Option<String>,
    /// Slot ranges served (inclusive), for a primary.
    pub slots: Vec<(u16, u16)>,
}

impl Node {
    /// Whether it is flagged `master`.
    pub fn is_primary(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Whether it is flagged `fail` or `fail?`.
    pub fn failed(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    /// Whether `slot` is in one of its ranges.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// Parses `CLUSTER NODES`; the nodes by port. Lines it cannot read are
/// skipped, and so are slots being imported or migrated (`[...]`).
pub fn parse_nodes(text: &str) -> Vec<Node> {
    let mut nodes = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        let Some(port) = port else { continue };
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|a| (a, a)),
            })
            .collect();
        nodes.push(Node {
            id: f[0].to_owned(),
            addr: addr.to_owned(),
            port,
            flags: f[2]
                .split(',')
                .filter(|x| *x != "myself")
                .map(str::to_owned)
                .collect(),
            master: (f[3] != "-").then(|| f[3].to_owned()),
            slots,
        });
    }
    nodes.sort_by_key(|n| n.port);
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_primaries_replicas_failures_and_migrations() {
        let text = "\
b1 127.0.0.1:7001@17001,host-b master - 0 1 2 connected 5461-10922 [5000->-a1]
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 16000
c1 127.0.0.1:7003@17003 slave,fail a1 0 1 4 disconnected
bad line
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].port, 7000, "sorted by port");
        assert_eq!(nodes[0].flags, ["master"], "without myself");
        assert_eq!(nodes[0].slots, [(0, 5460), (16000, 16000)]);
        assert_eq!(nodes[1].slots, [(5461, 10922)], "no migrating slot");
        assert_eq!(nodes[1].addr, "127.0.0.1:7001", "no bus port, no hostname");
        assert!(nodes[2].failed() && !nodes[2].is_primary());
        assert_eq!(nodes[2].master.as_deref(), Some("a1"));
        assert!(nodes[0].serves(16000) && !nodes[0].serves(5461));
    }

    #[test]
    fn slots_match_the_cluster_spec() {
        // The Redis Cluster spec's CRC16 check value, and a known slot.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
    }
}
