//! The lock kinds of the `pool_waiter` helper process (its first
//! argument), and the sorted set each kind's waiters queue in.

use crate::keys::{fifo_key, intents_key, queue_key, waiters_key};

/// A lock kind `pool_waiter` waits on; a semaphore with its permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// `Mutex::lock`.
    Mutex,
    /// `FairMutex::lock`.
    Fair,
    /// `RwLock::write`.
    Write,
    /// `Semaphore::acquire`, of this many permits.
    Semaphore(u32),
}

impl PoolKind {
    /// The kind as `pool_waiter`'s first argument.
    pub fn arg(self) -> &'static str {
        match self {
            PoolKind::Mutex => "mutex",
            PoolKind::Fair => "fair",
            PoolKind::Write => "write",
            PoolKind::Semaphore(_) => "semaphore",
        }
    }

    /// The sorted set the waiters of lock `name` queue in.
    pub fn queue(self, name: &str) -> String {
        match self {
            PoolKind::Mutex => waiters_key(name),
            PoolKind::Fair => fifo_key(name),
            PoolKind::Write => intents_key(name),
            PoolKind::Semaphore(_) => queue_key(name),
        }
    }
}
