//! Finding a missing ACL permission at connect, rather than in the middle
//! of a hand-off.
//!
//! A user the server's ACL restricts (Redis 7 gives new users no channel
//! rights: `acl-pubsub-default resetchannels`) can take a lock, since the
//! acquire script only touches keys, and then fail where it hurts: the
//! release script deletes the key and is refused at its `PUBLISH` (a script
//! is not rolled back: the lock is free, but `unlock()` would report an
//! error), and every `SUBSCRIBE` of a waiter is refused. So
//! [`check`] asks before the client is handed out:
//!
//! 1. `ACL WHOAMI`, then one pipeline of `ACL DRYRUN <user> <command> ...`
//!    for every command redbell sends and every command its scripts run
//!    ([`COMMANDS`]), on keys and channels shaped like a lock's under the
//!    client's prefix. A refusal becomes [`Error::NoPermission`] naming
//!    the command and the server's reason. (`ACL DRYRUN` exists since
//!    Redis 7.0.)
//! 2. Where that cannot be asked (no ACL: Redis < 6; no `DRYRUN`: Redis
//!    6.x; `DRYRUN` itself denied, as for any user without `@admin`), one
//!    `PUBLISH` (`SPUBLISH` on a cluster) on a wake channel nobody listens
//!    to: the right users most often lack, found the same way. (It is
//!    also the first command of the connection, so a server that wants a
//!    password nobody gave, and says so only now with `NOAUTH`, fails the
//!    connect too.)
//!
//! Beyond that, refusals are found where they happen: a script or command
//! refused with `NOPERM` is [`Error::NoPermission`] (see
//! [`Error::from`](crate::Error)), a refused `SUBSCRIBE` fails the waiter
//! that asked with it instead of sending the hub reconnecting, and the
//! scripts' `PUBLISH` runs under `redis.pcall`, so a refused wake-up never
//! turns a release that happened into an error.

use redis::Value;

use crate::Error;
use crate::conn::Conn;
use crate::scripts;

/// Every command redbell may send, with arguments shaped like the real ones
/// (`{k}` stands for a lock key under the prefix, `{c}` for a wake channel).
/// `cluster` swaps the pub/sub commands for their sharded forms; `wait` is
/// only asked for when replication acknowledgements are configured.
const COMMANDS: &[&[&str]] = &[
    // The command connection: scripts, and the type check after WRONGTYPE.
    &["EVALSHA", "{sha}", "1", "{k}"],
    &["EVAL", "return 1", "1", "{k}"],
    &["TYPE", "{k}"],
    // The pub/sub connection.
    &["SUBSCRIBE", "{c}"],
    &["UNSUBSCRIBE", "{c}"],
    &["PING"],
    // Inside the scripts.
    &["GET", "{k}"],
    &["MGET", "{k}"],
    &["SET", "{k}", "v", "PX", "1"],
    &["DEL", "{k}"],
    &["EXISTS", "{k}"],
    &["PTTL", "{k}"],
    &["PEXPIRE", "{k}", "1"],
    &["TIME"],
    &["ZADD", "{k}", "1", "m"],
    &["ZREM", "{k}", "m"],
    &["ZRANGE", "{k}", "0", "0"],
    &["ZRANGEBYSCORE", "{k}", "0", "1"],
    &["ZREMRANGEBYSCORE", "{k}", "0", "1"],
    &["ZCOUNT", "{k}", "0", "1"],
    &["ZCARD", "{k}"],
    &["ZSCORE", "{k}", "m"],
    &["ZRANK", "{k}", "m"],
    &["ZMSCORE", "{k}", "m"],
    &["PUBLISH", "{c}", "m"],
];

/// Checks that the server lets this client's user run what a lock needs
/// under `prefix`; see the module docs. `wait`: replication
/// acknowledgements are configured (`WAIT` is checked too).
pub(crate) async fn check(conn: &Conn, prefix: &str, wait: bool) -> Result<(), Error> {
    let key = format!("{prefix}:{{redbell-acl-check}}");
    let channel = format!("{key}:wake:redbell-acl-check");
    let cluster = conn.is_cluster();
    if let Some(user) = whoami(conn).await {
        match dry_run(conn, &user, &key, &channel, cluster, wait).await {
            Ok(()) => return Ok(()),
            Err(Some(denied)) => return Err(denied),
            Err(None) => {} // DRYRUN cannot be asked: probe
        }
    }
    let publish = if cluster { "SPUBLISH" } else { "PUBLISH" };
    let probe: redis::RedisResult<Value> = redis::cmd(publish)
        .arg(&channel)
        .arg("")
        .query_async(&mut conn.manager())
        .await;
    match probe {
        // A server that wants a password nobody gave answers NOAUTH only
        // to the first command: this one.
        Err(e) if e.code() == Some("NOAUTH") => Err(Error::Redis(e)),
        Err(e) => match Error::from(e) {
            denied @ Error::NoPermission { .. } => Err(denied),
            other => {
                tracing::debug!(error = %other, "the PUBLISH probe failed; not checked");
                Ok(())
            }
        },
        Ok(_) => Ok(()),
    }
}

/// `ACL WHOAMI`; `None` when the server has no ACL or refuses it.
async fn whoami(conn: &Conn) -> Option<String> {
    redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async::<String>(&mut conn.manager())
        .await
        .inspect_err(|e| tracing::debug!(error = %e, "ACL WHOAMI refused; using the probe"))
        .ok()
}

/// One pipeline of `ACL DRYRUN`s. `Err(None)` when `DRYRUN` itself cannot
/// be asked.
async fn dry_run(
    conn: &Conn,
    user: &str,
    key: &str,
    channel: &str,
    cluster: bool,
    wait: bool,
) -> Result<(), Option<Error>> {
    let sha = scripts::scripts()
        .first()
        .map_or_else(String::new, |s| s.sha1.to_owned());
    let mut asked = Vec::new();
    let mut pipe = redis::pipe();
    let waits: &[&[&str]] = if wait { &[&["WAIT", "1", "1"]] } else { &[] };
    for command in COMMANDS.iter().chain(waits) {
        let name = match (cluster, command[0]) {
            (true, "SUBSCRIBE") => "SSUBSCRIBE",
            (true, "UNSUBSCRIBE") => "SUNSUBSCRIBE",
            (true, "PUBLISH") => "SPUBLISH",
            (_, name) => name,
        };
        let cmd = pipe.cmd("ACL").arg("DRYRUN").arg(user).arg(name);
        for arg in &command[1..] {
            match *arg {
                "{k}" => cmd.arg(key),
                "{c}" => cmd.arg(channel),
                "{sha}" => cmd.arg(&sha),
                other => cmd.arg(other),
            };
        }
        asked.push(name);
    }
    // On a cluster, every DRYRUN goes to one node (they name no key).
    let replies: Vec<Value> = match pipe.query_async(&mut conn.manager()).await {
        Ok(replies) => replies,
        Err(e) => {
            tracing::debug!(error = %e, "ACL DRYRUN refused; using the probe");
            return Err(None);
        }
    };
    for (name, reply) in asked.iter().zip(replies) {
        let text = match reply {
            Value::Okay => continue,
            Value::SimpleString(s) if s == "OK" => continue,
            Value::SimpleString(s) => s,
            Value::BulkString(b) if b == b"OK" => continue,
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::ServerError(e) => {
                tracing::debug!(error = ?e, "ACL DRYRUN failed; using the probe");
                return Err(None);
            }
            _ => continue,
        };
        return Err(Some(Error::NoPermission {
            command: (*name).to_owned(),
            detail: text,
        }));
    }
    Ok(())
}
