//! What `redbell run` holds: a lock, or a permit of a semaphore
//! (`--permits N`). Both are renewed, released and reported the same way.

use std::time::Duration;

use redbell::{MutexGuard, Permit};

/// The lock or the permit the command runs under.
#[derive(Debug)]
pub(super) enum Held {
    /// `redbell run NAME`: the mutex `NAME`.
    Lock(MutexGuard),
    /// `redbell run --permits N NAME`: one of the N permits of `NAME`.
    Permit(Permit),
}

impl Held {
    pub(super) fn name(&self) -> &str {
        match self {
            Held::Lock(g) => g.name(),
            Held::Permit(p) => p.name(),
        }
    }

    pub(super) fn token(&self) -> &str {
        match self {
            Held::Lock(g) => g.token(),
            Held::Permit(p) => p.token(),
        }
    }

    pub(super) fn fence(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fence(),
            Held::Permit(p) => p.fence(),
        }
    }

    /// See `MutexGuard::extend` (cancel safe).
    pub(super) async fn extend(&self, lease: Duration) -> Result<(), redbell::Error> {
        match self {
            Held::Lock(g) => g.extend(lease).await,
            Held::Permit(p) => p.extend(lease).await,
        }
    }

    pub(super) async fn unlock(self) -> Result<(), redbell::Error> {
        match self {
            Held::Lock(g) => g.unlock().await,
            Held::Permit(p) => p.release().await,
        }
    }
}
