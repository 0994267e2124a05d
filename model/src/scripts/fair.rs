//! The FairMutex's scripts: fair_acquire.lua, fair_release.lua and
//! fair_pass.lua, with the shared code of fair_common.lua.

use super::{FairKeys, FairMember, LockValue, Member, Message, Ms, ReleaseReply, Server, Token};

/// fair_common.lua:61: a standby's slack.
pub const STANDBY_SLACK_MS: Ms = 100;

/// Arguments the fair scripts share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FairArgs {
    /// claim_ms: a grant's lease until its confirm.
    pub claim_ms: Ms,
}

impl FairKeys {
    fn zadd(&mut self, score: i64, m: FairMember, nx: bool) {
        if let Some(i) = self.queue.iter().position(|x| x.1 == m) {
            if nx {
                return;
            }
            self.queue.remove(i);
        }
        let at = self.queue.partition_point(|x| *x < (score, m));
        self.queue.insert(at, (score, m));
    }

    fn zrem(&mut self, m: FairMember) -> bool {
        let n = self.queue.len();
        self.queue.retain(|x| x.1 != m);
        self.queue.len() != n
    }

    fn marker(&self, now: Ms) -> Option<(Ms, FairMember)> {
        match self.handoff {
            Some((d, m, e)) if e > now => Some((d, m)),
            _ => None,
        }
    }
}

/// The result of [`grant_next`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moved {
    Nobody,
    Granted,
    Caller,
}

/// fair_common.lua:105-187: pops heads until one is granted the lock (or
/// is the caller, or nobody is left).
fn grant_next(
    s: &mut Server,
    a: &FairArgs,
    now: Ms,
    caller: Option<Member>,
    drop_marked: bool,
) -> Moved {
    let claim = a.claim_ms;
    let now_us = (now * 1000) as i64;
    let mut long: Option<i64> = None;
    let mut marker: Option<Option<(Ms, FairMember)>> = None;
    // fair_common.lua:110-114
    let keep_long = |s: &mut Server, long: Option<i64>, arrival: Option<i64>| {
        if let (Some(l), Some(a)) = (long, arrival)
            && a <= l
            && !s.fair.queue.is_empty()
        {
            s.fair.zadd(-l, FairMember::Long, false);
        }
    };
    loop {
        // fair_common.lua:116-120: pop the head.
        if s.fair.queue.is_empty() {
            return Moved::Nobody;
        }
        let (score, head) = s.fair.queue.remove(0);
        let FairMember::Waiter(member, token) = head else {
            long = Some(-score);
            continue;
        };
        let arrival = Some(score);
        if Some(member) == caller {
            keep_long(s, long, arrival);
            return Moved::Caller;
        }
        if drop_marked && marker.is_none() {
            marker = Some(s.fair.marker(now));
        }
        let dropped = matches!(marker, Some(Some((d, m))) if m == head && now > d);
        if dropped {
            continue;
        }
        // fair_common.lua:144-163: probe, then the grant.
        let probed = s.publish(member.client, Message::Probe(member.waiter));
        if probed == 0 {
            continue;
        }
        let f = s.advance_fence(now);
        s.lock = Some((LockValue::Token(token), now + claim));
        let claim_end = now_us as u64 + claim * 1000;
        s.publish(
            member.client,
            Message::Grant(member.waiter, token, f, claim_end),
        );
        // fair_common.lua:164-181: standbys while a long parker may wait.
        if let Some(l) = long
            && score <= l
        {
            keep_long(s, long, arrival);
            let next: Vec<FairMember> = s
                .fair
                .queue
                .iter()
                .filter(|x| x.0 >= 0)
                .take(s.bugs.standbys())
                .map(|x| x.1)
                .collect();
            for (i, m) in next.into_iter().enumerate() {
                let FairMember::Waiter(mm, tt) = m else {
                    continue;
                };
                let window = claim
                    + if i == 0 {
                        STANDBY_SLACK_MS
                    } else {
                        3 * STANDBY_SLACK_MS
                    };
                if i == 0 {
                    let until = now + window + STANDBY_SLACK_MS;
                    s.fair.handoff = Some((until, m, now + window + 10 * STANDBY_SLACK_MS));
                }
                s.publish(mm.client, Message::FairStandby(mm.waiter, tt, window));
            }
        }
        return Moved::Granted;
    }
}

