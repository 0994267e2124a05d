//! Distributed locks on Redis in which **waiting is event-driven**: a waiter
//! parks until the holder's release wakes it, so the lock reaches the next
//! waiter within a round trip or two and waiting costs Redis nothing.
//!
//! Every lock has a **lease** (renewed while its guard lives), a
//! [`lost`](MutexGuard::lost) signal when the lease can no longer be
//! confirmed, and a **fence**, a number strictly greater than every earlier
//! holder's, which the resource you protect can check. Every wait is bounded
//! by what it waits for: a crashed holder's lease, a frozen waiter's short
//! reservation, a half-open connection's probe.
//!
//! ```rust,no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), redbell::Error> {
//! let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
//! let guard = client.mutex("invoices").lock().await?;
//! // ... only one holder in the whole fleet runs this; pass
//! // guard.fence() to what you write to ...
//! guard.unlock().await?;
//! client.shutdown().await?; // lets the background releases finish
//! # Ok(())
//! # }
//! ```
//!
//! # The primitives
//!
//! All of them come from one [`Client`], share its connections and its
//! renewal task, and work the same on one server, Sentinel and Cluster.
//!
//! | handle | guard | use it for |
//! |---|---|---|
//! | [`Client::mutex`] → [`Mutex`] | [`MutexGuard`] | one holder at a time; a free lock goes to whoever asks first |
//! | [`Client::fair_mutex`] → [`FairMutex`] | [`MutexGuard`] | one holder at a time, served in order of arrival |
//! | [`Client::rwlock`] → [`RwLock`] | [`ReadGuard`], [`WriteGuard`] | many readers or one writer; waiting writers go first |
//! | [`Client::semaphore`] → [`Semaphore`] | [`Permit`] | at most N holders at once, FIFO |
//! | [`Client::election`] → [`Election`] | [`Leadership`] | one leader, with a value observers can [watch](Election::observe) |
//!
//! Each handle waits with `lock()` (or `read`, `write`, `acquire`,
//! `campaign`), gives up at a deadline with `lock_timeout(d)`, or tries once
//! with `try_lock()`. Every wait is cancel safe: dropping the future leaves
//! no lock behind, so `tokio::time::timeout(d, mutex.lock())` is fine.
//!
//! # Connecting
//!
//! [`Client::connect`] takes a URL (`redis://`, `rediss://` with a TLS
//! feature, `redis+unix://`); [`Client::builder`] takes anything redis-rs
//! takes for one server and the options of [`ClientBuilder`] (lease,
//! renewal, prefix, TLS certificates with a TLS feature, replica
//! acknowledgements). [`Client::sentinel`] follows a primary across
//! failovers; [`Client::cluster`] uses sharded pub/sub on a Redis Cluster.
//! The server must be Redis 7.0 or newer (or Valkey 7.2+), and allow Lua
//! scripts and pub/sub to the client's user.
//!
//! # Leases and fences
//!
//! A lock taken without a fixed lease gets the client's lease (30 s by
//! default), renewed every 10 s by one task per client while the guard
//! lives; [`Mutex::with_lease`] fixes a lease with no renewal. When a
//! renewal finds the lock gone or taken, or Redis stays unreachable past the
//! lease's local deadline, the guard's [`lost`](MutexGuard::lost) future
//! resolves: select on it to stop work that is no longer protected. A lease
//! cannot stop a holder that paused past it from writing; its
//! [`fence`](MutexGuard::fence) can, at a store that rejects a fence lower
//! than the highest it has seen.
//!
//! Dropping a guard releases the lock in the background; call
//! [`Client::shutdown`] before the runtime ends so those releases are sent.
//!
//! # Errors
//!
//! One enum, [`Error`]: bad input is a typed error, never a panic and never
//! a silently different key; [`Error::is_retryable`] tells a transient
//! failure (a failover, a dropped connection) from a permanent one.
//!
//! # Observing
//!
//! [`Client::stats`] is a snapshot of what a client did (no Redis command).
//! With the `metrics` feature the same figures go to the
//! [`metrics`](https://docs.rs/metrics) facade; [`tracing`](https://docs.rs/tracing)
//! spans cover every acquisition and release, and what an operator must
//! act on is logged at `warn`. [`Client::inspect`] and
//! [`Client::scan_locks`] show who holds what.
//!
//! # Features
//!
//! - `tls-rustls`: `rediss://` and `ClientBuilder::tls` through rustls
//!   (the `ring` provider).
//! - `tls-native-tls`: the same through the platform's TLS library.
//! - `metrics`: every counter of [`Stats`] also through the `metrics` facade,
//!   each metric described (help and unit; see `describe_metrics`).
//!
//! # The guide
//!
//! The [user guide] explains each part in depth: [connecting] (TLS, ACL
//! users, Sentinel, Cluster, managed services), [leases and fencing] with a
//! worked example at the resource, a chapter per primitive, the [command
//! line], [operations] (metrics, logs, warnings), [failure behaviour] and
//! [troubleshooting].
//!
//! [user guide]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/README.md
//! [connecting]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/connecting.md
//! [leases and fencing]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/leases.md
//! [command line]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/cli.md
//! [operations]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/operations.md
//! [failure behaviour]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/failures.md
//! [troubleshooting]: https://github.com/redbell-rs/redbell/blob/main/docs/guide/troubleshooting.md
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

