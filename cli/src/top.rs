//! `redbell top`: a live view of the busiest locks, refreshed once a
//! second, at a cost per refresh the options bound (see the help text).
//!
//! Each refresh: up to `--max-scans` `SCAN` pages (continuing the cursor
//! of the refresh before, so a large keyspace is covered over several
//! refreshes) find lock names by their keys; then one pipeline of
//! the inspect script for at most `--max-locks` of the names known (the
//! ones busy at the last refresh first, then those read least recently).
//! With NAMES, no `SCAN`: one pipeline for those names.
//!
//! A semaphore keeps keys of its own, which the inspect script does not
//! read: a name known as a semaphore is read with `semaphore_status`
//! *instead of* the inspect script (these calls sent at once, so pipelined
//! on the client's connection), which keeps the cost at one script call
//! per name. `SCAN` tells which names are semaphores (a key only a
//! semaphore has); for NAMES given, a name that shows nothing live as a
//! lock the first time it is read is read as a semaphore once more, to
//! learn which it is ([`Seen::semaphore`]).
//!
//! # Rates
//!
//! A fence is the server's clock in µs at each acquisition (or the last
//! fence + 1, if acquisitions come faster), so the count of acquisitions
//! between two refreshes cannot be read from it. What can: whether the
//! fence advanced (at least one acquisition, which is a new holder: a
//! hand-off if the lock was contended). HAND-OFFS/S is that count over the
//! last 10 refreshes, per second: a lower bound, at most one per refresh.
//! FENCE/S is the fence's advance per second between the last two
//! refreshes, in fence units (µs of server time): about 1,000,000 for a
//! lock acquired in every interval, 0 for an idle one.

