//! [`PrivateRedis`]: the kit's [`Server`](redbell_testkit::Server) as the
//! tests start it (non-persistent, panicking when it cannot be started),
//! and a free port.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use redbell_testkit::{Server, ServerOptions};

/// A redis-server of the test's own on a free loopback port, killed on drop.
///
/// Started with `--save '' --appendonly no`, so a restart comes back empty.
/// The kit's [`Server`] methods (`url`, `port`, `kill`, `log_tail`, ...)
/// apply.
#[derive(Debug)]
pub struct PrivateRedis(Server);

impl PrivateRedis {
    /// Starts a server and waits until it answers PING.
    ///
    /// # Panics
    ///
    /// When redis-server cannot be started or does not answer within 20 s.
    pub async fn start() -> PrivateRedis {
        Self::start_with(ServerOptions::default()).await
    }

    /// Starts a server that requires `password` (`--requirepass`).
    ///
    /// # Panics
    ///
    /// As [`PrivateRedis::start`].
    pub async fn start_with_password(password: &str) -> PrivateRedis {
        Self::start_with(ServerOptions {
            password: Some(password.to_owned()),
            ..ServerOptions::default()
        })
        .await
    }

    /// Starts a server with the kit's `options`.
    ///
    /// # Panics
    ///
    /// As [`PrivateRedis::start`].
    pub async fn start_with(options: ServerOptions) -> PrivateRedis {
        PrivateRedis(
            Server::start(options)
                .await
                .unwrap_or_else(|e| panic!("private redis-server: {e}")),
        )
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        self.0.kill();
    }

    /// Kills the server and starts a fresh (empty) one on the same port.
    ///
    /// # Panics
    ///
    /// When it does not come back.
    pub async fn restart(&mut self) {
        self.0
            .restart(Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("restart the private redis-server: {e}"));
    }

    /// Starts the server process again after [`stop`](PrivateRedis::stop),
    /// and waits for PING.
    ///
    /// # Panics
    ///
    /// When it does not come back.
    pub async fn spawn(&mut self) {
        self.0
            .spawn()
            .await
            .unwrap_or_else(|e| panic!("start the private redis-server: {e}"));
    }
}

impl Deref for PrivateRedis {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.0
    }
}

impl DerefMut for PrivateRedis {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.0
    }
}

/// A loopback port nobody listens on right now ([`redbell_testkit::free_port`]).
///
/// # Panics
///
/// When there is none.
pub fn free_port() -> u16 {
    redbell_testkit::free_port().unwrap_or_else(|e| panic!("{e}"))
}
