//! The signals `redbell run` and `redbell elect` handle themselves (and
//! forward to the command's group) instead of dying of them.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::fail::{EX_FAILURE, Failure};

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, received as a stream.
pub(crate) struct Signals([(Signal, tokio::signal::unix::Signal); 4]);

impl Signals {
    pub(crate) fn install() -> Result<Signals, Failure> {
        let one = |sig: Signal| {
            signal(SignalKind::from_raw(sig as i32))
                .map(|stream| (sig, stream))
                .map_err(|e| {
                    Failure::new(EX_FAILURE, format!("cannot install a {sig} handler: {e}"))
                })
        };
        Ok(Signals([
            one(Signal::SIGINT)?,
            one(Signal::SIGTERM)?,
            one(Signal::SIGHUP)?,
            one(Signal::SIGQUIT)?,
        ]))
    }

    /// The next signal received. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        let [(a, sa), (b, sb), (c, sc), (d, sd)] = &mut self.0;
        tokio::select! {
            Some(()) = sa.recv() => *a,
            Some(()) = sb.recv() => *b,
            Some(()) = sc.recv() => *c,
            Some(()) = sd.recv() => *d,
            else => std::future::pending().await,
        }
    }
}
