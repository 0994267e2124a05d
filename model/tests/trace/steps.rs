//! Each action twice: the KEYS and ARGV `src/scripts/layout.rs` passes its
//! script (in the order of each `.lua` header), and the model's step
//! function with the same arguments, its reply in the wire's terms.

use redbell_model::scripts::{
    self as m, AcquireReply, ExtendReply, FairAcquireReply, Ms, ReleaseReply, Server,
};

use crate::replay::{Act, Call, Kind, Num, Obs, Outcome, Replay};
use crate::wire;

/// ARGV[1] of every script: the protocol version (`protocol.lua`).
const PROTOCOL: Option<&str> = Some("1");

impl Replay<'_> {
    pub(crate) fn call(&self, act: Act) -> Call {
        let n = &self.names;
        let c = self.consts;
        let letter = self.kind.letter();
        let member = |m: Option<m::Member>| m.map_or(String::new(), wire::member);
        let (script, keys, args): (&'static str, Vec<&str>, Vec<String>) = match act {
            Act::Sleep(ms) => return Call::Sleep(ms),
            Act::Subscribe(cl) => return Call::Subscribe(cl, true),
            Act::Unsubscribe(cl) => return Call::Subscribe(cl, false),
            Act::Acquire {
                token,
                lease,
                member: who,
            } => (
                "acquire",
                vec![&n.lock, &n.fence, &n.waiters, &n.readers, &n.holders],
                vec![
                    wire::token(letter, token),
                    lease.to_string(),
                    c.fence_ttl_ms.to_string(),
                    member(who),
                    c.grace_ms.to_string(),
                    c.park_ms.to_string(),
                    c.handoff_ms.to_string(),
                    letter.to_string(),
                ],
            ),
            Act::Release { token } => (
                "release",
                vec![&n.lock, &n.waiters],
                vec![
                    wire::token(letter, token),
                    n.wake_prefix.clone(),
                    c.handoff_ms.to_string(),
                ],
            ),
            Act::Extend { token, lease, also } => {
                // Each lock's keys (the lock, its queue) and its token and
                // channel; a batch of two renews two tokens on one lock.
                let (queue, channel) = match self.kind {
                    Kind::Fair => (&n.fifo, &n.wake_prefix),
                    Kind::Rw => (&n.intents, &n.rw),
                    _ => (&n.waiters, &n.wake_prefix),
                };
                let mut keys: Vec<&str> = Vec::new();
                let mut args = vec![lease.to_string()];
                for t in [Some(token), also].into_iter().flatten() {
                    keys.extend([n.lock.as_str(), queue]);
                    args.extend([wire::token(letter, t), channel.clone()]);
                }
                ("extend", keys, args)
            }
            Act::ReadExtend { token, lease, also } => {
                let mut keys: Vec<&str> = Vec::new();
                let mut args = vec![lease.to_string()];
                for t in [Some(token), also].into_iter().flatten() {
                    keys.push(&n.readers);
                    args.extend([wire::token('r', t), n.rw.clone()]);
                }
                ("rw_read_extend", keys, args)
            }
            Act::RwPass { member: who } => (
                "rw_pass",
                vec![&n.intents, &n.rw, &n.lock, &n.readers],
                vec![wire::member(who)],
            ),
            Act::SemAcquire {
                token,
                lease,
                member: who,
                arrival,
            } => (
                "sem_acquire",
                vec![
                    &n.holders,
                    &n.fence,
                    &n.queue,
                    &n.queue_expiry,
                    &n.count,
                    &n.lock,
                    &n.readers,
                ],
                vec![
                    wire::token('s', token),
                    lease.to_string(),
                    c.fence_ttl_ms.to_string(),
                    member(who),
                    c.grace_ms.to_string(),
                    c.park_ms.to_string(),
                    n.wake_prefix.clone(),
                    c.permits.to_string(),
                    c.reserve_ms.to_string(),
                    arrival.map_or(String::new(), |a| a.to_string()),
                ],
            ),
            Act::SemRelease { token } => (
                "sem_release",
                vec![&n.holders, &n.queue, &n.queue_expiry, &n.count],
                vec![
                    wire::token('s', token),
                    n.wake_prefix.clone(),
                    c.permits.to_string(),
                    c.reserve_ms.to_string(),
                ],
            ),
            Act::SemPass { member: who } => (
                "sem_pass",
                vec![&n.holders, &n.queue, &n.queue_expiry, &n.count],
                vec![
                    wire::member(who),
                    n.wake_prefix.clone(),
                    c.permits.to_string(),
                    c.reserve_ms.to_string(),
                ],
            ),
            Act::SemExtend { token, lease, also } => {
                let mut keys: Vec<&str> = Vec::new();
                let mut args = vec![lease.to_string()];
                for t in [Some(token), also].into_iter().flatten() {
                    keys.extend([n.holders.as_str(), &n.count, &n.queue]);
                    args.extend([wire::token('s', t), n.wake_prefix.clone()]);
                }
                ("sem_extend", keys, args)
            }
            Act::Pass { member: who } => (
                "pass",
                vec![&n.lock, &n.waiters],
                vec![
                    wire::member(who),
                    n.wake_prefix.clone(),
                    c.handoff_ms.to_string(),
                ],
            ),
            Act::FairAcquire {
                token,
                lease,
                member: who,
                arrival,
            } => (
                "fair_acquire",
                vec![
                    &n.lock, &n.fence, &n.fifo, &n.handoff, &n.readers, &n.holders,
                ],
                vec![
                    wire::token('q', token),
                    lease.to_string(),
                    c.fence_ttl_ms.to_string(),
                    who.map_or(String::new(), |w| {
                        wire::fair_member(m::FairMember::Waiter(w, token))
                    }),
                    c.grace_ms.to_string(),
                    c.park_ms.to_string(),
                    n.wake_prefix.clone(),
                    c.claim_ms.to_string(),
                    arrival.map_or(String::new(), |a| a.to_string()),
                ],
            ),
            Act::FairRelease { token } => (
                "fair_release",
                vec![&n.lock, &n.fence, &n.fifo, &n.handoff],
                vec![
                    wire::token('q', token),
                    n.wake_prefix.clone(),
                    c.claim_ms.to_string(),
                    c.fence_ttl_ms.to_string(),
                ],
            ),
            Act::FairPass { member: who, token } => (
                "fair_pass",
                vec![&n.lock, &n.fence, &n.fifo, &n.handoff],
                vec![
                    wire::fair_member(m::FairMember::Waiter(who, token)),
                    n.wake_prefix.clone(),
                    c.claim_ms.to_string(),
                    c.fence_ttl_ms.to_string(),
                ],
            ),
            Act::ReadAcquire { token, lease } => (
                "rw_read_acquire",
                vec![
                    &n.lock, &n.readers, &n.intents, &n.fence, &n.count, &n.holders,
                ],
                vec![
                    wire::token('r', token),
                    lease.to_string(),
                    c.park_ms.to_string(),
                ],
            ),
            Act::ReadRelease { token } => (
                "rw_read_release",
                vec![&n.readers, &n.rw, &n.intents],
                vec![wire::token('r', token), c.window_ms.to_string()],
            ),
            Act::WriteAcquire {
                token,
                lease,
                member: who,
            } => (
                "rw_write_acquire",
                vec![
                    &n.lock, &n.readers, &n.intents, &n.fence, &n.rw, &n.count, &n.holders,
                ],
                vec![
                    wire::token('w', token),
                    lease.to_string(),
                    c.fence_ttl_ms.to_string(),
                    member(who),
                    c.grace_ms.to_string(),
                    c.park_ms.to_string(),
                ],
            ),
            Act::WriteRelease { token } => (
                "rw_write_release",
                vec![&n.lock, &n.rw, &n.intents],
                vec![wire::token('w', token), c.window_ms.to_string()],
            ),
        };
        let mut argv: Vec<String> = PROTOCOL.iter().map(|v| v.to_string()).collect();
        argv.extend(args);
        Call::Script(script, keys.into_iter().map(str::to_owned).collect(), argv)
    }

    /// The model's step for `act` at `now`: its reply as an observation,
    /// and what the generator needs to know.
    pub(crate) fn apply(&self, s: &mut Server, act: Act, now: Ms) -> (Obs, Outcome) {
        let c = self.consts;
        let fair = m::FairArgs {
            claim_ms: c.claim_ms,
        };
        let mut obs = Obs::new();
        let mut put = |v: Vec<Num>| {
            if let [one] = &v[..] {
                obs.insert("reply".into(), one.clone());
            } else {
                for (i, n) in v.into_iter().enumerate() {
                    obs.insert(format!("reply[{i}]"), n);
                }
            }
        };
        let acquired = |r: AcquireReply, put: &mut dyn FnMut(Vec<Num>)| match r {
            AcquireReply::Acquired { fence } => {
                put(vec![Num::Exact(1), Num::Us(fence as i64)]);
                Outcome::Acquired
            }
            AcquireReply::Held { park_ms } => {
                put(vec![Num::Exact(0), Num::Ms(park_ms)]);
                Outcome::Held { now_us: None }
            }
        };
        let parked = |r: FairAcquireReply, put: &mut dyn FnMut(Vec<Num>)| match r {
            FairAcquireReply::Acquired { fence } => {
                put(vec![Num::Exact(1), Num::Us(fence as i64)]);
                Outcome::Acquired
            }
            FairAcquireReply::Parked { park_ms, now_us } => {
                put(vec![
                    Num::Exact(0),
                    Num::Ms(park_ms),
                    Num::Us(now_us as i64),
                ]);
                Outcome::Held {
                    now_us: Some(now_us),
                }
            }
        };
        let released = |r: ReleaseReply| {
            Num::Exact(match r {
                ReleaseReply::Released => 1,
                ReleaseReply::NotOurs => 0,
                ReleaseReply::Gone => -1,
            })
        };
        let outcome = match act {
            Act::Acquire {
                token,
                lease,
                member,
            } => {
                let a = m::AcquireArgs {
                    token,
                    lease_ms: lease,
                    member,
                    grace_ms: c.grace_ms,
                    park_ms: c.park_ms,
                    handoff_ms: c.handoff_ms,
                };
                acquired(m::acquire(s, &a, now), &mut put)
            }
            Act::Release { token } => {
                let a = m::ReleaseArgs {
                    token,
                    handoff_ms: c.handoff_ms,
                };
                put(vec![released(m::release(s, &a, now))]);
                Outcome::Done
            }
            Act::Extend { token, lease, also } => {
                let holder = match self.kind {
                    Kind::Fair => m::Holder::Fair,
                    Kind::Rw => m::Holder::Writer,
                    _ => m::Holder::Mutex,
                };
                let tokens = [Some(token), also].into_iter().flatten();
                codes(
                    tokens.map(|t| m::extend(s, holder, t, lease, now)),
                    &mut obs,
                );
                Outcome::Done
            }
            Act::ReadExtend { token, lease, also } => {
                let tokens = [Some(token), also].into_iter().flatten();
                codes(
                    tokens.map(|t| m::rw_read_extend(s, t, lease, now)),
                    &mut obs,
                );
                Outcome::Done
            }
            Act::SemExtend { token, lease, also } => {
                let tokens = [Some(token), also].into_iter().flatten();
                codes(tokens.map(|t| m::sem_extend(s, t, lease, now)), &mut obs);
                Outcome::Done
            }
            Act::RwPass { member } => {
                put(vec![Num::Exact(m::rw_pass(s, member, now) as i64)]);
                Outcome::Done
            }
            Act::SemAcquire {
                token,
                lease,
                member,
                arrival,
            } => {
                let a = m::SemAcquireArgs {
                    token,
                    lease_ms: lease,
                    member,
                    grace_ms: c.grace_ms,
                    park_ms: c.park_ms,
                    permits: c.permits,
                    reserve_ms: c.reserve_ms,
                    arrival_us: arrival,
                };
                parked(m::sem_acquire(s, &a, now), &mut put)
            }
            Act::SemRelease { token } => {
                put(vec![released(m::sem_release(
                    s,
                    token,
                    c.permits,
                    c.reserve_ms,
                    now,
                ))]);
                Outcome::Done
            }
            Act::SemPass { member } => {
                put(vec![Num::Exact(
                    m::sem_pass(s, member, c.permits, c.reserve_ms, now) as i64,
                )]);
                Outcome::Done
            }
            Act::Pass { member } => {
                put(vec![Num::Exact(
                    m::pass(s, member, c.handoff_ms, now) as i64
                )]);
                Outcome::Done
            }
            Act::FairAcquire {
                token,
                lease,
                member,
                arrival,
            } => {
                let a = m::FairAcquireArgs {
                    token,
                    lease_ms: lease,
                    member,
                    grace_ms: c.grace_ms,
                    park_ms: c.park_ms,
                    claim_ms: c.claim_ms,
                    arrival_us: arrival,
                };
                parked(m::fair_acquire(s, &a, now), &mut put)
            }
            Act::FairRelease { token } => {
                put(vec![released(m::fair_release(s, token, &fair, now))]);
                Outcome::Done
            }
            Act::FairPass { member, token } => {
                put(vec![Num::Exact(
                    m::fair_pass(s, member, token, &fair, now) as i64
                )]);
                Outcome::Done
            }
            Act::ReadAcquire { token, lease } => acquired(
                m::rw_read_acquire(s, token, lease, c.park_ms, now),
                &mut put,
            ),
            Act::ReadRelease { token } => {
                put(vec![released(m::rw_read_release(
                    s,
                    token,
                    c.window_ms,
                    now,
                ))]);
                Outcome::Done
            }
            Act::WriteAcquire {
                token,
                lease,
                member,
            } => {
                let a = m::RwWriteArgs {
                    token,
                    lease_ms: lease,
                    member,
                    grace_ms: c.grace_ms,
                    park_ms: c.park_ms,
                };
                acquired(m::rw_write_acquire(s, &a, now), &mut put)
            }
            Act::WriteRelease { token } => {
                put(vec![released(m::rw_write_release(
                    s,
                    token,
                    c.window_ms,
                    now,
                ))]);
                Outcome::Done
            }
            Act::Sleep(_) | Act::Subscribe(_) | Act::Unsubscribe(_) => Outcome::Done,
        };
        (obs, outcome)
    }
}

/// A batch's codes, one per lock: `reply[i]`.
fn codes(replies: impl Iterator<Item = ExtendReply>, obs: &mut Obs) {
    for (i, r) in replies.enumerate() {
        let code = match r {
            ExtendReply::Extended => 1,
            ExtendReply::NotOurs => 0,
            ExtendReply::Gone => -1,
        };
        obs.insert(format!("reply[{i}]"), Num::Exact(code));
    }
}
