//! One step of a sequence, twice: through the real script on the server and
//! through the model's step function, then the two compared.
//!
//! # Time
//!
//! The server's clock is the one clock. Each script runs in a transaction
//! between two `TIME`s (`MULTI; TIME; EVALSHA; TIME; reads; EXEC`), so
//! whatever "now" the script read lies in `[t0, t1]`, microseconds apart;
//! the model steps at `now = t0` in ms. Numbers derived from the clock
//! (expiries, PTTLs, µs fences and arrivals) may differ from the model's by
//! that window (plus the µs the model's ms drop), and nothing else may.
//! The keys are read back in the same transaction, with `PEXPIRETIME`
//! (absolute, so the reads do not depend on when they run).
//!
//! A decision at an instant the model cannot pin down (a deadline within
//! [`SLACK_MS`] of `[t0, t1]`: Redis keeps a key at PTTL 0 for its last ms,
//! and the script's `TIME`s, its key lookups and the model's `now` may fall
//! on either side) is not compared: before each step the replay sleeps past
//! any deadline that close, and a step that still lands near one (the
//! process was descheduled between the check and the call) is skipped,
//! counted, and the model goes on from the keys read back.
//!
//! After a step that agrees, the model's state is replaced by the one read
//! back (the same up to those clock numbers), so the window never adds up.
//! Redis also drops a whole queue key at its own `PEXPIRE`, which the model
//! leaves out (it says the key outlives its entries): the replay empties
//! the model's copy of a queue whose key has expired before each step.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use redbell_model::scripts::{self as m, Member, Message, Ms, Server, Token};

use crate::wire::{self, Names, Scripts, Wire};

/// How close to a deadline (ms) a step is not compared.
pub const SLACK_MS: u64 = 2;

/// A value in an observation: exact, or read off the clock (ms or µs).
#[derive(Clone, Debug, PartialEq)]
pub enum Num {
    Text(String),
    Exact(i64),
    Ms(i64),
    Us(i64),
}

/// An observation: label -> value (the reply, every key, the messages).
pub type Obs = BTreeMap<String, Num>;

/// The lock's kind of this sequence: which token letter, which scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    /// An Election's lock: the Mutex's scripts and model, `l` tokens.
    Election,
    Fair,
    Rw,
    Sem,
}

impl Kind {
    pub fn letter(self) -> char {
        match self {
            Kind::Mutex => 'm',
            Kind::Election => 'l',
            Kind::Fair => 'q',
            Kind::Rw => 'w',
            Kind::Sem => 's',
        }
    }
}

/// The arguments of a sequence that stay fixed: the client's constants,
/// drawn small so that expiries happen within a sequence.
#[derive(Clone, Copy, Debug)]
pub struct Consts {
    pub grace_ms: Ms,
    pub park_ms: Ms,
    pub handoff_ms: Ms,
    pub claim_ms: Ms,
    pub window_ms: Ms,
    pub fence_ttl_ms: Ms,
    /// The Semaphore's permit count and SEM_RESERVE_MS.
    pub permits: u8,
    pub reserve_ms: Ms,
}

/// One action of a sequence.
#[derive(Clone, Copy, Debug)]
pub enum Act {
    Acquire {
        token: Token,
        lease: Ms,
        member: Option<Member>,
    },
    Release {
        token: Token,
    },
    /// extend.lua on one lock, or a batch of two (`also`: a second
    /// token on the same keys, renewed in the same call).
    Extend {
        token: Token,
        lease: Ms,
        also: Option<Token>,
    },
    Pass {
        member: Member,
    },
    FairAcquire {
        token: Token,
        lease: Ms,
        member: Option<Member>,
        arrival: Option<u64>,
    },
    FairRelease {
        token: Token,
    },
    FairPass {
        member: Member,
        token: Token,
    },
    ReadAcquire {
        token: Token,
        lease: Ms,
    },
    ReadRelease {
        token: Token,
    },
    WriteAcquire {
        token: Token,
        lease: Ms,
        member: Option<Member>,
    },
    WriteRelease {
        token: Token,
    },
    ReadExtend {
        token: Token,
        lease: Ms,
        also: Option<Token>,
    },
    RwPass {
        member: Member,
    },
    SemAcquire {
        token: Token,
        lease: Ms,
        member: Option<Member>,
        arrival: Option<u64>,
    },
    SemRelease {
        token: Token,
    },
    SemPass {
        member: Member,
    },
    SemExtend {
        token: Token,
        lease: Ms,
        also: Option<Token>,
    },
    Subscribe(u8),
    Unsubscribe(u8),
    Sleep(Ms),
}