use std::collections::{HashMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redbell::{Client, LockInfo, SemaphoreStatus};

use crate::connect::{GlobalArgs, connect};
use crate::fail::{EX_USAGE, Failure};
use crate::table::{self, kind_name, millis};

/// Refreshes remembered per lock for its hand-off rate.
const WINDOW: usize = 10;
/// Lock names remembered at most (the least recently read idle ones are
/// forgotten first).
const MAX_KNOWN: usize = 10_000;

/// Options of `redbell top`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::connect::REDIS_HINT, after_long_help = "\
Shows the busiest locks under --prefix (or the NAMES given), refreshed
every --interval: NAME, KIND (mutex, fair, rwlock, election or semaphore, -
when no kind is live), HOLDER (the owner token; rN for N read holds; a
semaphore's permits held out of its count, 2/3), TTL (the holder's
remaining lease; a semaphore's soonest to expire), WAITERS (clients queued, across all processes),
HANDOFFS/S and FENCE/S, and OWNER (host:pid of a `redbell run` holder).
Sorted by waiters, then hand-offs, then held before free; --limit rows.

HANDOFFS/S: of the last 10 refreshes, those that saw the lock's fence
advance (at least one new holder since the refresh before), per second. A
lower bound: a fence is the server's clock in µs at each acquisition, so how
many acquisitions happened between two refreshes cannot be told, only
whether one did; it saturates at one per refresh. FENCE/S: the fence's
advance per second between the last two refreshes, in fence units (µs of
server time): about 1000000 for a lock acquired in every interval, 0 for an
idle one. Both are - until a lock has been read twice (always with --once).
Read holds do not advance a fence: for a read-write lock both count writers
only. An election shows as one lock, its holder the leader (see `redbell
status` for its term and value); a semaphore as one line (see `redbell
status --semaphore` for each holder).

Cost per refresh, in commands sent to Redis: with NAMES, one pipeline of
one inspect script call (EVALSHA) per name; otherwise at most --max-scans
SCAN calls (COUNT --scan-count, MATCH PREFIX:{--match}*; continuing
where the last refresh stopped, so a large keyspace is covered over several
refreshes) and one pipeline of at most --max-locks EVALSHA calls. With the
defaults: at most 10 SCAN + 200 EVALSHA, in at most 11 round trips; each
inspect call runs about 9 reads inside Redis. A name known as a semaphore
(SCAN saw a key only a semaphore has) is read by the semaphore status script
instead (these calls sent together: one more round trip). With NAMES, a name
that shows nothing live as a lock the first time (or after its fence
advanced) is read once more as a semaphore, to learn which it is; inspect in
the JSON counts these too. (After a SCRIPT FLUSH, the
first refresh sends each call once more, loading the script.) A Redis
Cluster cannot be scanned: name the locks.

With --json, one JSON document per refresh and line (with --once: one):
  {\"refresh\":1,\"at_ms\":1719...,\"known\":12,\"commands\":{\"scan\":1,\"inspect\":12},
   \"locks\":[{\"name\":\"jobs\",\"kind\":\"mutex\",\"held\":true,\"holder\":\"m6f1c...\",
   \"owner\":\"web1:4242\",\"ttl_ms\":29871,\"readers\":0,\"waiters\":2,\"fence\":1719...,
   \"handoffs_per_s\":0.8,\"fence_per_s\":1000213.0}]}
A semaphore in use has kind \"semaphore\", holder null, and also permits (its
count) and permits_held.
commands counts what this refresh sent. A lock whose read failed has an
\"error\" instead of its state.

Exit codes: 0 success (--once printed, or interrupted), 2 usage error (an
invalid lock name or prefix, a Redis Cluster without NAMES), 69 Redis
unreachable, 77 login refused or ACL denial, 78 configuration (bad database,
certificate), 1 any other failure.")]
pub struct TopArgs {
    /// Print one snapshot and exit.
    #[arg(long)]
    pub once: bool,

    /// Print JSON: one document per refresh and line.
    #[arg(long)]
    pub json: bool,

    /// Only the lock names matching this Redis glob (`*`, `?`, `[...]`).
    #[arg(long = "match", value_name = "GLOB", default_value = "*")]
    pub pattern: String,

    /// Rows shown (the busiest first).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,

    /// Locks inspected per refresh at most (one pipeline).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_locks: u32,

    /// SCAN calls per refresh at most.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_scans: u32,

    /// The COUNT of each SCAN (keys the server looks at per call).
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub scan_count: u32,

    /// Time between refreshes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,

    /// Names of the locks to show (default: every lock found under --prefix).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

/// Runs `redbell top`.
pub async fn run(global: &GlobalArgs, args: &TopArgs) -> Result<(), Failure> {
    if !global.cluster.is_empty() && args.names.is_empty() {
        return Err(Failure::new(
            EX_USAGE,
            "a Redis Cluster cannot be scanned: name the locks (redbell top NAME...)",
        ));
    }
    if args.interval.is_zero() {
        return Err(Failure::new(EX_USAGE, "--interval must not be zero"));
    }
    let client = connect(global).await?;
    let target = global.target();
    let mut top = Top::new(args);
    let tty = std::io::stdout().is_terminal();
    let mut next = tokio::time::Instant::now();
    loop {
        let frame = match top.refresh(&client).await {
            Ok(frame) => frame,
            Err(e) if args.once => {
                return Err(Failure::input(&target, "cannot read the locks", &e));
            }
            Err(e) if matches!(e, redbell::Error::InvalidName { .. }) => {
                return Err(Failure::input(&target, "cannot read the locks", &e));
            }
            Err(e) => {
                eprintln!("redbell: cannot read the locks ({e}); retrying");
                next += args.interval;
                tokio::time::sleep_until(next).await;
                continue;
            }
        };
        let text = if args.json {
            frame.json(args.limit)
        } else {
            frame.table(&target, global.prefix(), args, tty)
        };
        let mut out = std::io::stdout().lock();
        let written = writeln!(out, "{text}").and_then(|()| out.flush());
        if written.is_err() || args.once {
            return Ok(()); // a closed pipe ends the view
        }
        drop(out);
        next += args.interval;
        tokio::time::sleep_until(next).await;
    }
}

/// What `top` remembers of one lock between refreshes.
#[derive(Debug, Default)]
struct Seen {
    /// The fence at the last read, and when that read was.
    last: Option<(Option<u64>, Instant)>,
    /// The refresh that last read it (0: never).
    read_at: u64,
    /// Busy at the last read: held, waited for, or its fence advanced.
    busy: bool,
    /// Per read after the first: when the read before it was, when it
    /// was, and whether the fence had advanced in between.
    history: VecDeque<(Instant, Instant, bool)>,
    /// The fence's advance per second between the last two reads.
    fence_per_s: Option<f64>,
    /// What the name is known as: `Some(true)` a semaphore (read with
    /// `semaphore_status` only), `Some(false)` not one, `None` not known
    /// yet (a NAME not read yet, or a semaphore no longer in use).
    semaphore: Option<bool>,
}

impl Seen {
    /// Takes in a read of the lock made at `now`: its fence, and whether
    /// it is held or waited for.
    fn update(&mut self, fence: Option<u64>, live: bool, now: Instant, refresh: u64) {
        let advanced = match self.last {
            Some((before, at)) => {
                let delta = fence.unwrap_or(0).saturating_sub(before.unwrap_or(0));
                let secs = now.duration_since(at).as_secs_f64();
                self.fence_per_s = (secs > 0.0).then(|| delta as f64 / secs);
                self.history.push_back((at, now, delta > 0));
                if self.history.len() > WINDOW {
                    self.history.pop_front();
                }
                delta > 0
            }
            None => false,
        };
        self.last = Some((fence, now));
        self.read_at = refresh;
        self.busy = advanced || live;
    }

    /// Refreshes that saw the fence advance, per second of the window
    /// (from the read before the oldest kept to the latest); `None` until
    /// two reads.
    fn handoffs_per_s(&self) -> Option<f64> {
        let (from, _, _) = self.history.front()?;
        let (_, to, _) = self.history.back()?;
        let secs = to.duration_since(*from).as_secs_f64();
        let seen = self.history.iter().filter(|(_, _, a)| *a).count();
        Some(if secs > 0.0 { seen as f64 / secs } else { 0.0 })
    }
}

/// The view's state across refreshes.
struct Top<'a> {
    args: &'a TopArgs,
    /// Lock names found so far, with what was seen of them.
    known: HashMap<String, Seen>,
    /// Where the next SCAN continues (0: a new pass).
    cursor: u64,
    refresh: u64,
}

/// One refresh's result.
struct Frame<'a> {
    refresh: u64,
    at_ms: u64,
    known: usize,
    scans: u32,
    inspected: usize,
    /// The locks read, busiest first.
    rows: Vec<Row<'a>>,
}

struct Row<'a> {
    name: String,
    info: Result<State, redbell::Error>,
    seen: Option<&'a Seen>,
}

