//! Shared helpers for redbell's integration tests, on the servers, proxy
//! and topologies of `redbell-testkit` (shared with the soak).
//!
//! Every test talks to a real Redis:
//!
//! - the shared server named by `REDIS_URL` (started by `scripts/with-redis.sh`
//!   for `make test`), for tests that only touch their own, uniquely named
//!   locks ([`unique`]);
//! - a [`PrivateRedis`] of its own for tests that kill connections
//!   server-wide, restart the server, flush scripts or need exact command
//!   counts, so they never disturb the tests running beside them.
//!
//! [`Monitor`] records what a server executes (Redis `MONITOR`), so tests can
//! count the commands a client sent — "no polling while parked", "at most
//! one attempt per release", "no PUBLISH was ever sent".
//!
//! Beside those: the names of every key a lock uses ([`lock_key`],
//! [`waiters_key`], [`readers_key`], [`fifo_key`], ...), one-line shortcuts
//! for raw Redis commands ([`set`], [`del`], [`zcard`], [`client_list`],
//! [`commandstats`], ...), waiting helpers ([`eventually`], [`gone_within`],
//! [`promptly`], [`join_within`]), the non-atomic counter that proves mutual
//! exclusion ([`non_atomic_increment`]), a runtime that can be frozen
//! ([`Side`]), the kit's TCP [`Proxy`] that can hold back, drop,
//! partition, black-hole, half-open and cut a client's connections, waiters that retry through a failover
//! ([`spawn_waiter`]), and the built binaries ([`built_binary`]).
//!
//! ACL users of a test's own are in [`acl`], the CLI tests' process helpers
//! in [`cli`], the set-ups that several test files of one lock kind share
//! in [`scenes`].
//!
//! Topologies of a test's own, on free ports, live in modules of their own,
//! as their helpers take a server's port where the flat ones take a
//! connection: [`cluster`] (a Redis Cluster of three shards) and
//! [`sentinel`] (a primary, a replica and three sentinels).
//!
//! Everything else is re-exported flat from here; each concern lives in a
//! module of its own: `env` (where the server, binaries and scripts are),
//! `keys` (names of keys, channels and scripts), `client` (redbell clients
//! as the tests configure them), `raw` (raw Redis commands), `node` (one
//! server of a topology, by port), `wait` (bounded waiting and retrying),
//! `waiter`, `counter`, `monitor`, `pool` (the kinds of the `pool_waiter`
//! process: [`PoolKind`]), `process` (child processes to freeze:
//! [`signal`], [`Stoppable`]), `server`, `side`, and
//! `handoff` (one contended hand-off between two clients, timed:
//! [`hand_off`]).

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod acl;
pub mod cli;
pub mod cluster;
pub mod scenes;
pub mod sentinel;

mod client;
mod counter;
mod env;
mod handoff;
mod keys;
mod monitor;
mod node;
mod pool;
mod process;
mod raw;
mod server;
mod side;
mod wait;
mod waiter;

pub use client::{LONG, client, renewing_client, warm_up};
pub use counter::{counter_key, counter_value, non_atomic_increment};
pub use env::{built_binary, log_output, redbell_binary, redis_port, redis_url, run_redis_script};
pub use handoff::hand_off;
pub use keys::{
    fence_key, fifo_expiry_key, fifo_key, hash_tag, holders_key, intents_key, lock_key,
    lock_pattern, permits_key, queue_key, readers_key, script_sha, script_source, test_key, unique,
    waiters_key, wake_channel,
};
pub use monitor::Monitor;
pub use node::{POLL, free_base, info_field, node_url, query, replication_field};
pub use pool::PoolKind;
pub use process::{Stoppable, signal};
pub use raw::{
    client_ids, client_list, commandstats, config_set, connections_received, del, exists,
    fair_queue, get, hgetall, hset, incr, kill_client, kill_clients_of_type, pttl, raw,
    reset_stats, scan, server_ms, set, set_px, subscribers, subscriptions, zcard, zrange,
};
pub use redbell_testkit::{
    Proxy, ServerOptions, TlsServers, redis_script, redis_server_bin, repo_root,
};
pub use server::{PrivateRedis, free_port};
pub use side::{Frozen, Side, on_own_runtime};
pub use wait::{
    PROMPT, eventually, eventually_every, fails_promptly, gone_within, got_within, join_within,
    promptly, recovering, retryable, spawn_timed, wait_for_members, wait_for_parked,
    wait_for_subscribers,
};
pub use waiter::{
    WaiterReport, join_waiters, spawn_passing_waiter, spawn_waiter, spread, try_join_waiters,
    waiter_errors,
};
