//! A command connection that proves it is alive.
//!
//! A caller may give up before its response timeout fires (a
//! `tokio::time::timeout` shorter than `T`, as `redbell run` renews under
//! `ttl / 6`), dropping the command, and then no timeout ever reports the
//! connection. So every command on it is [`Watched`]: one whose future is
//! dropped unanswered, with nothing else answered on the connection since
//! its send, is followed by a `PING` on the same socket, and if nothing is
//! answered by `T` after the command's send the connection is replaced;
//! whoever gave up first, the connection is replaced `T` after the first
//! unanswered command. (The `PING` is what tells a silent connection from
//! a slow one whose reply to the dropped command went unseen; replies come
//! in order.) The hot path pays a clock reading, an atomic add and a
//! boxed future per command, and no lock; a dropped command on a connection that answered
//! anything since its send costs nothing more. On a cluster the watch
//! counts every node's answers: it sees all of them falling silent, not
//! one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

use super::{Conn, Inner, Manager};

/// A command connection handed out by [`Conn::manager`]: the manager, and
/// what its connection has answered. A request that goes unanswered (its
/// future dropped, or its response timeout fired) with nothing else
/// answered on the connection since it was sent is followed by a `PING`;
/// nothing answered a response timeout after its send, the connection has
/// fallen silent and [`Conn::recover`] replaces it. So a
/// caller that gives up before its own response timeout (a
/// `tokio::time::timeout` shorter than `T` around any call) still leads to
/// a fresh connection, like the response timeout it did not wait for.
pub(crate) struct Watched {
    pub(super) manager: Manager,
    /// `None` on the slow lane (a `WAIT` is silent by design).
    pub(super) watch: Option<Arc<Watch>>,
}

/// What one command connection has answered.
pub(super) struct Watch {
    /// The connection (a clone sharing its socket), for the probe.
    manager: Manager,
    /// Replies received on the connection, server errors included; only
    /// ever grows. A request that finds it unchanged a response timeout
    /// after its send had no answer to anything sent since.
    replies: AtomicU64,
    /// The client, for the recovery; a watch never keeps it alive.
    conn: Weak<Inner>,
    /// The client's response timeout `T`.
    response_timeout: Duration,
}

impl Watch {
    pub(super) fn new(
        manager: &Manager,
        conn: Weak<Inner>,
        response_timeout: Duration,
    ) -> Arc<Watch> {
        Arc::new(Watch {
            manager: manager.clone(),
            replies: AtomicU64::new(0),
            conn,
            response_timeout,
        })
    }

    /// A request sent at `sent`, when `seen` replies had come, went
    /// unanswered. Unless something was answered since, sends a `PING`
    /// after it on the same socket: a reply, or any other, before
    /// `sent + T` shows the connection alive (its reply to the dropped
    /// request came unseen, the replies coming in order); none, and the
    /// connection is replaced. Off the hot path: a connection that answers
    /// anything between a request's send and its drop never gets here, so
    /// a busy healthy one spawns nothing, and an idle one one `PING`.
    fn unanswered(self: &Arc<Self>, sent: Instant, seen: u64) {
        if self.replies.load(Ordering::Acquire) != seen {
            return;
        }
        // A future dropped outside a runtime (one shutting down) has
        // nothing to recover for.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let watch = self.clone();
        runtime.spawn(async move {
            let mut probe = watch.manager.clone();
            let cmd = redis::cmd("PING");
            let ping = cmd.query_async::<Value>(&mut probe);
            match tokio::time::timeout_at(sent + watch.response_timeout, ping).await {
                Ok(Ok(_)) => return, // answered: slow, not silent
                Ok(Err(e)) if e.code().is_some() => return,
                _ => {}
            }
            if watch.replies.load(Ordering::Acquire) != seen {
                return; // a reply came after `sent`: slow, not silent
            }
            let Some(inner) = watch.conn.upgrade() else {
                return;
            };
            // A connection replaced since `sent` is left alone (`opened`),
            // and many requests of one silent connection connect once.
            Conn(inner).recover(sent).await;
        });
    }
}

/// One request on a watched connection, from its send to its reply.
struct Pending<'a> {
    watch: &'a Arc<Watch>,
    sent: Instant,
    /// `watch.replies` at the send.
    seen: u64,
    /// Set when the request ended with an answer (or a closed socket,
    /// which the manager reconnects by itself).
    done: bool,
}

impl<'a> Pending<'a> {
    fn new(watch: &'a Arc<Watch>) -> Pending<'a> {
        Pending {
            watch,
            sent: Instant::now(),
            seen: watch.replies.load(Ordering::Acquire),
            done: false,
        }
    }

    /// The request's outcome: a reply (or a server error) counts as an
    /// answer; a response timeout is left to `drop`.
    fn ended<T>(&mut self, result: &RedisResult<T>) {
        match result {
            Ok(_) => {}
            Err(e) if e.is_timeout() => return,
            Err(e) if e.code().is_none() => {
                self.done = true; // dropped or refused: not an answer
                return;
            }
            Err(_) => {}
        }
        self.watch.replies.fetch_add(1, Ordering::AcqRel);
        self.done = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.watch.unanswered(self.sent, self.seen);
        }
    }
}

impl Watched {
    fn watched<'a, T: Send + 'a>(
        watch: Option<&'a Arc<Watch>>,
        request: RedisFuture<'a, T>,
    ) -> RedisFuture<'a, T> {
        let Some(watch) = watch else {
            return request;
        };
        let mut pending = Pending::new(watch);
        Box::pin(async move {
            let result = request.await;
            pending.ended(&result);
            result
        })
    }
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let request = self.manager.req_packed_command(cmd);
        Watched::watched(self.watch.as_ref(), request)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let request = self.manager.req_packed_commands(pipeline, offset, count);
        Watched::watched(self.watch.as_ref(), request)
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}
