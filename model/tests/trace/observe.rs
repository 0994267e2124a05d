//! What a step is compared on: the model's state and the keys read back,
//! both as an observation (label -> value, clock numbers tagged), and the
//! model's state rebuilt from the keys once a step agrees.

use redbell_model::scripts::{self as m, LockValue, Ms, Server};

use crate::replay::{Num, Obs, Replay};
use crate::wire::{self, Wire};

impl Replay<'_> {
    /// Counts what this step covered: the script and its reply, whether the
    /// lock's lease had run out, each message.
    pub(crate) fn tally(
        &mut self,
        script: &str,
        before: &Server,
        now: Ms,
        want: &Obs,
        published: &[m::Published],
    ) {
        let reply = want.get("reply").or(want.get("reply[0]"));
        let reply = match reply {
            Some(Num::Exact(v)) => v.to_string(),
            other => format!("{other:?}"),
        };
        let mut seen = vec![format!("{script} -> {reply}")];
        if want.contains_key("reply[1]") && script.ends_with("extend") {
            seen.push(format!("{script}, a batch of two"));
        }
        match before.lock {
            Some((LockValue::Reserved { .. }, e)) if e > now => {
                seen.push(format!("{script} during a reservation"))
            }
            Some((_, e)) if e <= now => seen.push(format!("{script} after the lease ran out")),
            _ => {}
        }
        if before.waiters.iter().any(|e| e.expiry <= now) {
            seen.push(format!("{script} with an expired queue entry"));
        }
        for p in published {
            let kind = format!("{:?}", p.message);
            seen.push(format!(
                "message {}",
                &kind[..kind.find('(').unwrap_or(kind.len())]
            ));
        }
        for e in seen {
            *self.events.entry(e).or_default() += 1;
        }
    }

    /// The model's state as read back (its clock numbers the server's).
    pub(crate) fn adopt(&mut self, snap: &[Wire], mut model: Server) {
        let letter_free =
            |s: &str| wire::parse_lock_value(s).expect("a lock value the model knows");
        model.lock = snap[0]
            .str()
            .map(|v| (letter_free(v), snap[1].int().unwrap_or(0) as u64));
        model.fence = snap[2].int().unwrap_or(0) as u64;
        model.fair.handoff = snap[3].str().map(|v| {
            let (d, who) = v.split_once(':').expect("deadline:member");
            let who = wire::parse_fair_member(who).expect("a fair member");
            (
                d.parse().expect("deadline"),
                who,
                snap[4].int().unwrap_or(0) as u64,
            )
        });
        model.waiters = snap[5]
            .pairs()
            .into_iter()
            .map(|(mem, score)| {
                let (whole, half) = split_score(&score);
                m::Entry {
                    expiry: whole as u64,
                    half,
                    member: wire::parse_member(&mem).expect("member"),
                }
            })
            .collect();
        let member = |m: &str| wire::parse_member(m).expect("member");
        let token = |t: &str| wire::parse_token(t).expect("token");
        model.fair.queue = sorted(&snap[7], |m, at| {
            (at, wire::parse_fair_member(m).expect("fair member"))
        });
        model.rw.readers = sorted(&snap[9], |t, at| (token(t), at as u64));
        model.rw.intents = sorted(&snap[11], |m, at| (member(m), at as u64));
        model.sem.holders = sorted(&snap[13], |t, at| (at as u64, token(t)));
        model.sem.queue = sorted(&snap[15], |m, at| (at as u64, member(m)));
        model.sem.expiry = sorted(&snap[17], |m, at| (member(m), at as u64));
        for (i, at) in [6, 8, 10, 12, 14, 16, 18].into_iter().enumerate() {
            self.key_ttls[i] = snap[at].int().unwrap_or(-2);
        }
        self.model = model;
    }

    pub(crate) fn observe_model(&self, s: &Server, now: Ms, obs: &mut Obs) {
        let letter = self.kind.letter();
        if let Some(v) = s.lock_at(now) {
            let expiry = s.lock.map_or(0, |l| l.1) as i64;
            obs.insert("lock".into(), Num::Text(lock_text(letter, v)));
            obs.insert("lock.expiry".into(), Num::Ms(expiry));
            if let LockValue::Reserved { end, .. } = v {
                obs.insert("lock.end".into(), Num::Ms(end as i64));
            }
        }
        if s.fence > 0 {
            obs.insert("fence".into(), Num::Us(s.fence as i64));
        }
        if let Some((deadline, who, expiry)) = s.fair.handoff
            && expiry > now
        {
            obs.insert("handoff".into(), Num::Text(wire::fair_member(who)));
            obs.insert("handoff.deadline".into(), Num::Ms(deadline as i64));
            obs.insert("handoff.expiry".into(), Num::Ms(expiry as i64));
        }
        for e in &s.waiters {
            let k = format!("waiters[{}]", wire::member(e.member));
            obs.insert(format!("{k}.half"), Num::Exact(e.half as i64));
            obs.insert(k, Num::Ms(e.expiry as i64));
        }
        for &(score, who) in &s.fair.queue {
            obs.insert(format!("fifo[{}]", wire::fair_member(who)), Num::Us(score));
        }
        for &(t, e) in &s.rw.readers {
            obs.insert(
                format!("readers[{}]", wire::token('r', t)),
                Num::Ms(e as i64),
            );
        }
        for &(who, e) in &s.rw.intents {
            obs.insert(format!("intents[{}]", wire::member(who)), Num::Ms(e as i64));
        }
        for &(e, t) in &s.sem.holders {
            obs.insert(
                format!("holders[{}]", wire::token('s', t)),
                Num::Ms(e as i64),
            );
        }
        for &(arrival, who) in &s.sem.queue {
            obs.insert(
                format!("queue[{}]", wire::member(who)),
                Num::Us(arrival as i64),
            );
        }
        for &(who, e) in &s.sem.expiry {
            obs.insert(format!("qexpiry[{}]", wire::member(who)), Num::Ms(e as i64));
        }
    }

    pub(crate) fn observe_server(&self, snap: &[Wire], obs: &mut Obs) {
        if let Some(v) = snap[0].str() {
            let (text, end) = match v.rsplit_once('@') {
                Some((who, end)) if v.starts_with("m:") => (format!("{who}@"), end.parse().ok()),
                _ => (v.to_owned(), None),
            };
            obs.insert("lock".into(), Num::Text(text));
            obs.insert("lock.expiry".into(), Num::Ms(snap[1].int().unwrap_or(0)));
            if let Some(end) = end {
                obs.insert("lock.end".into(), Num::Ms(end));
            }
        }
        if let Some(f) = snap[2].int() {
            obs.insert("fence".into(), Num::Us(f));
        }
        if let Some(v) = snap[3].str() {
            let (d, who) = v.split_once(':').unwrap_or(("?", v));
            obs.insert("handoff".into(), Num::Text(who.to_owned()));
            obs.insert("handoff.deadline".into(), Num::Ms(d.parse().unwrap_or(-1)));
            obs.insert("handoff.expiry".into(), Num::Ms(snap[4].int().unwrap_or(0)));
        }
        for (mem, score) in snap[5].pairs() {
            let (whole, half) = split_score(&score);
            obs.insert(format!("waiters[{mem}].half"), Num::Exact(half as i64));
            obs.insert(format!("waiters[{mem}]"), Num::Ms(whole));
        }
        for (mem, score) in snap[7].pairs() {
            obs.insert(format!("fifo[{mem}]"), Num::Us(split_score(&score).0));
        }
        for (t, score) in snap[9].pairs() {
            obs.insert(format!("readers[{t}]"), Num::Ms(split_score(&score).0));
        }
        for (mem, score) in snap[11].pairs() {
            obs.insert(format!("intents[{mem}]"), Num::Ms(split_score(&score).0));
        }
        for (t, score) in snap[13].pairs() {
            obs.insert(format!("holders[{t}]"), Num::Ms(split_score(&score).0));
        }
        for (mem, score) in snap[15].pairs() {
            obs.insert(format!("queue[{mem}]"), Num::Us(split_score(&score).0));
        }
        for (mem, score) in snap[17].pairs() {
            obs.insert(format!("qexpiry[{mem}]"), Num::Ms(split_score(&score).0));
        }
    }
}

/// The lock key's value without the clock part (a reservation's end is
/// compared as a number).
fn lock_text(letter: char, v: LockValue) -> String {
    match v {
        LockValue::Reserved { member, .. } => format!("m:{}@", wire::member(member)),
        LockValue::Token(_) => wire::lock_value(letter, v),
    }
}

/// A score "123" or "123.5": its whole part and whether it has the `.5`.
/// A sorted set read back (member, score pairs) as the model's sorted
/// list: `f` makes each entry of a member and its score's whole part.
fn sorted<T: Ord>(set: &Wire, f: impl Fn(&str, i64) -> T) -> Vec<T> {
    let mut out: Vec<T> = set
        .pairs()
        .into_iter()
        .map(|(m, score)| f(&m, split_score(&score).0))
        .collect();
    out.sort();
    out
}

fn split_score(s: &str) -> (i64, bool) {
    match s.split_once('.') {
        Some((w, f)) => (w.parse().unwrap_or(i64::MIN), f == "5"),
        None => (s.parse().unwrap_or(i64::MIN), false),
    }
}
