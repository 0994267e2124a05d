//! Invoking one script: `EVALSHA`, then `EVAL` with the source after
//! `NOSCRIPT`, optionally pipelined with `WAIT` on the same connection.

use redis::{Cmd, FromRedisValue, RedisResult, Script, ToRedisArgs};

use super::PROTOCOL_VERSION;
use super::registry::Lua;
use crate::conn::Conn;
use crate::keys::Replication;

/// One script call being built. Like redis-rs's `ScriptInvocation` (EVALSHA,
/// and on `NOSCRIPT` — a flushed or promoted server — load and retry once),
/// but it can also be pipelined with `WAIT` on the same connection, and its
/// errors are reported to the [`Conn`] so a moved primary is noticed.
pub(crate) struct Call {
    script: &'static Lua,
    keys: Vec<Vec<u8>>,
    /// ARGV: [`PROTOCOL_VERSION`] first (every script checks it,
    /// `protocol.lua`), then the operation's own, in the order its `.lua`
    /// header lists from `ARGV[2]` on.
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(crate) fn new(script: &'static Lua) -> Call {
        Call {
            script,
            keys: Vec::new(),
            args: vec![PROTOCOL_VERSION.as_bytes().to_vec()],
        }
    }

    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Call {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Call {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn eval(&self, source: &str) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(source)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    fn evalsha(&self, script: &Script) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    /// The `EVALSHA` of this call, for a pipeline of many (whose caller
    /// handles `NOSCRIPT`, e.g. by [`invoke`](Self::invoke) alone).
    pub(crate) fn evalsha_cmd(&self, conn: &Conn) -> Cmd {
        self.evalsha(self.script.variant(conn.is_cluster()).1)
    }

    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &Conn) -> RedisResult<T> {
        Ok(self.run(conn, None).await?.0)
    }

    /// Runs the script, followed by `WAIT` when `wait` is given; returns the
    /// reply and how many replicas acknowledged.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        conn: &Conn,
        wait: Option<Replication>,
    ) -> RedisResult<(T, Option<u32>)> {
        // A call followed by WAIT blocks its connection until the replicas
        // answer: it takes the slow lane, so other locks' calls do not wait.
        let mut manager = match wait {
            None => conn.manager(),
            Some(_) => conn.slow_manager().await.inspect_err(|e| conn.report(e))?,
        };
        let (source, script) = self.script.variant(conn.is_cluster());
        // EVALSHA first; after NOSCRIPT (a flushed, restarted or promoted
        // node) EVAL with the source, which runs it and caches it on the
        // node that owns the keys (SCRIPT LOAD would go to every node of a
        // cluster, and fail if any one is unreachable).
        let mut command = self.evalsha(script);
        let mut by_source = false;
        loop {
            let result = match wait {
                None => command
                    .query_async::<T>(&mut manager)
                    .await
                    .map(|reply| (reply, None)),
                Some(w) => redis::pipe()
                    .add_command(command.clone())
                    .cmd("WAIT")
                    .arg(w.replicas())
                    .arg(w.timeout_ms)
                    .query_async::<(T, u32)>(&mut manager)
                    .await
                    .map(|(reply, acked)| (reply, Some(acked))),
            };
            match result {
                Err(e) if e.code() == Some("NOSCRIPT") && !by_source => {
                    command = self.eval(source);
                    by_source = true;
                }
                Err(e) => {
                    conn.report(&e);
                    return Err(e);
                }
                Ok(reply) => return Ok(reply),
            }
        }
    }
}
