//! What `redbell run` holds: the Mutex (by default), the FairMutex
//! (`--fair`), a read (`-s`) or write (`-x`) hold of the RwLock, or one
//! permit of a semaphore (`--permits N`), as the library's
//! [`AnyGuard`]; and the owner note (`host:pid`) that `redbell status`
//! shows beside it. All are renewed, released and reported the same way.

use std::time::Duration;

use redbell::{AnyGuard, Client};

use super::RunArgs;

/// One acquisition and its owner note.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) guard: AnyGuard,
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

/// Acquires the lock `args` asks for, with a fixed lease of `--ttl` (the
/// lease `lease.rs` renews), waiting as `-n` and `-w` say; `None` when it
/// was held (`-n`) or the wait timed out (`-w`).
pub(super) async fn acquire(
    client: &Client,
    args: &RunArgs,
) -> Result<Option<Held>, redbell::Error> {
    let (name, ttl) = (args.name.as_str(), args.ttl);
    // Only the future `args` asks for is awaited; the others never run.
    let within = args.wait.unwrap_or_default();
    let guard = if let Some(permits) = args.permits {
        let s = client.semaphore(name, permits).with_lease(ttl);
        take(
            args,
            s.try_acquire(),
            s.acquire_timeout(within),
            s.acquire(),
        )
        .await
    } else if args.shared {
        let rw = client.rwlock(name).with_lease(ttl);
        take(args, rw.try_read(), rw.read_timeout(within), rw.read()).await
    } else if args.exclusive {
        let rw = client.rwlock(name).with_lease(ttl);
        take(args, rw.try_write(), rw.write_timeout(within), rw.write()).await
    } else if args.fair {
        let fair = client.fair_mutex(name).with_lease(ttl);
        take(
            args,
            fair.try_lock(),
            fair.lock_timeout(within),
            fair.lock(),
        )
        .await
    } else {
        let mutex = client.mutex(name).with_lease(ttl);
        take(
            args,
            mutex.try_lock(),
            mutex.lock_timeout(within),
            mutex.lock(),
        )
        .await
    }?;
    Ok(guard.map(|guard| Held {
        guard,
        client: client.clone(),
        note: owner_note(),
    }))
}

/// Awaits `now` (`-n`), `within` (`-w`) or `wait` (neither), as `args`
/// says, into an [`AnyGuard`]: `None` when the lock was held or the wait
/// timed out.
async fn take<G: Into<AnyGuard>>(
    args: &RunArgs,
    now: impl Future<Output = Result<Option<G>, redbell::Error>>,
    within: impl Future<Output = Result<G, redbell::Error>>,
    wait: impl Future<Output = Result<G, redbell::Error>>,
) -> Result<Option<AnyGuard>, redbell::Error> {
    let guard = if args.nonblock {
        now.await?
    } else if args.wait.is_some() {
        match within.await {
            Ok(guard) => Some(guard),
            Err(redbell::Error::Timeout) => None,
            Err(e) => return Err(e),
        }
    } else {
        Some(wait.await?)
    };
    Ok(guard.map(Into::into))
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
    /// Records (or refreshes) the owner note for `ttl`, for `redbell status`:
    /// best effort, as it only informs. One round trip.
    pub(super) async fn note_owner(&self, ttl: Duration) {
        let write =
            self.client
                .set_owner_note(self.guard.name(), self.guard.token(), &self.note, ttl);
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
        let (name, token) = (guard.name().to_owned(), guard.token().to_owned());
        let released = guard.unlock().await;
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
