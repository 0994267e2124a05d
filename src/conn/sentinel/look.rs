//! One look at the sentinels: asking one ([`master_addr`]), the answers
//! in hand and whether they decide the look ([`Look`]), and the asks it
//! did not wait for ([`Unwaited`]).

use std::future::Future;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::{AsyncConnectionConfig, RedisError, RedisResult, Value};
use tokio::task::JoinSet;

use super::field;

/// Where one sentinel says the primary of `master` is, and the
/// configuration epoch of that answer: `SENTINEL MASTER` (whose
/// `config-epoch` counts the failovers), else `SENTINEL
/// get-master-addr-by-name` (epoch 0).
pub(super) async fn master_addr(
    sentinel: &redis::Client,
    master: &str,
    timeout: Duration,
) -> Result<Named, RedisError> {
    // redis-rs's own bounds (1 s to connect, 500 ms per reply) would cut a
    // slow sentinel off well within `timeout`: the caller's bound is ours.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let asked = tokio::time::timeout(timeout, async {
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let reply: RedisResult<Value> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(master)
            .query_async(&mut conn)
            .await;
        if let Ok(reply) = &reply {
            let port = field(reply, "port").and_then(|p| p.parse().ok());
            if let (Some(host), Some(port)) = (field(reply, "ip"), port) {
                let epoch = field(reply, "config-epoch")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(0);
                return Ok(Some(Named { host, port, epoch }));
            }
        }
        // Denied by the sentinel's ACL, or an answer without the fields.
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async::<Option<(String, u16)>>(&mut conn)
            .await
            .map(|addr| {
                addr.map(|(host, port)| Named {
                    host,
                    port,
                    epoch: 0,
                })
            })
    })
    .await;
    match asked {
        Ok(Ok(Some(named))) => Ok(named),
        Ok(Ok(None)) => Err(RedisError::from((
            redis::ErrorKind::Client,
            "the sentinels do not know this master",
            master.to_owned(),
        ))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "a sentinel did not answer in time",
        ))),
    }
}

/// The asks of one look that are still under way. What the look did not
/// wait for (it was decided, it failed, or it was dropped) is left to end
/// on its own in `left_to` (each is bounded by the connect timeout), so
/// that it still sets its sentinel's silent mark: dropped, a sentinel
/// marked silent once would keep the mark after it came back, and every
/// later look would be decided by whichever sentinel answers first,
/// however stale.
pub(super) struct Unwaited<'a, F: Future + Send + 'static>
where
    F::Output: Send,
{
    pub(super) asks: FuturesUnordered<F>,
    pub(super) left_to: &'a StdMutex<JoinSet<()>>,
}

impl<F: Future + Send + 'static> Drop for Unwaited<'_, F>
where
    F::Output: Send,
{
    fn drop(&mut self) {
        if self.asks.is_empty() {
            return;
        }
        let mut rest = std::mem::take(&mut self.asks);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime left to run them on
        };
        let mut set = self.left_to.lock().unwrap_or_else(|p| p.into_inner());
        while set.try_join_next().is_some() {} // those that ended
        set.spawn_on(
            async move { while rest.next().await.is_some() {} },
            &runtime,
        );
    }
}

/// A sentinel's answer: the primary's address and its configuration epoch.
pub(super) struct Named {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) epoch: u64,
}

impl Named {
    pub(super) fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Which sentinels of one look have answered (named a primary, failed or
/// timed out), and whether the answers in hand decide the look. Besides an
/// answer with a newer configuration epoch whose node answers `ROLE` as
/// master (which decides at once, in
/// [`Sentinels::ask`](super::Sentinels::ask)), it is decided when at least
/// one sentinel named a primary and every sentinel still asked timed out
/// the last time it was asked: a frozen or black-holed sentinel costs one
/// timeout once, not one every look. Otherwise the look waits for every
/// answer, each bounded by the connect timeout. A majority does not
/// decide: right after a failover only its leader may know the new epoch,
/// and two stale answers that come first would keep the client on the old
/// primary.
pub(super) struct Look {
    answered: Vec<bool>,
}

impl Look {
    pub(super) fn new(sentinels: usize) -> Look {
        Look {
            answered: vec![false; sentinels],
        }
    }

    pub(super) fn answered(&mut self, sentinel: usize) {
        self.answered[sentinel] = true;
    }

    /// Whether `named` answers (of the sentinels that have answered) decide
    /// the look, with `silent` the sentinels that timed out last time.
    pub(super) fn decided(&self, named: usize, silent: &[AtomicBool]) -> bool {
        named > 0
            && self
                .answered
                .iter()
                .zip(silent)
                .all(|(answered, silent)| *answered || silent.load(Ordering::Relaxed))
    }
}
