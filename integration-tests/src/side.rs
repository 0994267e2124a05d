//! Runtimes that stand for other processes: [`Side`], which can be frozen,
//! and [`on_own_runtime`], which can be abandoned.

use std::future::Future;

use tokio::task::JoinHandle;

use crate::client;

/// A Tokio runtime (one thread) of its own, standing for another process:
/// freezing it ([`Side::freeze`]) stops its clients dead (they read
/// nothing, send nothing, run no timer) while their sockets stay open, like
/// a process that hangs or dies at a chosen moment. Stopped on drop.
#[derive(Debug)]
pub struct Side {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Keeps a [`Side`] frozen until dropped.
#[derive(Debug)]
pub struct Frozen {
    _thaw: std::sync::mpsc::Sender<()>,
}

impl Side {
    /// Starts the runtime on a thread of its own.
    pub fn start() -> Side {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("side runtime");
            handle_tx.send(rt.handle().clone()).unwrap();
            rt.block_on(async {
                let _ = stopped.await;
            });
        });
        Side {
            handle: handle_rx.recv().expect("side runtime handle"),
            stop: Some(stop),
        }
    }

    /// Spawns `future` on this runtime.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// A redbell client living on this runtime (its connections and
    /// background tasks freeze with it).
    pub async fn client(&self, url: &str) -> redbell::Client {
        let url = url.to_owned();
        self.spawn(async move { client(&url).await }).await.unwrap()
    }

    /// Blocks the runtime's only thread until the returned value is dropped.
    pub async fn freeze(&self) -> Frozen {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (thaw_tx, thaw_rx) = std::sync::mpsc::channel::<()>();
        self.spawn(async move {
            let _ = started_tx.send(());
            let _ = thaw_rx.recv(); // blocks the thread: nothing else runs
        });
        started_rx.await.expect("the side runtime froze");
        Frozen { _thaw: thaw_tx }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Runs the future `f` makes on a current-thread runtime of a new thread
/// (a separate "process" the test can block or abandon), and drops that
/// runtime, with every task still on it and without running them again,
/// when the future returns. Join the thread to know it is gone.
pub fn on_own_runtime<F, Fut>(f: F) -> std::thread::JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("own runtime");
        rt.block_on(f());
        drop(rt);
    })
}
