//! What `redbell run` holds: the Mutex (by default), the FairMutex
//! (`--fair`), a read (`-s`) or write (`-x`) hold of the RwLock, or one
//! permit of a semaphore (`--permits N`); and the owner note (`host:pid`)
//! that `redbell status` shows beside it. All are renewed, released and
//! reported the same way.

use std::time::Duration;

use redbell::{Client, MutexGuard, Permit, ReadGuard, WriteGuard};

use super::RunArgs;

/// The guard of one acquisition, whatever its kind.
#[derive(Debug)]
enum Guard {
    Mutex(MutexGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Permit(Permit),
}

/// Calls `$method` on whichever guard `$guard` holds.
macro_rules! each {
    ($guard:expr, $g:ident => $call:expr) => {
        match $guard {
            Guard::Mutex($g) => $call,
            Guard::Read($g) => $call,
            Guard::Write($g) => $call,
            Guard::Permit($g) => $call,
        }
    };
}

/// One acquisition and its owner note.
#[derive(Debug)]
pub(super) struct Held {
    guard: Guard,
    client: Client,
    /// `host:pid` of this `redbell run`.
    note: String,
}

/// Which lock `args` asks for, for messages: "lock", "fair lock", ...
pub(super) fn what(args: &RunArgs) -> &'static str {
    if args.permits.is_some() {
        "a permit of semaphore"
    } else if args.shared {
        "read lock"
    } else if args.exclusive {
        "write lock"
    } else if args.fair {
        "fair lock"
    } else {
        "lock"
    }
}

/// Acquires the lock `args` asks for, with a fixed lease of `--ttl`,
/// waiting as `-n` and `-w` say; `None` when it was held (`-n`) or the wait
/// timed out (`-w`).
pub(super) async fn acquire(
    client: &Client,
    args: &RunArgs,
) -> Result<Option<Held>, redbell::Error> {
    let name = args.name.as_str();
    macro_rules! take {
        ($handle:expr, $lock:ident, $timeout:ident, $try:ident, $variant:path) => {{
            let handle = $handle;
            let guard = if args.nonblock {
                handle.$try().await?
            } else if let Some(wait) = args.wait {
                match handle.$timeout(wait).await {
                    Ok(guard) => Some(guard),
                    Err(redbell::Error::Timeout) => None,
                    Err(e) => return Err(e),
                }
            } else {
                Some(handle.$lock().await?)
            };
            guard.map($variant)
        }};
    }
    let guard = if let Some(permits) = args.permits {
        let semaphore = client.semaphore(name, permits).with_lease(args.ttl);
        take!(
            semaphore,
            acquire,
            acquire_timeout,
            try_acquire,
            Guard::Permit
        )
    } else if args.shared {
        let rw = client.rwlock(name).with_lease(args.ttl);
        take!(rw, read, read_timeout, try_read, Guard::Read)
    } else if args.exclusive {
        let rw = client.rwlock(name).with_lease(args.ttl);
        take!(rw, write, write_timeout, try_write, Guard::Write)
    } else if args.fair {
        let fair = client.fair_mutex(name).with_lease(args.ttl);
        take!(fair, lock, lock_timeout, try_lock, Guard::Mutex)
    } else {
        let mutex = client.mutex(name).with_lease(args.ttl);
        take!(mutex, lock, lock_timeout, try_lock, Guard::Mutex)
    };
    Ok(guard.map(|guard| Held {
        guard,
        client: client.clone(),
        note: owner_note(),
    }))
}

/// `host:pid` of this process.
fn owner_note() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "?".to_owned());
    format!("{host}:{}", std::process::id())
}

impl Held {
    pub(super) fn name(&self) -> &str {
        each!(&self.guard, g => g.name())
    }

    pub(super) fn token(&self) -> &str {
        each!(&self.guard, g => g.token())
    }

    pub(super) fn fence(&self) -> u64 {
        each!(&self.guard, g => g.fence())
    }

    /// Resets the lease to `lease` from now, if the hold is still ours.
    pub(super) async fn extend(&self, lease: Duration) -> Result<(), redbell::Error> {
        each!(&self.guard, g => g.extend(lease).await)
    }

    /// Records (or refreshes) the owner note for `ttl`, for `redbell status`:
    /// best effort, as it only informs. One round trip.
    pub(super) async fn note_owner(&self, ttl: Duration) {
        let write = self
            .client
            .set_owner_note(self.name(), self.token(), &self.note, ttl);
        let _ = tokio::time::timeout(ttl / 6, write).await;
    }

    /// Releases the hold, then removes the owner note (after the release,
    /// so that the next holder does not wait for it).
    pub(super) async fn unlock(self) -> Result<(), redbell::Error> {
        let Held {
            guard,
            client,
            note: _,
        } = self;
        let name = each!(&guard, g => g.name().to_owned());
        let token = each!(&guard, g => g.token().to_owned());
        let released = each!(guard, g => g.unlock().await);
        // Not while Redis fails: the note expires with the lease anyway.
        if !matches!(released, Err(redbell::Error::Redis(_))) {
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                client.clear_owner_note(&name, &token),
            )
            .await;
        }
        released
    }
}
