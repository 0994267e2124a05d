//! `redbell status`: what an operator wants to know about a lock.
//!
//! A semaphore keeps its own keys, which the lock inspect script does not
//! read: a name that shows nothing live as a lock is read once more as a
//! semaphore ([`semaphore_in_use`]), so `status NAME` shows every kind
//! without being told which.

use std::time::Duration;

use redbell::{Client, Holder, LockInfo, SemaphoreStatus};

use crate::connect::{GlobalArgs, connect};
use crate::fail::Failure;
use crate::table::{self, kind_name, millis};

/// Options of `redbell status`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::connect::REDIS_HINT, after_long_help = "\
Output: one line per lock, after a header: NAME, STATE (held, shared or
free), HOLDER (the owner token, as REDBELL_TOKEN gave it to the command), TTL
(the holder's remaining lease), FENCE (the last fencing token handed out),
WAITERS (clients queued for the lock, across all processes: a mutex's or fair
lock's queue, a read-write lock's waiting writers), KIND (mutex, fair,
rwlock or election, as the lock is in use), OWNER (host:pid of the `redbell
run` holding it; - for a holder that is no `redbell run`) and LEADER (an
election's leader: the value it proclaimed and its term; - otherwise, and
for a holder that has not proclaimed yet). A read-write lock held by readers
(STATE shared) has one line per reader. A name is one kind of lock at a
time: while an election leads, a mutex under its name is refused. A
semaphore in use has one line: STATE held while a permit is, HOLDER the
permits held out of the count (`2/3 permits`), TTL the soonest to expire,
WAITERS its queue (see --semaphore for each holder).

With --json, one object per lock and line:
  {\"name\":\"jobs\",\"kind\":\"mutex\",\"held\":true,\"holder\":\"m6f1c...\",\"owner\":\"web1:4242\",
   \"ttl_ms\":29871,\"fence\":1719...,\"waiters\":2}
holder, owner, ttl_ms and fence are null when unknown (ttl_ms is also null for
a key without expiry); kind is null for a lock not in use (or a holder token
of no known kind). holder is the exclusive holder (a read-write lock's
writer, an election's leader). An election with a leader also has
leader: {\"term\":1719...,\"value\":\"web1:8080\"}. A lock with read holds also has readers, a list of
{\"token\":...,\"owner\":...,\"ttl_ms\":...}, soonest expiry first. A semaphore in use
has kind \"semaphore\", holder null, ttl_ms the soonest expiry, and also
permits (the count) and holders, a list of {\"token\":...,\"ttl_ms\":...}.

With --semaphore, the names are semaphores: one line each with NAME, PERMITS
(the stored count, - when none is), HELD (live holders), WAITERS, FENCE and
HOLDERS (each holder's token and remaining lease). With --json:
  {\"name\":\"uploads\",\"permits\":4,\"holders\":[{\"token\":\"6f1c...\",\"ttl_ms\":29871}],\"waiters\":2,\"fence\":1719...}

Exit codes: 0 success, 2 usage error (e.g. an invalid lock name), 69 Redis
unreachable, 77 login refused or ACL denial, 78 configuration (bad database,
certificate), 1 any other failure.")]
pub struct StatusArgs {
    /// Print one JSON object per lock and line.
    #[arg(long)]
    pub json: bool,

    /// The names are semaphores (`redbell run --permits N`): show their
    /// holders and waiters.
    #[arg(long)]
    pub semaphore: bool,

    /// Names of the locks.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs `redbell status`.
pub async fn run(global: &GlobalArgs, args: &StatusArgs) -> Result<(), Failure> {
    let client = connect(global).await?;
    let target = global.target();
    if args.semaphore {
        return semaphores(&client, &target, args).await;
    }
    let mut rows = Vec::with_capacity(args.names.len());
    for name in &args.names {
        let info = client
            .inspect(name)
            .await
            .map_err(|e| Failure::input(&target, &format!("cannot read lock {name:?}"), &e))?;
        let semaphore = semaphore_in_use(&client, &info)
            .await
            .map_err(|e| Failure::input(&target, &format!("cannot read lock {name:?}"), &e))?;
        match (semaphore, args.json) {
            (Some(s), true) => println!("{}", semaphore_json(&s)),
            (Some(s), false) => rows.push(semaphore_row(&s)),
            (None, true) => println!("{}", json(&info)),
            (None, false) => rows.extend(self::rows(&info)),
        }
    }
    if !args.json {
        let header = [
            "NAME", "STATE", "HOLDER", "TTL", "FENCE", "WAITERS", "KIND", "OWNER", "LEADER",
        ];
        for line in table::lines(header, &rows) {
            println!("{line}");
        }
    }
    Ok(())
}

/// The semaphore `info.name`, if the name shows nothing live as a lock but
/// is in use as a semaphore (a permit count stored, a holder or a waiter).
/// One more script call, only for a name free as a lock.
pub async fn semaphore_in_use(
    client: &Client,
    info: &LockInfo,
) -> Result<Option<SemaphoreStatus>, redbell::Error> {
    if let Some(s) = &info.semaphore {
        return Ok(Some(s.clone())); // inspect read it
    }
    if info.kind.is_some() || info.holder.is_some() || !info.readers.is_empty() || info.waiters > 0
    {
        return Ok(None);
    }
    let s = client.semaphore_status(&info.name).await?;
    let in_use = s.permits.is_some() || !s.holders.is_empty() || s.waiters > 0;
    Ok(in_use.then_some(s))
}

/// `2/3 permits`: held out of the count (`?` when none is stored).
pub fn permits_held(s: &SemaphoreStatus) -> String {
    let count = s.permits.map_or_else(|| "?".to_owned(), |p| p.to_string());
    format!("{}/{count} permits", s.holders.len())
}

/// The table's line for a semaphore in use.
fn semaphore_row(s: &SemaphoreStatus) -> [String; 9] {
    let dash = || "-".to_owned();
    [
        s.name.clone(),
        if s.holders.is_empty() { "free" } else { "held" }.to_owned(),
        permits_held(s),
        s.holders
            .first()
            .map_or_else(dash, |(_, ttl)| seconds(*ttl)),
        s.fence.map_or_else(dash, |f| f.to_string()),
        s.waiters.to_string(),
        "semaphore".to_owned(),
        dash(),
        dash(),
    ]
}

/// The `--json` line for a semaphore in use.
fn semaphore_json(s: &SemaphoreStatus) -> serde_json::Value {
    let holders: Vec<_> = s
        .holders
        .iter()
        .map(|(token, ttl)| serde_json::json!({"token": token, "ttl_ms": millis(Some(*ttl))}))
        .collect();
    serde_json::json!({
        "name": s.name,
        "kind": "semaphore",
        "held": !s.holders.is_empty(),
        "holder": null,
        "owner": null,
        "ttl_ms": s.holders.first().and_then(|(_, ttl)| millis(Some(*ttl))),
        "fence": s.fence,
        "waiters": s.waiters,
        "permits": s.permits,
        "holders": holders,
    })
}

/// `redbell status --semaphore`.
async fn semaphores(client: &Client, url: &str, args: &StatusArgs) -> Result<(), Failure> {
    let mut rows = Vec::with_capacity(args.names.len());
    for name in &args.names {
        let s = client
            .semaphore_status(name)
            .await
            .map_err(|e| Failure::input(url, &format!("cannot read semaphore {name:?}"), &e))?;
        if args.json {
            let holders: Vec<_> = s
                .holders
                .iter()
                .map(|(token, ttl)| serde_json::json!({"token": token, "ttl_ms": millis(Some(*ttl))}))
                .collect();
            let line = serde_json::json!({
                "name": s.name,
                "permits": s.permits,
                "holders": holders,
                "waiters": s.waiters,
                "fence": s.fence,
            });
            println!("{line}");
        } else {
            let dash = || "-".to_owned();
            let holders: Vec<String> = s
                .holders
                .iter()
                .map(|(token, ttl)| format!("{token}({})", seconds(*ttl)))
                .collect();
            rows.push([
                s.name.clone(),
                s.permits.map_or_else(dash, |p| p.to_string()),
                s.holders.len().to_string(),
                s.waiters.to_string(),
                s.fence.map_or_else(dash, |f| f.to_string()),
                if holders.is_empty() {
                    dash()
                } else {
                    holders.join(",")
                },
            ]);
        }
    }
    if !args.json {
        let header = ["NAME", "PERMITS", "HELD", "WAITERS", "FENCE", "HOLDERS"];
        for line in table::lines(header, &rows) {
            println!("{line}");
        }
    }
    Ok(())
}

/// One line of `--json` output.
#[derive(serde::Serialize)]
struct Json<'a> {
    name: &'a str,
    kind: Option<&'static str>,
    held: bool,
    holder: Option<&'a str>,
    owner: Option<&'a str>,
    ttl_ms: Option<u64>,
    fence: Option<u64>,
    waiters: u64,
    /// Only for a lock with read holds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    readers: Vec<JsonReader<'a>>,
    /// Only for an election with a leader.
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<JsonLeader<'a>>,
}

#[derive(serde::Serialize)]
struct JsonLeader<'a> {
    term: u64,
    value: &'a str,
}

#[derive(serde::Serialize)]
struct JsonReader<'a> {
    token: &'a str,
    owner: Option<&'a str>,
    ttl_ms: Option<u64>,
}

fn json(info: &LockInfo) -> String {
    let holder = info.holder.as_ref();
    let line = Json {
        name: &info.name,
        kind: kind_name(info.kind),
        held: holder.is_some() || !info.readers.is_empty(),
        holder: holder.map(|h| h.token.as_str()),
        owner: holder.and_then(|h| h.note.as_deref()),
        ttl_ms: holder.and_then(|h| millis(h.ttl)),
        fence: info.fence,
        waiters: info.waiters,
        readers: info
            .readers
            .iter()
            .map(|r| JsonReader {
                token: &r.token,
                owner: r.note.as_deref(),
                ttl_ms: millis(r.ttl),
            })
            .collect(),
        leader: info.leader.as_ref().map(|l| JsonLeader {
            term: l.term,
            value: &l.value,
        }),
    };
    // Strings, numbers and options only: serialization cannot fail.
    serde_json::to_string(&line).unwrap_or_default()
}

/// The table's lines for one lock: one per hold, one if it is free.
fn rows(info: &LockInfo) -> Vec<[String; 9]> {
    let dash = || "-".to_owned();
    let row = |state: &str, hold: Option<&Holder>| {
        [
            info.name.clone(),
            state.to_owned(),
            hold.map_or_else(dash, |h| h.token.clone()),
            match hold.map(|h| h.ttl) {
                Some(Some(ttl)) => seconds(ttl),
                Some(None) => "no expiry".to_owned(),
                None => dash(),
            },
            info.fence.map_or_else(dash, |f| f.to_string()),
            info.waiters.to_string(),
            kind_name(info.kind).map_or_else(dash, str::to_owned),
            hold.and_then(|h| h.note.clone()).unwrap_or_else(dash),
            match (&info.leader, hold.is_some() && state == "held") {
                (Some(l), true) => format!("{} (term {})", l.value, l.term),
                _ => dash(),
            },
        ]
    };
    let mut rows: Vec<_> = info
        .holder
        .iter()
        .map(|h| row("held", Some(h)))
        .chain(info.readers.iter().map(|r| row("shared", Some(r))))
        .collect();
    if rows.is_empty() {
        rows.push(row("free", None));
    }
    rows
}

fn seconds(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}