/// What the generator learns from a step (the model's reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acquired,
    Held {
        now_us: Option<u64>,
    },
    Done,
    /// Not compared: too close to a deadline.
    Skipped,
}

/// A step on which the model and the server disagree.
pub struct Mismatch(pub String);

/// One sequence's replay: its connections, its lock name and the model's
/// copy of that name's keys.
pub struct Replay<'a> {
    /// Runs the scripts.
    con: &'a mut redis::Connection,
    /// Client `c`'s subscriber: always on `ctl`, and on its wake channel and
    /// the RwLock's channel while `c` is in `model.subscribed`.
    subs: Vec<redis::PubSub<'a>>,
    scripts: &'a Scripts,
    pub names: Names,
    pub kind: Kind,
    pub consts: Consts,
    /// The keys as of the last step (read back from the server), and the
    /// clients subscribed.
    pub model: Server,
    /// The queue keys' PEXPIRETIME (ms; < 0: none) as last read: waiters,
    /// fifo, readers, writers, holders, queue, queue:expiry.
    pub(crate) key_ttls: [i64; 7],
    /// Markers published on `ctl` so far.
    markers: u64,
    /// The server's ms at the end of the last script step.
    last_ms: u64,
    /// Deadlines the next step's own arguments make: an extend shortens
    /// the lease (and tells the waiters) only before `expiry - lease`; a
    /// fair attempt marks a long park only before `expiry - claim`.
    step_deadline: Vec<u64>,
    /// What the model published in the last step that agreed.
    pub last: Vec<m::Published>,
    /// How often each kind of step and message was compared.
    pub events: BTreeMap<String, usize>,
}

