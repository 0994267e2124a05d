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
            Act::Extend { token, lease } => (
                "extend",
                vec![&n.lock],
                vec![lease.to_string(), wire::token(letter, token)],
            ),
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
            Act::Extend { token, lease } => {
                let holder = match self.kind {
                    Kind::Mutex | Kind::Election => m::Holder::Mutex,
                    Kind::Fair => m::Holder::Fair,
                    Kind::Rw => m::Holder::Writer,
                };
                let code = match m::extend(s, holder, token, lease, now) {
                    ExtendReply::Extended => 1,
                    ExtendReply::NotOurs => 0,
                    ExtendReply::Gone => -1,
                };
                obs.insert("reply[0]".into(), Num::Exact(code));
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
                match m::fair_acquire(s, &a, now) {
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
                }
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
