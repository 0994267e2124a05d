//! The RwLock's scripts: rw_write_acquire.lua, rw_read_acquire.lua, the
//! releases and rw_pass.lua (the reader's extend is in `extend.rs`).

use super::{
    AcquireReply, ClientId, LockValue, Member, Message, Ms, Published, ReleaseReply, Server, Token,
};

impl Server {
    pub(super) fn broadcast(&mut self, what: u8) {
        let clients: Vec<ClientId> = self.subscribed.iter().copied().collect();
        for c in clients {
            self.published.push(Published {
                client: c,
                message: Message::RwReleased(what),
            });
        }
    }

    pub(super) fn cut_intents(&mut self, now: Ms, window_ms: Ms) {
        for i in &mut self.rw.intents {
            i.1 = i.1.min(now + window_ms);
        }
    }
}

/// Arguments of [`rw_write_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RwWriteArgs {
    /// `ARGV[1]` the writer's token.
    pub token: Token,
    /// `ARGV[2]` lease_ms.
    pub lease_ms: Ms,
    /// `ARGV[4]` the waiting writer's member, `None` for `""`.
    pub member: Option<Member>,
    /// `ARGV[5]` grace_ms.
    pub grace_ms: Ms,
    /// `ARGV[6]` park_ms.
    pub park_ms: Ms,
}

/// rw_write_acquire.lua:53-109 (kind checks left out). Replies as
/// [`acquire`](super::acquire): `{1, fence}` or `{0, park}`.
pub fn rw_write_acquire(s: &mut Server, a: &RwWriteArgs, now: Ms) -> AcquireReply {
    let writer = s.lock_at(now);
    // rw_write_acquire.lua:61-67: a re-sent call finds its own token.
    if writer == Some(LockValue::Token(a.token)) {
        if let Some(m) = a.member {
            s.rw.intents.retain(|x| x.0 != m);
        }
        return AcquireReply::Acquired { fence: s.fence };
    }
    let park = if writer.is_some() {
        // rw_write_acquire.lua:68-72
        s.pttl(now)
    } else {
        // rw_write_acquire.lua:74-100: no writer; readers?
        s.rw.readers.retain(|r| r.1 > now);
        match s.rw.readers.iter().map(|r| r.1).max() {
            None => {
                let had_intent = a.member.is_some_and(|m| {
                    let n = s.rw.intents.len();
                    s.rw.intents.retain(|x| x.0 != m);
                    n != s.rw.intents.len()
                });
                let fence = s.advance_fence(now);
                s.lock = Some((LockValue::Token(a.token), now + a.lease_ms));
                if had_intent {
                    s.broadcast(b'g');
                }
                return AcquireReply::Acquired { fence };
            }
            Some(last) => (last - now).max(1) as i64,
        }
    };
    // rw_write_acquire.lua:102-108: register the intent.
    if let Some(m) = a.member {
        let ttl = park.max(0) as Ms + a.grace_ms;
        s.rw.intents.retain(|x| x.0 != m);
        let at = s.rw.intents.partition_point(|x| x.0 < m);
        s.rw.intents.insert(at, (m, now + ttl));
    }
    AcquireReply::Held { park_ms: park }
}

/// rw_read_acquire.lua:44-77 (kind checks left out): `{1, fence}` (the
/// current fence) or `{0, park}`.
pub fn rw_read_acquire(
    s: &mut Server,
    token: Token,
    lease_ms: Ms,
    park_ms: Ms,
    now: Ms,
) -> AcquireReply {
    // rw_read_acquire.lua:50-56: a writer holds it.
    if s.lock_at(now).is_some() {
        let pttl = s.pttl(now);
        return AcquireReply::Held {
            park_ms: if pttl < 0 { park_ms as i64 } else { pttl },
        };
    }
    // rw_read_acquire.lua:69-81: a live intent holds new readers back, but
    // not a re-sent attempt whose token already holds (renewed below).
    s.rw.intents.retain(|x| x.1 > now);
    if let Some(first) = s.rw.intents.iter().map(|x| x.1).min() {
        let mine = s.rw.readers.iter().any(|r| r.0 == token && r.1 > now);
        if !mine {
            return AcquireReply::Held {
                park_ms: (first - now).max(1) as i64,
            };
        }
    }
    // rw_read_acquire.lua:82-87
    s.rw.readers.retain(|r| r.1 > now && r.0 != token);
    let at = s.rw.readers.partition_point(|r| r.0 < token);
    s.rw.readers.insert(at, (token, now + lease_ms));
    AcquireReply::Acquired { fence: s.fence }
}

/// rw_read_release.lua:25-38: `Released` (1) or `Gone` (-1).
pub fn rw_read_release(s: &mut Server, token: Token, window_ms: Ms, now: Ms) -> ReleaseReply {
    let expiry = s.rw.readers.iter().find(|r| r.0 == token).map(|r| r.1);
    s.rw.readers.retain(|r| r.0 != token);
    match expiry {
        Some(e) if e > now => {}
        _ => return ReleaseReply::Gone,
    }
    s.rw.readers.retain(|r| r.1 > now);
    if s.rw.readers.is_empty() {
        s.cut_intents(now, window_ms);
        s.broadcast(b'r');
    }
    ReleaseReply::Released
}

/// rw_write_release.lua:25-37.
pub fn rw_write_release(s: &mut Server, token: Token, window_ms: Ms, now: Ms) -> ReleaseReply {
    match s.lock_at(now) {
        Some(LockValue::Token(t)) if t == token => {}
        Some(_) => return ReleaseReply::NotOurs,
        None => return ReleaseReply::Gone,
    }
    s.lock = None;
    s.cut_intents(now, window_ms);
    s.broadcast(b'w');
    ReleaseReply::Released
}

/// rw_pass.lua:16-28: the waiting writer `member` gives up; returns
/// whether the waiters were woken (`"i"`).
pub fn rw_pass(s: &mut Server, member: Member, now: Ms) -> bool {
    s.rw.intents.retain(|x| x.0 != member);
    let free = s.lock_at(now).is_none() && s.rw.readers.iter().all(|r| r.1 <= now);
    if free || s.rw.intents.is_empty() {
        s.broadcast(b'i');
        return true;
    }
    false
}
