//! The Semaphore's scripts: sem_acquire.lua, sem_release.lua and
//! sem_pass.lua, with the shared code of sem_common.lua.

use super::{FairAcquireReply, Member, Message, Ms, ReleaseReply, Server, Token};

/// A semaphore's holders `P:{N}:holders`, queue `P:{N}:queue` and entry
/// expiries `P:{N}:queue:expiry` (the permit count is the callers').
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SemKeys {
    /// Permit token -> lease expiry (ms), sorted by (expiry, token).
    pub holders: Vec<(Ms, Token)>,
    /// Member -> arrival (µs), in FIFO order (arrival, member).
    pub queue: Vec<(u64, Member)>,
    /// Member -> entry expiry (ms).
    pub expiry: Vec<(Member, Ms)>,
}

impl SemKeys {
    /// sem_common.lua:49-52
    fn owed(&self, permits: u8) -> usize {
        let free = i64::from(permits) - self.holders.len() as i64;
        free.min(self.queue.len() as i64).max(0) as usize
    }

    /// sem_common.lua:54-56
    fn reclaim(&mut self, now: Ms) -> i64 {
        let n = self.holders.len();
        self.holders.retain(|h| h.0 > now);
        (n - self.holders.len()) as i64
    }

    fn rank(&self, m: Member) -> Option<usize> {
        self.queue.iter().position(|x| x.1 == m)
    }

    fn remove(&mut self, m: Member) {
        self.queue.retain(|x| x.1 != m);
        self.expiry.retain(|x| x.0 != m);
    }

    /// sem_common.lua:58-71
    fn prune(&mut self, now: Ms, keep: Option<Member>, owed_now: usize) -> i64 {
        let mut was_owed = 0;
        let mut lapsed: Vec<(Ms, Member)> = self
            .expiry
            .iter()
            .filter(|x| x.1 <= now && Some(x.0) != keep)
            .map(|x| (x.1, x.0))
            .collect();
        lapsed.sort();
        for (_, m) in lapsed {
            if self.rank(m).is_some_and(|r| r < owed_now) {
                was_owed += 1;
            }
            self.remove(m);
        }
        was_owed
    }
}

/// sem_common.lua:73-117: wakes the members newly owed a permit.
fn settle(s: &mut Server, permits: u8, freed: i64, reserve_ms: Ms, now: Ms) -> usize {
    if freed <= 0 {
        return 0;
    }
    let mut limit = s.sem.owed(permits);
    let mut rank = (limit as i64 - freed).max(0) as usize;
    let mut woken = 0;
    while rank < limit {
        let Some(&(_, m)) = s.sem.queue.get(rank) else {
            break;
        };
        if s.publish(m.client, Message::Wake(m.waiter)) > 0 {
            if let Some(e) = s.sem.expiry.iter_mut().find(|x| x.0 == m) {
                e.1 = now + reserve_ms;
            }
            rank += 1;
            woken += 1;
        } else {
            s.sem.remove(m);
            limit = s.sem.owed(permits);
        }
    }
    if woken > 0 {
        let next: Vec<Member> = s
            .sem
            .queue
            .iter()
            .skip(rank)
            .take(s.bugs.standbys())
            .map(|x| x.1)
            .collect();
        for m in next {
            s.publish(m.client, Message::Standby(m.waiter, 2 * reserve_ms));
        }
    }
    woken
}

/// Arguments of [`sem_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemAcquireArgs {
    /// `ARGV[1]` the permit token.
    pub token: Token,
    /// `ARGV[2]` lease_ms.
    pub lease_ms: Ms,
    /// `ARGV[4]` the waiting caller's member, `None` for `""`.
    pub member: Option<Member>,
    /// `ARGV[5]` grace_ms.
    pub grace_ms: Ms,
    /// `ARGV[6]` park_ms.
    pub park_ms: Ms,
    /// `ARGV[8]` the permit count.
    pub permits: u8,
    /// `ARGV[9]` reserve_ms.
    pub reserve_ms: Ms,
    /// `ARGV[10]` arrival_us, `None` for `""`.
    pub arrival_us: Option<u64>,
}

