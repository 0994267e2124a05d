//! The names of things in Redis: unique lock names, every key and channel
//! a lock uses, and the SHAs of redbell's scripts.

/// A lock name no other test (or earlier run) uses: `what-<uuid>`.
pub fn unique(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

/// The Redis key of lock `name` under the default prefix: `redbell:{name}`.
pub fn lock_key(name: &str) -> String {
    format!("redbell:{{{name}}}")
}

/// The fencing counter key of lock `name`: `redbell:{name}:fence`.
pub fn fence_key(name: &str) -> String {
    format!("redbell:{{{name}}}:fence")
}

/// The cluster hash tag of lock `name`, `{name}`: every key and channel of
/// the lock (lock key, fence, waiter queue, wake-up channels) contains it,
/// so a MONITOR line naming the lock in any way contains it too.
pub fn hash_tag(name: &str) -> String {
    format!("{{{name}}}")
}

/// The waiter queue of mutex `name`: `redbell:{name}:waiters` (a sorted
/// set of `<client id>:<waiter id>:<token>` members).
pub fn waiters_key(name: &str) -> String {
    format!("{}:waiters", lock_key(name))
}

/// The readers of rwlock `name`: `redbell:{name}:readers` (reader token ->
/// expiry in server ms).
pub fn readers_key(name: &str) -> String {
    format!("{}:readers", lock_key(name))
}

/// The waiting writers' intents of rwlock `name`: `redbell:{name}:writers`.
pub fn intents_key(name: &str) -> String {
    format!("{}:writers", lock_key(name))
}

/// The permit holders of semaphore `name`: `redbell:{name}:holders`
/// (holder token -> expiry in server ms).
pub fn holders_key(name: &str) -> String {
    format!("{}:holders", lock_key(name))
}

/// The waiter queue of semaphore `name`: `redbell:{name}:queue`.
pub fn queue_key(name: &str) -> String {
    format!("{}:queue", lock_key(name))
}

/// The permit count semaphore `name` was created with:
/// `redbell:{name}:permits`.
pub fn permits_key(name: &str) -> String {
    format!("{}:permits", lock_key(name))
}

/// The queue of fair mutex `name`: `redbell:{name}:fifo` (member ->
/// arrival in server µs).
pub fn fifo_key(name: &str) -> String {
    format!("{}:fifo", lock_key(name))
}

/// The queue expiries of fair mutex `name`: `redbell:{name}:fifo:expiry`
/// (member -> expiry in server ms).
pub fn fifo_expiry_key(name: &str) -> String {
    format!("{}:fifo:expiry", lock_key(name))
}

/// The wake-up channel of lock `name` for the client with id `client_id`
/// (the first field of its queue members): `redbell:{name}:wake:<id>`.
pub fn wake_channel(name: &str, client_id: &str) -> String {
    format!("{}:wake:{client_id}", lock_key(name))
}

/// The `SCAN` pattern matching every key of lock `name`: `redbell:{name}*`.
pub fn lock_pattern(name: &str) -> String {
    format!("redbell:{{{name}}}*")
}

/// A scratch key of the tests themselves in lock `name`'s hash slot:
/// `redbell-test:{name}:what`.
pub fn test_key(name: &str, what: &str) -> String {
    format!("redbell-test:{{{name}}}:{what}")
}

/// The SHA1 of the redbell script called `name` (`acquire`, `release`, ...).
///
/// # Panics
///
/// When redbell has no such script.
pub fn script_sha(name: &str) -> &'static str {
    redbell::scripts()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("redbell has no script called {name:?}"))
        .sha1
}

/// The source of the redbell script called `name`, shared code included, as
/// redbell sends it with `EVAL`.
///
/// # Panics
///
/// When redbell has no such script.
pub fn script_source(name: &str) -> &'static str {
    redbell::scripts()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("redbell has no script called {name:?}"))
        .source
}
