//! redbell clients with the settings the tests use.

use std::time::Duration;

use crate::unique;

/// The lease of a test lock that must not run out during the test: 30 s.
pub const LONG: Duration = Duration::from_secs(30);

/// A redbell client with the default settings.
///
/// # Panics
///
/// When the client cannot connect.
pub async fn client(url: &str) -> redbell::Client {
    redbell::Client::connect(url)
        .await
        .unwrap_or_else(|e| panic!("redbell cannot connect to {url}: {e}"))
}

/// A redbell client whose locks get `lease` by default, renewed every
/// `every`.
///
/// # Panics
///
/// When the client cannot connect.
pub async fn renewing_client(url: &str, lease: Duration, every: Duration) -> redbell::Client {
    redbell::Client::builder(url)
        .default_lease(lease)
        .renew_every(every)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("redbell cannot connect to {url}: {e}"))
}

/// Loads redbell's scripts into the server and opens `c`'s connections:
/// one lock and unlock of a throwaway name. (The first EVALSHA on a fresh
/// server is a NOSCRIPT, retried after SCRIPT LOAD: warm up before
/// counting commands or timing.)
///
/// # Panics
///
/// When the lock or unlock fails.
pub async fn warm_up(c: &redbell::Client) {
    c.mutex(&unique("warm"))
        .lock()
        .await
        .expect("warm-up lock")
        .unlock()
        .await
        .expect("warm-up unlock");
}