impl<'a> Replay<'a> {
    pub fn new(
        con: &'a mut redis::Connection,
        mut subs: Vec<redis::PubSub<'a>>,
        scripts: &'a Scripts,
        names: Names,
        kind: Kind,
        consts: Consts,
    ) -> Replay<'a> {
        let mut model = Server::default();
        for (c, sub) in subs.iter_mut().enumerate() {
            let c = c as u8;
            sub.subscribe(&names.ctl).expect("SUBSCRIBE");
            sub.subscribe(&[names.wake(c), names.rw.clone()][..])
                .expect("SUBSCRIBE");
            sub.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            model.subscribed.insert(c);
        }
        Replay {
            con,
            subs,
            scripts,
            names,
            kind,
            consts,
            model,
            key_ttls: [-2; 7],
            markers: 0,
            last_ms: 0,
            step_deadline: Vec::new(),
            last: Vec::new(),
            events: BTreeMap::new(),
        }
    }

    /// The server's clock, ms.
    fn server_ms(&mut self) -> u64 {
        let t: (u64, u64) = redis::cmd("TIME").query(self.con).expect("TIME");
        t.0 * 1000 + t.1 / 1000
    }

    /// Every instant at which a decision of the next step changes.
    fn deadlines(&self) -> Vec<u64> {
        let s = &self.model;
        let mut d: Vec<u64> = s.lock.iter().map(|l| l.1).collect();
        d.extend(s.waiters.iter().map(|e| e.expiry));
        if let Some((deadline, _, expiry)) = s.fair.handoff {
            d.extend([deadline, expiry]);
        }
        d.extend(s.rw.readers.iter().map(|r| r.1));
        d.extend(s.rw.intents.iter().map(|r| r.1));
        d.extend(s.sem.holders.iter().map(|h| h.0));
        d.extend(s.sem.expiry.iter().map(|e| e.1));
        d.extend(self.key_ttls.iter().filter(|&&t| t > 0).map(|&t| t as u64));
        d.extend(self.step_deadline.iter().copied());
        d
    }

    fn near(&self, lo: u64, hi: u64) -> Option<u64> {
        self.deadlines()
            .into_iter()
            .find(|&d| d + SLACK_MS >= lo && d <= hi + SLACK_MS)
    }

    /// Runs `act` on both sides and compares.
    pub fn step(&mut self, act: Act) -> Result<Outcome, Mismatch> {
        // A fair attempt marks a long park only while the lock's PTTL is
        // over a claim: `expiry - claim` is its deadline.
        let s = &self.model;
        let shortened = |expiry: Option<u64>, lease: Ms| expiry.and_then(|e| e.checked_sub(lease));
        self.step_deadline = match act {
            Act::Extend { lease, .. } => vec![shortened(s.lock.map(|l| l.1), lease)],
            Act::FairAcquire { .. } => {
                vec![shortened(s.lock.map(|l| l.1), self.consts.claim_ms)]
            }
            Act::ReadExtend { token, lease, also } => [Some(token), also]
                .into_iter()
                .flatten()
                .map(|t| shortened(s.rw.readers.iter().find(|r| r.0 == t).map(|r| r.1), lease))
                .collect(),
            Act::SemExtend { token, lease, also } => [Some(token), also]
                .into_iter()
                .flatten()
                .map(|t| shortened(s.sem.holders.iter().find(|h| h.1 == t).map(|h| h.0), lease))
                .collect(),
            _ => Vec::new(),
        }
        .into_iter()
        .flatten()
        .collect();
        let (script, keys, args) = match self.call(act) {
            Call::Script(script, keys, args) => (script, keys, args),
            Call::Sleep(ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                return Ok(Outcome::Done);
            }
            Call::Subscribe(c, on) => {
                let chans = [self.names.wake(c), self.names.rw.clone()];
                let sub = &mut self.subs[c as usize];
                if on {
                    sub.subscribe(&chans[..]).expect("SUBSCRIBE");
                    self.model.subscribed.insert(c);
                } else {
                    sub.unsubscribe(&chans[..]).expect("UNSUBSCRIBE");
                    self.model.subscribed.remove(&c);
                }
                return Ok(Outcome::Done);
            }
        };
        let got = loop {
            let got = self.run(script, &keys, &args);
            match &got[1] {
                // Another test flushed the scripts (SCRIPT FLUSH): nothing ran.
                Wire::Err(e) if e.contains("NOSCRIPT") => self.scripts.reload(self.con, script),
                _ => break got,
            }
        };
        let time = |w: &Wire| match w {
            Wire::Arr(a) => a[0].int().unwrap_or(0) * 1_000_000 + a[1].int().unwrap_or(0),
            _ => 0,
        };
        let (t0, t1) = (time(&got[0]) as u64, time(&got[2]) as u64);
        let messages = self.drain();
        let (now, span) = (t0 / 1000, t1 / 1000 - t0 / 1000);
        self.last_ms = t1 / 1000;
        if self.near(now, now + span).is_some() {
            // Not compared; the model goes on from what the server did.
            self.adopt(&got[3..], self.model.clone());
            self.last.clear();
            return Ok(Outcome::Skipped);
        }
        let mut model = self.model.clone();
        for (i, &ttl) in self.key_ttls.iter().enumerate() {
            if ttl >= 0 && ttl as u64 <= now {
                match i {
                    0 => model.waiters.clear(),
                    1 => model.fair.queue.clear(),
                    2 => model.rw.readers.clear(),
                    3 => model.rw.intents.clear(),
                    4 => model.sem.holders.clear(),
                    5 => model.sem.queue.clear(),
                    _ => model.sem.expiry.clear(),
                }
            }
        }
        let before = model.clone();
        let (reply, outcome) = self.apply(&mut model, act, now);
        let mut want = reply;
        self.observe_model(&model, now, &mut want);
        let mut seen = Obs::new();
        reply_obs(&got[1], &mut seen);
        let snap = &got[3..];
        self.observe_server(snap, &mut seen);
        let published = std::mem::take(&mut model.published);
        for p in &published {
            message_obs(p.client, p.message, &mut want);
        }
        for (c, msgs) in messages.iter().enumerate() {
            for &msg in msgs {
                message_obs(c as u8, msg, &mut seen);
            }
        }
        if let Some(diff) = compare(&want, &seen, span as i64) {
            let mut out = String::new();
            let _ = writeln!(out, "script {script} KEYS {keys:?} ARGV {args:?}");
            let _ = writeln!(out, "at server time {t0} .. {t1} us (model now = {now} ms)");
            let _ = writeln!(out, "model state before: {before:?}");
            let _ = writeln!(out, "differs: {diff}");
            let _ = writeln!(out, "model predicted: {want:?}");
            let _ = write!(out, "server gave:     {seen:?}");
            return Err(Mismatch(out));
        }
        self.tally(script, &before, now, &want, &published);
        self.adopt(snap, model);
        self.last = published;
        Ok(outcome)
    }

    /// The script between two TIMEs, and every key read back, in one
    /// transaction, out of the way of any deadline.
    fn run(&mut self, script: &str, keys: &[String], args: &[String]) -> Vec<Wire> {
        // Out of the way of any deadline, and into a ms of its own: the
        // model's clock is in ms, so two steps in one ms would compare µs
        // arrivals (fair) that it cannot tell apart.
        loop {
            let now = self.server_ms();
            if now <= self.last_ms {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            match self.near(now, now + 1) {
                Some(d) => std::thread::sleep(Duration::from_millis(d + SLACK_MS + 1 - now)),
                None => break,
            }
        }
        let n = &self.names;
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.cmd("TIME")
            .cmd("EVALSHA")
            .arg(self.scripts.sha(script))
            .arg(keys.len());
        pipe.arg(keys).arg(args).cmd("TIME");
        pipe.cmd("GET").arg(&n.lock).cmd("PEXPIRETIME").arg(&n.lock);
        pipe.cmd("GET").arg(&n.fence);
        pipe.cmd("GET")
            .arg(&n.handoff)
            .cmd("PEXPIRETIME")
            .arg(&n.handoff);
        let queues = [&n.waiters, &n.fifo, &n.readers, &n.intents];
        let sem = [&n.holders, &n.queue, &n.queue_expiry];
        for key in queues.into_iter().chain(sem) {
            pipe.cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES");
            pipe.cmd("PEXPIRETIME").arg(key);
        }
        let got: Vec<redis::Value> = pipe.query(self.con).expect("MULTI .. EXEC");
        got.into_iter().map(Wire::from).collect()
    }

    /// Reads every message up to this step's marker, per client.
    fn drain(&mut self) -> Vec<Vec<Message>> {
        self.markers += 1;
        let marker = format!("marker {}", self.markers);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.names.ctl)
            .arg(&marker)
            .query(self.con)
            .expect("PUBLISH");
        let mut out = Vec::new();
        for sub in &mut self.subs {
            let mut msgs = Vec::new();
            loop {
                let msg = sub.get_message().expect("a message before the marker");
                let payload: String = msg.get_payload().expect("payload");
                let channel = msg.get_channel_name();
                if channel == self.names.ctl {
                    if payload == marker {
                        break;
                    }
                    continue;
                }
                let parsed = wire::parse_message(channel == self.names.rw, &payload);
                msgs.push(
                    parsed.unwrap_or_else(|| panic!("unparsable message {payload:?} on {channel}")),
                );
            }
            out.push(msgs);
        }
        out
    }
}

