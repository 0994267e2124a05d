//! Background tasks owned by a handle.

use tokio::task::JoinHandle;

/// Aborts the task when dropped, so a background task lives exactly as long
/// as the handle that owns it.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