/// What one read of a name found.
enum State {
    Lock(LockInfo),
    Semaphore(SemaphoreStatus),
}

impl State {
    fn fence(&self) -> Option<u64> {
        match self {
            State::Lock(info) => info.fence,
            State::Semaphore(s) => s.fence,
        }
    }

    /// Held or waited for.
    fn live(&self) -> bool {
        match self {
            State::Lock(i) => i.holder.is_some() || !i.readers.is_empty() || i.waiters > 0,
            State::Semaphore(s) => !s.holders.is_empty() || s.waiters > 0,
        }
    }
}

impl<'a> Top<'a> {
    fn new(args: &'a TopArgs) -> Top<'a> {
        let mut known = HashMap::new();
        for name in &args.names {
            known.insert(name.clone(), Seen::default());
        }
        Top {
            args,
            known,
            cursor: 0,
            refresh: 0,
        }
    }

    /// One refresh: find names (unless given), read the chosen ones in one
    /// pipeline.
    async fn refresh(&mut self, client: &Client) -> Result<Frame<'_>, redbell::Error> {
        self.refresh += 1;
        let mut scans = 0;
        if self.args.names.is_empty() {
            while scans < self.args.max_scans {
                let page = client
                    .scan_locks(self.cursor, &self.args.pattern, self.args.scan_count)
                    .await?;
                scans += 1;
                self.cursor = page.cursor;
                for name in page.names {
                    self.known.entry(name).or_default();
                }
                for name in page.semaphores {
                    self.known.entry(name).or_default().semaphore = Some(true);
                }
                if self.cursor == 0 {
                    break; // a whole pass: the next refresh starts another
                }
            }
            self.forget();
        }
        let chosen = self.choose();
        let (semaphores, locks): (Vec<String>, Vec<String>) = chosen
            .into_iter()
            .partition(|n| self.known.get(n).is_some_and(|s| s.semaphore == Some(true)));
        let names: Vec<&str> = locks.iter().map(String::as_str).collect();
        let mut infos = client.inspect_many(&names).await?;
        // A NAME that is no lock name is a usage error, as for `status`.
        if let Some(bad) = infos
            .iter()
            .position(|i| matches!(i, Err(redbell::Error::InvalidName { .. })))
        {
            return Err(infos
                .swap_remove(bad)
                .err()
                .unwrap_or(redbell::Error::Closed));
        }
        // NAMES not known yet that show nothing live as a lock: learn
        // whether they are semaphores (once each).
        let learn: Vec<String> = if self.args.names.is_empty() {
            Vec::new()
        } else {
            locks
                .iter()
                .zip(&infos)
                .filter(|(n, info)| {
                    let Ok(i) = info else { return false };
                    let free = i.kind.is_none() && i.holder.is_none() && i.readers.is_empty();
                    // Not known, or known as no semaphore but acquired since
                    // (a semaphore's acquisitions raise the name's fence too).
                    let ask = self.known.get(*n).is_some_and(|s| match s.semaphore {
                        None => true,
                        Some(known) => !known && s.last.is_some_and(|(f, _)| i.fence > f),
                    });
                    free && i.waiters == 0 && ask
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        let mut read_as_semaphores = read_semaphores(client, &semaphores).await?;
        let learned = read_semaphores(client, &learn).await?;
        let now = Instant::now();
        let mut read: Vec<(String, Result<State, redbell::Error>)> =
            Vec::with_capacity(locks.len() + semaphores.len());
        for (name, info) in locks.into_iter().zip(infos) {
            let mut state = info.map(State::Lock);
            if let Some(at) = learn.iter().position(|n| *n == name) {
                let s = learned.get(at).cloned().flatten();
                let in_use = s.as_ref().is_some_and(semaphore_in_use);
                if let Some(seen) = self.known.get_mut(&name) {
                    seen.semaphore = Some(in_use);
                }
                if let (true, Some(s)) = (in_use, s) {
                    state = Ok(State::Semaphore(s));
                }
            }
            read.push((name, state));
        }
        for (name, s) in semaphores.into_iter().zip(read_as_semaphores.drain(..)) {
            let s = s.ok_or(redbell::Error::Closed);
            if let (Ok(s), Some(seen)) = (&s, self.known.get_mut(&name))
                && !semaphore_in_use(s)
            {
                seen.semaphore = None; // no longer one: inspect it next time
            }
            read.push((name, s.map(State::Semaphore)));
        }
        for (name, state) in &read {
            if let (Ok(state), Some(seen)) = (state, self.known.get_mut(name)) {
                seen.update(state.fence(), state.live(), now, self.refresh);
            }
        }
        let inspected = read.len() + learn.len();
        let mut rows: Vec<Row<'_>> = read
            .into_iter()
            .map(|(name, info)| Row {
                seen: self.known.get(&name),
                name,
                info,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.rank()
                .partial_cmp(&a.rank())
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(Frame {
            refresh: self.refresh,
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            known: self.known.len(),
            scans,
            inspected,
            rows,
        })
    }

    /// The names to read this refresh: all given NAMES; else at most
    /// `--max-locks`, those busy at their last read first, then those read
    /// least recently.
    fn choose(&self) -> Vec<String> {
        if !self.args.names.is_empty() {
            return self.args.names.clone();
        }
        let mut names: Vec<(&String, &Seen)> = self.known.iter().collect();
        names.sort_by(|(an, a), (bn, b)| {
            b.busy
                .cmp(&a.busy)
                .then(a.read_at.cmp(&b.read_at))
                .then_with(|| an.cmp(bn))
        });
        names
            .into_iter()
            .take(self.args.max_locks as usize)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Keeps at most [`MAX_KNOWN`] names: forgets idle ones read longest ago.
    fn forget(&mut self) {
        if self.known.len() <= MAX_KNOWN {
            return;
        }
        let mut idle: Vec<(String, u64)> = self
            .known
            .iter()
            .filter(|(_, s)| !s.busy)
            .map(|(n, s)| (n.clone(), s.read_at))
            .collect();
        idle.sort_by_key(|(_, at)| *at);
        let excess = self.known.len() - MAX_KNOWN;
        for (name, _) in idle.into_iter().take(excess) {
            self.known.remove(&name);
        }
    }
}

/// Whether a semaphore is in use: a permit count stored, a holder or a
/// waiter.
fn semaphore_in_use(s: &SemaphoreStatus) -> bool {
    s.permits.is_some() || !s.holders.is_empty() || s.waiters > 0
}

/// `semaphore_status` of each of `names`, all sent at once (so pipelined
/// on the client's connection); in their order.
async fn read_semaphores(
    client: &Client,
    names: &[String],
) -> Result<Vec<Option<SemaphoreStatus>>, redbell::Error> {
    let mut reads = tokio::task::JoinSet::new();
    for (at, name) in names.iter().enumerate() {
        let (client, name) = (client.clone(), name.clone());
        reads.spawn(async move { (at, client.semaphore_status(&name).await) });
    }
    let mut found = vec![None; names.len()];
    while let Some(joined) = reads.join_next().await {
        // A read task cannot panic; one that did leaves its name unread.
        if let Ok((at, read)) = joined
            && let Some(slot) = found.get_mut(at)
        {
            *slot = Some(read?);
        }
    }
    Ok(found)
}

impl Row<'_> {
    /// Busier is greater: waiters, then hand-offs, then held.
    fn rank(&self) -> (u64, f64, bool) {
        match &self.info {
            Ok(State::Semaphore(s)) => (
                s.waiters,
                self.handoffs_per_s().unwrap_or(0.0),
                !s.holders.is_empty(),
            ),
            Ok(State::Lock(info)) => (
                info.waiters,
                self.seen.and_then(Seen::handoffs_per_s).unwrap_or(0.0),
                info.holder.is_some() || !info.readers.is_empty(),
            ),
            Err(_) => (0, 0.0, false),
        }
    }

    fn handoffs_per_s(&self) -> Option<f64> {
        self.seen.and_then(Seen::handoffs_per_s)
    }

    fn fence_per_s(&self) -> Option<f64> {
        self.seen.and_then(|s| s.fence_per_s)
    }
}

/// Rounded to 2 decimals for JSON.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl Frame<'_> {
    fn json(&self, limit: usize) -> String {
        let locks: Vec<serde_json::Value> = self
            .rows
            .iter()
            .take(limit)
            .map(|row| match &row.info {
                Ok(State::Semaphore(s)) => serde_json::json!({
                    "name": row.name,
                    "kind": "semaphore",
                    "held": !s.holders.is_empty(),
                    "holder": null,
                    "owner": null,
                    "ttl_ms": s.holders.first().and_then(|(_, ttl)| millis(Some(*ttl))),
                    "readers": 0,
                    "waiters": s.waiters,
                    "fence": s.fence,
                    "permits": s.permits,
                    "permits_held": s.holders.len(),
                    "handoffs_per_s": row.handoffs_per_s().map(round2),
                    "fence_per_s": row.fence_per_s().map(round2),
                }),
                Ok(State::Lock(info)) => {
                    let holder = info.holder.as_ref();
                    serde_json::json!({
                        "name": row.name,
                        "kind": kind_name(info.kind),
                        "held": holder.is_some() || !info.readers.is_empty(),
                        "holder": holder.map(|h| h.token.as_str()),
                        "owner": holder.and_then(|h| h.note.as_deref()),
                        "ttl_ms": holder.and_then(|h| millis(h.ttl)),
                        "readers": info.readers.len(),
                        "waiters": info.waiters,
                        "fence": info.fence,
                        "handoffs_per_s": row.handoffs_per_s().map(round2),
                        "fence_per_s": row.fence_per_s().map(round2),
                    })
                }
                Err(e) => serde_json::json!({"name": row.name, "error": e.to_string()}),
            })
            .collect();
        serde_json::json!({
            "refresh": self.refresh,
            "at_ms": self.at_ms,
            "known": self.known,
            "commands": {"scan": self.scans, "inspect": self.inspected},
            "locks": locks,
        })
        .to_string()
    }

    fn table(&self, target: &str, prefix: &str, args: &TopArgs, tty: bool) -> String {
        let dash = || "-".to_owned();
        let header = [
            "NAME",
            "KIND",
            "HOLDER",
            "TTL",
            "WAITERS",
            "HANDOFFS/S",
            "FENCE/S",
            "OWNER",
        ];
        let rows: Vec<[String; 8]> = self
            .rows
            .iter()
            .take(args.limit)
            .map(|row| {
                let Ok(state) = &row.info else {
                    let e = row.info.as_ref().err().map(ToString::to_string);
                    return [
                        row.name.clone(),
                        "?".to_owned(),
                        e.unwrap_or_default(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                        dash(),
                    ];
                };
                let info = match state {
                    State::Lock(info) => info,
                    State::Semaphore(s) => {
                        let count = s.permits.map_or_else(|| "?".to_owned(), |p| p.to_string());
                        return [
                            row.name.clone(),
                            "semaphore".to_owned(),
                            format!("{}/{count}", s.holders.len()),
                            s.holders
                                .first()
                                .map_or_else(dash, |(_, t)| format!("{:.1}s", t.as_secs_f64())),
                            s.waiters.to_string(),
                            row.handoffs_per_s()
                                .map_or_else(dash, |r| format!("{r:.1}")),
                            row.fence_per_s().map_or_else(dash, rate),
                            dash(),
                        ];
                    }
                };
                let holder = info.holder.as_ref();
                [
                    row.name.clone(),
                    kind_name(info.kind).map_or_else(dash, str::to_owned),
                    match (holder, info.readers.len()) {
                        (Some(h), _) => short(&h.token),
                        (None, 0) => dash(),
                        (None, n) => format!("r{n}"),
                    },
                    match holder.map(|h| h.ttl) {
                        Some(Some(ttl)) => format!("{:.1}s", ttl.as_secs_f64()),
                        Some(None) => "no expiry".to_owned(),
                        None => info
                            .readers
                            .first()
                            .and_then(|r| r.ttl)
                            .map_or_else(dash, |t| format!("{:.1}s", t.as_secs_f64())),
                    },
                    info.waiters.to_string(),
                    row.handoffs_per_s()
                        .map_or_else(dash, |r| format!("{r:.1}")),
                    row.fence_per_s().map_or_else(dash, rate),
                    holder.and_then(|h| h.note.clone()).unwrap_or_else(dash),
                ]
            })
            .collect();
        let mut out = String::new();
        if tty {
            out.push_str("\x1b[H\x1b[2J"); // home, clear screen
        } else if self.refresh > 1 {
            out.push('\n');
        }
        let source = if args.names.is_empty() {
            format!("prefix {prefix}, match {}", args.pattern)
        } else {
            format!("prefix {prefix}, {} names", args.names.len())
        };
        out.push_str(&format!(
            "redbell top  {}  {source}  refresh {} every {}  {} locks known, {} read  \
             cost {} SCAN + {} EVALSHA\n",
            crate::fail::redact(target),
            self.refresh,
            crate::duration::human(args.interval),
            self.known,
            self.inspected,
            self.scans,
            self.inspected,
        ));
        out.push_str(&table::lines(header, &rows).join("\n"));
        if rows.is_empty() {
            out.push_str("\n(no locks found)");
        }
        out
    }
}

/// An owner token shortened for the table: its first 12 characters.
fn short(token: &str) -> String {
    match token.char_indices().nth(12) {
        Some((at, _)) => format!("{}…", &token[..at]),
        None => token.to_owned(),
    }
}

/// `0`, `950`, `12.3k`, `1.00M`.
fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_rate() {
        assert_eq!(short("m0123456789abcdef"), "m0123456789a…");
        assert_eq!(short("m01"), "m01");
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(12_345.0), "12.3k");
        assert_eq!(rate(1_000_213.0), "1.00M");
    }
}