// The modules from the bottom up: each uses only those above it. (The
// comments keep rustfmt from sorting them.)
// The vocabulary everyone shares.
mod error;
mod keys;
mod task;
// Talking to Redis.
mod conn;
mod scripts;
// What the client counts.
mod stats;
// What the server grants a client's user.
mod access;
// The client's background machinery.
mod background;
mod hub;
mod lease;
// The client.
mod client;
// What a guard is made of.
mod guard;
// The acquisition engine and the wait protocol.
mod acquire;
// The handles, each with its `impl Client` constructor.
mod mutex;
mod semaphore;
// Handles built on the ones above.
mod admin;
mod election;
mod fair;
mod rwlock;
mod survey;

pub use admin::{Hold, LockInfo, LockKind, LockStatus, SemaphoreStatus};
pub use client::{Client, ClientBuilder};
pub use election::{Election, Leader, Leadership, Observer};
pub use error::Error;
pub use fair::FairMutex;
pub use keys::{MAX_LEASE, MAX_NAME_LEN, MIN_LEASE};
pub use mutex::{Mutex, MutexGuard};
/// The redis-rs crate redbell is built on, whose error type
/// [`Error::Redis`] carries.
pub use redis;
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use scripts::{PROTOCOL_VERSION, ScriptInfo, scripts};
pub use semaphore::{Permit, Semaphore};
pub use stats::Stats;
#[cfg(feature = "metrics")]
pub use stats::describe_metrics;
pub use survey::LockScan;

// The README's and the guide's Rust code blocks are doc tests (`make test`
// runs `cargo test --doc`), so the text users copy from compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../docs/guide/README.md")]
    mod index {}
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    #[doc = include_str!("../docs/guide/connecting.md")]
    mod connecting {}
    #[doc = include_str!("../docs/guide/leases.md")]
    mod leases {}
    #[doc = include_str!("../docs/guide/mutex.md")]
    mod mutex {}
    #[doc = include_str!("../docs/guide/fair-mutex.md")]
    mod fair_mutex {}
    #[doc = include_str!("../docs/guide/rwlock.md")]
    mod rwlock {}
    #[doc = include_str!("../docs/guide/semaphore.md")]
    mod semaphore {}
    #[doc = include_str!("../docs/guide/election.md")]
    mod election {}
    #[doc = include_str!("../docs/guide/cli.md")]
    mod cli {}
    #[doc = include_str!("../docs/guide/operations.md")]
    mod operations {}
    #[doc = include_str!("../docs/guide/failures.md")]
    mod failures {}
    #[doc = include_str!("../docs/guide/troubleshooting.md")]
    mod troubleshooting {}
}