/// sem_acquire.lua:60-169 (kind and count checks left out). Replies as
/// [`fair_acquire`](super::fair_acquire): `{1, fence}` or `{0, park, now_us}`.
pub fn sem_acquire(s: &mut Server, a: &SemAcquireArgs, now: Ms) -> FairAcquireReply {
    let now_us = now * 1000;
    // sem_acquire.lua:91-95: a re-sent call finds its live permit.
    if s.sem.holders.iter().any(|h| h.1 == a.token && h.0 > now) {
        if let Some(m) = a.member {
            s.sem.remove(m);
        }
        return FairAcquireReply::Acquired { fence: s.fence };
    }
    // sem_acquire.lua:97-100
    let mut freed = s.sem.reclaim(now);
    let free = i64::from(a.permits) - s.sem.holders.len() as i64;
    let owed_now = free.min(s.sem.queue.len() as i64).max(0) as usize;
    freed += s.sem.prune(now, a.member, owed_now);
    // sem_acquire.lua:101-114: a waiting caller is queued by its arrival
    // before its rank is judged (it may sort among the owed ranks).
    if let Some(m) = a.member
        && s.sem.rank(m).is_none()
    {
        let arrival = a.arrival_us.unwrap_or(now_us).min(now_us);
        let at = s.sem.queue.partition_point(|x| *x < (arrival, m));
        s.sem.queue.insert(at, (arrival, m));
    }
    let rank = a
        .member
        .and_then(|m| s.sem.rank(m))
        .unwrap_or(s.sem.queue.len());
    // sem_acquire.lua:116-132: a permit free and not owed ahead of us.
    if (rank as i64) < free {
        let fence = s.advance_fence(now);
        s.sem.holders.retain(|h| h.1 != a.token);
        let at = s
            .sem
            .holders
            .partition_point(|h| *h < (now + a.lease_ms, a.token));
        s.sem.holders.insert(at, (now + a.lease_ms, a.token));
        if let Some(m) = a.member {
            s.sem.remove(m);
        }
        settle(s, a.permits, freed, a.reserve_ms, now);
        return FairAcquireReply::Acquired { fence };
    }
    // sem_acquire.lua:134-148: park until the earliest holder's lease ends.
    let mut park = match s.sem.holders.first() {
        Some(h) => (h.0 as i64 - now as i64).max(1),
        None => a.park_ms as i64,
    };
    if let Some(m) = a.member {
        let ttl = park as Ms + a.grace_ms;
        s.sem.expiry.retain(|x| x.0 != m);
        s.sem.expiry.push((m, now + ttl));
        s.sem.expiry.sort();
    }
    settle(s, a.permits, freed, a.reserve_ms, now);
    // sem_acquire.lua:149-168: a free permit owed ahead: park no longer
    // than the earliest owed entry.
    if free > 0 {
        for (_, m) in s.sem.queue.iter().take(free as usize) {
            if let Some(e) = s.sem.expiry.iter().find(|x| x.0 == *m) {
                park = park.min((e.1 as i64 - now as i64 + 1).max(1));
            }
        }
    }
    FairAcquireReply::Parked {
        park_ms: park,
        now_us,
    }
}

/// sem_release.lua:20-36: `Released` (1) or `Gone` (-1).
pub fn sem_release(
    s: &mut Server,
    token: Token,
    permits: u8,
    reserve_ms: Ms,
    now: Ms,
) -> ReleaseReply {
    let score = s.sem.holders.iter().find(|h| h.1 == token).map(|h| h.0);
    let mut freed = 0;
    if score.is_some() {
        s.sem.holders.retain(|h| h.1 != token);
        freed = 1;
    }
    freed += s.sem.reclaim(now);
    if freed > 0 {
        let owed = s.sem.owed(permits);
        freed += s.sem.prune(now, None, owed);
        settle(s, permits, freed, reserve_ms, now);
    }
    match score {
        Some(e) if e > now => ReleaseReply::Released,
        _ => ReleaseReply::Gone,
    }
}

/// sem_pass.lua (after its header): returns whether another waiter was
/// woken.
pub fn sem_pass(s: &mut Server, member: Member, permits: u8, reserve_ms: Ms, now: Ms) -> bool {
    let Some(rank) = s.sem.rank(member) else {
        return false;
    };
    let mut freed = s.sem.reclaim(now);
    if rank < s.sem.owed(permits) {
        freed += 1;
    }
    s.sem.remove(member);
    let owed = s.sem.owed(permits);
    freed += s.sem.prune(now, None, owed);
    settle(s, permits, freed, reserve_ms, now) > 0
}
