#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

// Modules from the bottom up: each uses only those above it.
mod acquire;
mod admin;
mod background;
mod client;
mod conn;
mod election;
mod error;
mod fair;
mod guard;
mod hub;
mod keys;
mod lease;
mod mutex;
mod rwlock;
mod scripts;
mod task;

pub use admin::LockStatus;
pub use client::{Client, ClientBuilder};
pub use election::{Election, Leader, Leadership, Observer};
pub use error::Error;
pub use fair::FairMutex;
pub use keys::{MAX_LEASE, MAX_NAME_LEN};
pub use mutex::{Mutex, MutexGuard};
/// The redis-rs crate redbell is built on, whose error type
/// [`Error::Redis`] carries.
pub use redis;
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use scripts::{ScriptInfo, scripts};