fn reply_obs(reply: &Wire, obs: &mut Obs) {
    match reply {
        Wire::Arr(a) => {
            for (i, w) in a.iter().enumerate() {
                obs.insert(
                    format!("reply[{i}]"),
                    w.int().map_or(Num::Text(format!("{w:?}")), Num::Exact),
                );
            }
        }
        Wire::Int(i) => {
            obs.insert("reply".into(), Num::Exact(*i));
        }
        other => {
            obs.insert("reply".into(), Num::Text(format!("{other:?}")));
        }
    }
}

fn message_obs(client: u8, msg: Message, obs: &mut Obs) {
    let i = obs
        .keys()
        .filter(|k| k.starts_with(&format!("msg[{client}]")))
        .filter(|k| !k.contains('.'))
        .count();
    let k = format!("msg[{client}][{i}]");
    if let Message::Grant(w, t, fence, end) = msg {
        obs.insert(
            k.clone(),
            Num::Text(format!("Grant({w}, {})", wire::token('q', t))),
        );
        obs.insert(format!("{k}.fence"), Num::Us(fence as i64));
        obs.insert(format!("{k}.end"), Num::Us(end as i64));
    } else {
        obs.insert(k, Num::Text(format!("{msg:?}")));
    }
}

/// The first difference between the prediction and what the server did;
/// clock numbers may differ by the step's ms window `span` (plus one).
fn compare(want: &Obs, seen: &Obs, span: i64) -> Option<String> {
    for k in want.keys().chain(seen.keys()) {
        let (w, s) = (want.get(k), seen.get(k));
        let ok = match (w.and_then(num), s.and_then(num)) {
            (Some((ca, a)), Some((cb, b))) => match ca.max(cb) {
                0 => a == b,
                1 => (a - b).abs() <= span + 1,
                _ => (a - b).abs() < (span + 1) * 1000,
            },
            _ => w == s,
        };
        if !ok {
            return Some(format!("{k}: model {w:?}, server {s:?}"));
        }
    }
    None
}

/// A number's class (0 exact, 1 ms, 2 µs) and value.
fn num(n: &Num) -> Option<(u8, i64)> {
    match n {
        Num::Exact(v) => Some((0, *v)),
        Num::Ms(v) => Some((1, *v)),
        Num::Us(v) => Some((2, *v)),
        Num::Text(_) => None,
    }
}

/// A script and its KEYS and ARGV, as layout.rs passes them, or an action
/// of the replay itself.
pub enum Call {
    Script(&'static str, Vec<String>, Vec<String>),
    Sleep(Ms),
    Subscribe(u8, bool),
}
