//! One harness for redbell's integration tests and its soak: Redis
//! servers, a TCP fault proxy, a Cluster and a Sentinel topology, each on
//! free loopback ports of the caller's own.
//!
//! - [`Server`]: a redis-server child process (non-persistent, or with an
//!   AOF that survives a SIGKILL), restarted on the same port.
//! - [`Proxy`]: relays connections to a server and does to them what a
//!   network does: hold back one way or both, drop, black-hole every
//!   connection or half-open one, cut.
//! - [`Cluster`] (`scripts/redis/cluster.sh`) and [`Sentinel`]
//!   (`scripts/redis/sentinel.sh`): the topologies, and their failovers
//!   and slot migrations; [`parse_nodes`] reads `CLUSTER NODES`.
//! - [`TlsServers`] (`scripts/redis/tls.sh`): two TLS servers, one
//!   requiring a client certificate.
//! - [`connect`], [`command`], [`query`]: plain connections with timeouts;
//!   [`free_port`], [`free_base`]: where to put things.
//!
//! Everything that can fail returns the kit's [`Error`] (what failed, in
//! words): the tests panic with it, the soak reports it.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod cluster;
mod conn;
mod env;
mod error;
mod nodes;
mod port;
mod proxy;
pub mod sentinel;
mod server;
mod tls;

pub use cluster::{Cluster, migrate_keys};
pub use conn::{command, connect, info_field, poll_until, query, replication_field};
pub use env::{
    kill_pidfile, log_tail, redis_script, redis_server_bin, repo_root, run_redis_script,
};
pub use error::{Error, Result};
pub use nodes::{Node, parse_nodes, slot_of};
pub use port::{free_base, free_port, node_url};
pub use proxy::Proxy;
pub use sentinel::Sentinel;
pub use server::{Server, ServerOptions};
pub use tls::TlsServers;
