//! The RAII parts of one acquisition: its tally in the client's counters
//! (cancelled when its future is dropped), its place in the `waiters`
//! gauge while parked, and the background release of an attempt whose
//! outcome was never read.

use std::sync::Arc;

use tokio::time::Instant;

use super::Acquirer;
use crate::Error;
use crate::client::Client;
use crate::guard::Acquisition;
use crate::keys::LockKeys;
use crate::stats::{Counters, Outcome};

/// Counts one acquisition's outcome when it ends, or as cancelled when its
/// future is dropped first. Lives in every parked `lock()` future: it
/// keeps the acquirer, not copies of what it can read from it.
pub(super) struct Tally<'a> {
    acquirer: &'a Acquirer,
    started: Instant,
    /// The acquisition's span, when it is enabled (boxed: the common
    /// disabled span would cost every parked future its 40 bytes).
    span: Option<Box<tracing::Span>>,
    ended: bool,
}

impl<'a> Tally<'a> {
    pub(super) fn new(acquirer: &'a Acquirer, span: tracing::Span) -> Tally<'a> {
        Tally {
            acquirer,
            started: Instant::now(),
            span: (!span.is_disabled()).then(|| Box::new(span)),
            ended: false,
        }
    }

    pub(super) fn end(&mut self, outcome: Outcome) {
        self.ended = true;
        let waited = self.started.elapsed();
        let acquirer = self.acquirer;
        acquirer
            .client
            .0
            .counters
            .acquisition(acquirer.kind, outcome, waited, acquirer.name());
        if let Some(span) = &self.span {
            span.record("outcome", format_args!("{outcome:?}"));
            span.record(
                "waited_us",
                u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
            );
        }
    }

    /// Runs `poll` (a poll of the acquisition's future) in its span, when
    /// that is enabled: what `Instrument` does, without a second handle on
    /// the span (40 bytes) in every parked future.
    pub(super) fn in_span<T>(&self, poll: impl FnOnce() -> T) -> T {
        let _entered = self.span.as_deref().map(tracing::Span::enter);
        poll()
    }

    /// Ends with a failure: counts the error, then the outcome.
    pub(super) fn failed(&mut self, e: &Error) {
        let acquirer = self.acquirer;
        acquirer.client.0.counters.failed(e, acquirer.name());
        self.end(Outcome::Error);
    }

    /// Ends a `lock` or `lock_timeout` with its result.
    pub(super) fn end_with(&mut self, result: &Result<Acquisition, Error>) {
        match result {
            Ok(held) => {
                if let Some(span) = &self.span {
                    span.record("fence", held.fence);
                }
                self.end(Outcome::Acquired);
            }
            Err(Error::Timeout) => self.end(Outcome::Timeout),
            Err(e) => self.failed(e),
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.end(Outcome::Cancelled);
        }
    }
}

/// Counts a waiter in the client's `waiters` gauge while it lives.
pub(super) struct Parked<'a>(&'a Counters);

impl<'a> Parked<'a> {
    pub(super) fn new(counters: &'a Counters) -> Parked<'a> {
        counters.waiters(1);
        Parked(counters)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.waiters(-1);
    }
}

/// Releases an acquire attempt's token in the background if the attempt's
/// future is dropped (or fails) before its outcome is known.
pub(super) struct InFlight<'a> {
    pub(super) client: &'a Client,
    pub(super) keys: &'a Arc<LockKeys>,
    /// `Some` while the outcome is unknown.
    pub(super) token: Option<&'a str>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            self.client
                .0
                .release_in_background(self.keys.clone(), token.to_owned());
        }
    }
}
