#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod acquire;
mod admin;
mod client;
mod conn;
mod error;
mod fair;
mod guard;
mod hub;
mod lease;
mod mutex;
mod pubsub;
mod rwlock;
mod scripts;

pub use admin::LockStatus;
pub use client::{Client, ClientBuilder, MAX_LEASE, MAX_NAME_LEN};
pub use error::Error;
pub use fair::FairMutex;
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use scripts::{ScriptInfo, scripts};
