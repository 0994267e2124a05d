//! [`AnyGuard`]: one type for a hold of any kind, for code that takes a
//! lock whose kind is chosen at run time (as `redbell run` does: `--fair`,
//! `-s`, `-x`, `--permits`) and then renews, watches and releases it the
//! same way. Every kind's guard is the same acquisition underneath, so the
//! conversion only drops the kind's name: nothing is released, the lease
//! and its renewal carry on.

use crate::guard::guard_api;
use crate::{MutexGuard, Permit, ReadGuard, WriteGuard};

guard_api!(
    /// The hold of a [`MutexGuard`], [`ReadGuard`], [`WriteGuard`] or
    /// [`Permit`], whichever it came from (`From`): the same acquisition,
    /// with the same methods, so that code choosing the kind at run time
    /// needs no enum of its own.
    ///
    /// The kind's own rules stay those of the guard it came from: a read
    /// hold shares the lock with other readers, a permit is one of the
    /// semaphore's. Release it with [`unlock`](AnyGuard::unlock); dropping
    /// it releases in the background, as every guard does.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redbell::Error> {
    /// # let client = redbell::Client::connect("redis://127.0.0.1:6379").await?;
    /// # let shared = true;
    /// let rw = client.rwlock("config");
    /// let guard: redbell::AnyGuard = if shared {
    ///     rw.read().await?.into()
    /// } else {
    ///     rw.write().await?.into()
    /// };
    /// println!("holding {} with fence {}", guard.name(), guard.fence());
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    AnyGuard,
    "The fencing token of this acquisition, as the guard it came from gives \
     it: strictly greater than every fence handed out before for this name, by \
     any client. Pass it to the storage you protect.",
    "let guard: redbell::AnyGuard = client.mutex(\"ledger\").lock().await?.into();"
);

/// `impl From<$guard> for AnyGuard`: the same acquisition, moved.
macro_rules! from_guard {
    ($($guard:ident),*) => {$(
        impl From<$guard> for AnyGuard {
            fn from(guard: $guard) -> AnyGuard {
                AnyGuard(guard.0)
            }
        }
    )*};
}

from_guard!(MutexGuard, ReadGuard, WriteGuard, Permit);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<AnyGuard>();
    }
}
