//! The renewals: extend.lua (Mutex, Election, FairMutex, RwLock writer),
//! rw_read_extend.lua and sem_extend.lua, each for one lock of its batch.
//!
//! A renewal sets a later expiry and tells nobody. A *shortening* extend
//! (the new expiry is earlier) tells the waiters, who parked on the old
//! lease and would sleep past a shorter one that lapses: the Mutex's first
//! three live waiters and the FairMutex's first three by arrival get a
//! standby of the new lease; the Semaphore's first three queue members
//! too; the RwLock's clients get `"s"` on its broadcast channel (each
//! attempts, and parks again on the new lease).

use super::{FairMember, LockValue};
use super::{Member, Message, Ms, Server, Token};

/// Reply of [`extend`], [`rw_read_extend`] and [`sem_extend`] for one lock
/// (the scripts take a batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtendReply {
    /// `1`: ours; its expiry is now `lease_ms` from now.
    Extended,
    /// `0`: another token's.
    NotOurs,
    /// `-1`: gone.
    Gone,
}

/// Whose token a lock key holds, as extend.lua reads its kind letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// `m` or `l`: waiters in `P:{N}:waiters`.
    Mutex,
    /// `q`: waiters in `P:{N}:fifo`.
    Fair,
    /// `w`: waiters told on the RwLock's channel `P:{N}:rw`.
    Writer,
}

/// extend.lua:76-99, for one key.
pub fn extend(s: &mut Server, holder: Holder, token: Token, lease_ms: Ms, now: Ms) -> ExtendReply {
    match s.lock {
        Some((LockValue::Token(t), e)) if t == token && e > now => {
            s.lock = Some((LockValue::Token(t), now + lease_ms));
            // extend.lua:88-91: shortened (PEXPIRE GT refused, LT set), told by
            // the token's kind letter (extend.lua:47-74).
            if now + lease_ms < e {
                match holder {
                    Holder::Mutex => standby(s, lease_ms, now),
                    _ if s.bugs.short_extend_tells_mutex_only => {}
                    Holder::Fair => fair_standby(s, lease_ms),
                    Holder::Writer => s.broadcast(b's'),
                }
            }
            ExtendReply::Extended
        }
        _ => match s.lock_at(now) {
            Some(_) => ExtendReply::NotOurs,
            None => ExtendReply::Gone,
        },
    }
}

/// extend.lua:60-73: the first three live waiters get a standby of the
/// new lease.
fn standby(s: &mut Server, lease_ms: Ms, now: Ms) {
    let head: Vec<Member> = s
        .waiters
        .iter()
        .filter(|e| e.expiry > now)
        .take(3)
        .map(|e| e.member)
        .collect();
    for m in head {
        s.publish(m.client, Message::Standby(m.waiter, lease_ms));
    }
}

/// extend.lua:58-59, 63-73: the first three waiters by arrival (not the long-park
/// marker, scored below 0) get a fair standby of the new lease.
fn fair_standby(s: &mut Server, lease_ms: Ms) {
    let head: Vec<(Member, Token)> = s
        .fair
        .queue
        .iter()
        .filter(|(score, _)| *score >= 0)
        .filter_map(|(_, m)| match m {
            FairMember::Waiter(m, t) => Some((*m, *t)),
            FairMember::Long => None,
        })
        .take(3)
        .collect();
    for (m, t) in head {
        s.publish(m.client, Message::FairStandby(m.waiter, t, lease_ms));
    }
}

/// rw_read_extend.lua:23-37, for one hold.
pub fn rw_read_extend(s: &mut Server, token: Token, lease_ms: Ms, now: Ms) -> ExtendReply {
    let Some(r) = s.rw.readers.iter_mut().find(|r| r.0 == token && r.1 > now) else {
        return ExtendReply::Gone;
    };
    let old = r.1;
    r.1 = now + lease_ms;
    // rw_read_extend.lua:30-32: shortened: the waiting writers attempt.
    if now + lease_ms < old && !s.bugs.short_extend_tells_mutex_only {
        s.broadcast(b's');
    }
    ExtendReply::Extended
}

/// sem_extend.lua:29-57, for one permit.
pub fn sem_extend(s: &mut Server, token: Token, lease_ms: Ms, now: Ms) -> ExtendReply {
    let Some(i) = s.sem.holders.iter().position(|h| h.1 == token && h.0 > now) else {
        return ExtendReply::Gone;
    };
    let (old, _) = s.sem.holders.remove(i);
    let e = now + lease_ms;
    let at = s.sem.holders.partition_point(|h| *h < (e, token));
    s.sem.holders.insert(at, (e, token));
    // sem_extend.lua:42-52: shortened: the first three waiters stand by.
    if e < old && !s.bugs.short_extend_tells_mutex_only {
        let head: Vec<Member> = s.sem.queue.iter().take(3).map(|x| x.1).collect();
        for m in head {
            s.publish(m.client, Message::Standby(m.waiter, lease_ms));
        }
    }
    ExtendReply::Extended
}
