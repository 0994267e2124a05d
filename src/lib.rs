#![doc = include_str!("../README.md")]
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
pub use scripts::{ScriptInfo, scripts};
pub use semaphore::{Permit, Semaphore};
pub use stats::Stats;
pub use survey::LockScan;