/// Arguments of [`fair_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FairAcquireArgs {
    /// `ARGV[1]` the waiter's token.
    pub token: Token,
    /// `ARGV[2]` lease_ms.
    pub lease_ms: Ms,
    /// `ARGV[4]` the member (with the token), `None` for `""`.
    pub member: Option<Member>,
    /// `ARGV[5]` grace_ms.
    pub grace_ms: Ms,
    /// `ARGV[6]` park_ms.
    pub park_ms: Ms,
    /// `ARGV[8]` claim_ms.
    pub claim_ms: Ms,
    /// `ARGV[9]` arrival_us, `None` for `""`.
    pub arrival_us: Option<u64>,
}

/// Reply of [`fair_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FairAcquireReply {
    /// `{1, fence}`: taken, or a grant to us confirmed.
    Acquired {
        /// The fence (µs).
        fence: u64,
    },
    /// `{0, park, now_us}`.
    Parked {
        /// How long to park (ms).
        park_ms: i64,
        /// The server time of the call (µs).
        now_us: u64,
    },
}

/// fair_acquire.lua:61-118 (kind checks left out).
pub fn fair_acquire(s: &mut Server, a: &FairAcquireArgs, now: Ms) -> FairAcquireReply {
    let holder = s.lock_at(now);
    let fm = a.member.map(|m| FairMember::Waiter(m, a.token));
    // fair_acquire.lua:66-73: a grant to us (or a re-sent attempt): confirm.
    if holder == Some(LockValue::Token(a.token)) {
        s.lock = Some((LockValue::Token(a.token), now + a.lease_ms));
        if let Some(m) = fm {
            s.fair.zrem(m);
        }
        return FairAcquireReply::Acquired { fence: s.fence };
    }
    let now_us = now * 1000;
    // fair_acquire.lua:75-91: free: move the queue on, or take it.
    if holder.is_none() {
        let fa = FairArgs {
            claim_ms: a.claim_ms,
        };
        if grant_next(s, &fa, now, a.member, true) != Moved::Granted {
            let fence = s.advance_fence(now);
            s.lock = Some((LockValue::Token(a.token), now + a.lease_ms));
            return FairAcquireReply::Acquired { fence };
        }
    }
    // fair_acquire.lua:92-118: queue by arrival; mark a long park.
    let pttl = s.pttl(now);
    let Some(m) = fm else {
        return FairAcquireReply::Parked {
            park_ms: pttl,
            now_us,
        };
    };
    let arrival = a.arrival_us.unwrap_or(now_us).min(now_us) as i64;
    s.fair.zadd(arrival, m, true);
    let park = if pttl < 0 { a.park_ms as i64 } else { pttl };
    if park > a.claim_ms as i64 {
        let long = s
            .fair
            .queue
            .iter()
            .find(|x| x.1 == FairMember::Long)
            .map(|x| x.0);
        if long.is_none_or(|l| -l < now_us as i64) {
            s.fair.zadd(-(now_us as i64), FairMember::Long, false);
        }
        if let Some((_, marked)) = s.fair.marker(now)
            && marked == m
        {
            s.fair.handoff = None;
        }
    }
    FairAcquireReply::Parked {
        park_ms: park,
        now_us,
    }
}

/// fair_release.lua:25-36.
pub fn fair_release(s: &mut Server, token: Token, a: &FairArgs, now: Ms) -> ReleaseReply {
    match s.lock_at(now) {
        Some(LockValue::Token(t)) if t == token => {}
        Some(_) => return ReleaseReply::NotOurs,
        None => return ReleaseReply::Gone,
    }
    if grant_next(s, a, now, None, false) != Moved::Granted {
        s.lock = None;
    }
    ReleaseReply::Released
}

/// fair_pass.lua:23-37: returns whether the next waiter was granted.
pub fn fair_pass(s: &mut Server, member: Member, token: Token, a: &FairArgs, now: Ms) -> bool {
    let removed = s.fair.zrem(FairMember::Waiter(member, token));
    if removed && s.fair.queue.len() == 1 {
        s.fair.zrem(FairMember::Long);
    }
    let holder = s.lock_at(now);
    let granted_to_us = holder == Some(LockValue::Token(token));
    if !granted_to_us && (holder.is_some() || !removed) {
        return false;
    }
    if grant_next(s, a, now, None, false) == Moved::Granted {
        return true;
    }
    s.lock = None;
    false
}
