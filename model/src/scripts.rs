//! The server: one lock name's keys, and one step function per Lua script,
//! each run atomically (as Redis runs a script).
//!
//! # API (for trace validation and the checker)
//!
//! - [`Server`] holds one lock name's keys as plain data: the lock key
//!   ([`Server::lock`]: a [`LockValue`] and its expiry), the fencing counter
//!   ([`Server::fence`]), the plain waiter queue ([`Server::waiters`], kept
//!   in ZSET order), the fair queue and hand-off marker ([`Server::fair`]),
//!   the RwLock's readers and intents ([`Server::rw`]), the Semaphore's
//!   holders, queue and entry expiries ([`Server::sem`]), and the clients with
//!   a live subscription ([`Server::subscribed`]: whom a PUBLISH reaches).
//! - **Time is explicit**: every step takes `now`, the server's clock in
//!   **milliseconds** (the scripts' `now_ms`); expiries and queue scores are
//!   server ms as in the scripts. Fences are µs, as the scripts write them:
//!   `max(previous + 1, now * 1000)`. A key is live while `expiry > now`
//!   (Redis expires a key once its PTTL reaches 0).
//! - Each script is a `pub fn name(&mut Server, &Args, now) -> Reply`, named
//!   after its `.lua` file, its doc naming the lines it models. Replies are
//!   typed ([`AcquireReply`], [`ReleaseReply`], [`FairAcquireReply`], ...)
//!   and mirror the wire replies (`{1, fence}`, `{0, pttl}`, `1`/`0`/`-1`).
//! - What a script PUBLISHes is appended to [`Server::published`] (only
//!   when the channel has a subscriber: the PUBLISH counted a receiver), in
//!   order; the caller drains it. A fair grant's probe is published too.
//! - Members are `"<client id>:<waiter id>"` ([`Member`]); the ZSET orders
//!   equal scores by member string, which [`Member`]'s `Ord` matches for
//!   single-digit ids. Tokens are opaque numbers ([`Token`]); the trace
//!   helper maps them to strings with the right kind letter.
//! - [`Bugs`] (in [`Server::bugs`]) switches scripts back to historic
//!   behaviour; [`Bugs::default`] is today's scripts.
//!
//! Not modelled: WRONGTYPE/WRONGKIND errors and kind letters (one kind per
//! lock name), the fence key's own TTL (days), the queue key's PEXPIRE
//! (it always outlives its entries), refused PUBLISHes (ACL), the protocol
//! version check.

use std::collections::BTreeSet;

mod extend;
mod fair;
mod rw;
mod sem;
pub use extend::{ExtendReply, Holder, extend, rw_read_extend, sem_extend};
pub use fair::{
    FairAcquireArgs, FairAcquireReply, FairArgs, STANDBY_SLACK_MS, fair_acquire, fair_pass,
    fair_release,
};
pub use rw::{
    RwWriteArgs, rw_pass, rw_read_acquire, rw_read_release, rw_write_acquire, rw_write_release,
};
pub use sem::{SemAcquireArgs, SemKeys, sem_acquire, sem_pass, sem_release};

/// Server time in milliseconds (the scripts' `now_ms`).
pub type Ms = u64;
/// A client (process) id: the `<client id>` of members and wake channels.
pub type ClientId = u8;
/// A waiter id, unique within its client.
pub type WaiterId = u8;

/// An owner token (opaque; one per acquisition attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u16);

/// A queue member `"<client id>:<waiter id>"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// Whose wake channel `P:{N}:wake:<client>` the member is told on.
    pub client: ClientId,
    /// The waiter id, the message's payload.
    pub waiter: WaiterId,
}

/// Historic behaviours, each switched on by its flag (all off: today's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// (a) Before 3e2a7cf: a release left the woken member in the queue
    /// with its old expiry, pruned nothing and sent no standbys: a frozen
    /// woken waiter took every later wake-up.
    pub frozen_woken_waiter: bool,
    /// (b) Before b7ef3b0: a shortening extend moved the guard's deadline
    /// only on its reply (client side; the script is unchanged).
    pub cancelled_shortening_extend: bool,
    /// (c) Before 3e2a7cf: an acquire that found its own token answered
    /// "held" (`{0, pttl}`) and queued the caller.
    pub resent_acquire_parks: bool,
    /// (d) Before a580fd6: every waiting task queued a member of its own
    /// (client side; the release still reads three members and skips the
    /// woken member's client).
    pub pool_queues_every_task: bool,
    /// (e) Before bd02ee1: a fair grantee returned its guard on the grant
    /// message, its confirm sent afterwards (client side).
    pub fair_guard_on_grant: bool,
    /// (f) Before this model's check of every kind's extend: only a
    /// Mutex's (or Election's) shortening extend told its waiters; the
    /// FairMutex's, RwLock's and Semaphore's parked on the old lease.
    pub short_extend_tells_mutex_only: bool,
    /// (g) Before 46701c1: a release (or pass), a fair grant and a
    /// semaphore wake-up sent standbys to the two members after the woken
    /// one, not seven: three frozen clients at the head left the live
    /// waiter behind them parked for the holder's lease.
    pub two_standbys: bool,
    /// (h) Before the model found it: an attempt that queued during a
    /// reservation behind the first two parked the reservation and the
    /// whole lease, even among the seven a standby reaches. Behind told
    /// members that were all frozen, the free lock waited out that park.
    pub newcomer_parks_a_lease: bool,
}

impl Bugs {
    /// How many members after a woken one get a standby.
    pub fn standbys(&self) -> usize {
        if self.two_standbys { 2 } else { STANDBYS }
    }
}

/// The value of the lock key `P:{N}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockValue {
    /// An owner token (a holder; for the fair lock also a grant's claim).
    Token(Token),
    /// A plain release's hand-off reservation `"m:<member>@<end>"`.
    Reserved {
        /// The woken member.
        member: Member,
        /// When the reservation ends (server ms).
        end: Ms,
    },
}

/// A plain waiter queue entry: member scored by its expiry (server ms);
/// `half` is the score's fraction `.5` (acquire.lua:222-223,
/// wake_next.lua:113).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    /// The integer part of the score: the entry's expiry.
    pub expiry: Ms,
    /// The score's `.5`: parks no longer than a reservation, or told.
    pub half: bool,
    /// The member.
    pub member: Member,
}

/// A fair queue member `"<client id>:<waiter id>:<token>"`, or `LONG`
/// (`"~"`, scored by minus an arrival).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FairMember {
    /// The long-park marker (fair_common.lua:10-18).
    Long,
    /// A waiter and the token it will hold.
    Waiter(Member, Token),
}

/// The fair lock's queue `P:{N}:fifo` and hand-off marker `P:{N}:handoff`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FairKeys {
    /// (score in µs, member), sorted: waiters by arrival, LONG by minus the
    /// latest long parker's arrival (so it sorts first).
    pub queue: Vec<(i64, FairMember)>,
    /// The marker `"<deadline ms>:<member>"` and the marker key's expiry.
    pub handoff: Option<(Ms, FairMember, Ms)>,
}

/// A read-write lock's readers `P:{N}:readers` and intents `P:{N}:writers`
/// (the writer is [`Server::lock`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RwKeys {
    /// Reader token -> lease expiry (ms), sorted by token.
    pub readers: Vec<(Token, Ms)>,
    /// Waiting writer member -> intent expiry (ms), sorted by member.
    pub intents: Vec<(Member, Ms)>,
}

/// A pub/sub message, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Message {
    /// A plain wake-up: the payload is the waiter id.
    Wake(WaiterId),
    /// `"<waiter id>::s<window>"`: park no longer than `window` ms.
    Standby(WaiterId, Ms),
    /// A fair probe `"<waiter id>:?"` (ignored by the waiter).
    Probe(WaiterId),
    /// A fair grant `"<waiter id>:<token>:g<fence>:<claim end µs>"`.
    Grant(WaiterId, Token, u64, u64),
    /// A fair standby `"<waiter id>:<token>:s<window>"`.
    FairStandby(WaiterId, Token, Ms),
    /// The RwLock channel's `"w"`, `"r"` or `"g"`, to every client.
    RwReleased(u8),
}

/// One PUBLISH that reached a subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Published {
    /// The client whose channel it went to (for the RwLock's broadcast,
    /// each subscribed client gets its own copy).
    pub client: ClientId,
    /// The message.
    pub message: Message,
}

/// One lock name's keys on one server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// `P:{N}`: value and expiry (ms); `None` when absent. May hold an
    /// expired value: read it through [`Server::lock_at`].
    pub lock: Option<(LockValue, Ms)>,
    /// `P:{N}:fence`: the last fence handed out (µs); 0 when absent.
    pub fence: u64,
    /// `P:{N}:waiters`, in ZSET order (score, then member).
    pub waiters: Vec<Entry>,
    /// The fair lock's keys.
    pub fair: FairKeys,
    /// The RwLock's keys.
    pub rw: RwKeys,
    /// The Semaphore's keys.
    pub sem: SemKeys,
    /// Clients whose wake channels have a subscriber (PUBLISH counts 1).
    pub subscribed: BTreeSet<ClientId>,
    /// What the scripts published, in order; drained by the caller.
    pub published: Vec<Published>,
    /// Historic behaviours switched on.
    pub bugs: Bugs,
}

impl Server {
    /// The live value of the lock key at `now` (an expired key reads as
    /// absent, as in Redis).
    pub fn lock_at(&self, now: Ms) -> Option<LockValue> {
        match self.lock {
            Some((v, e)) if e > now => Some(v),
            _ => None,
        }
    }

    /// PTTL of the lock key: ms left, or -2 when absent.
    pub fn pttl(&self, now: Ms) -> i64 {
        match self.lock {
            Some((_, e)) if e > now => (e - now) as i64,
            _ => -2,
        }
    }

    fn publish(&mut self, client: ClientId, message: Message) -> u64 {
        if self.subscribed.contains(&client) {
            self.published.push(Published { client, message });
            1
        } else {
            0
        }
    }

    fn zadd(&mut self, e: Entry) {
        self.waiters.retain(|x| x.member != e.member);
        let at = self.waiters.partition_point(|x| *x < e);
        self.waiters.insert(at, e);
    }

    fn zrem(&mut self, m: Member) {
        self.waiters.retain(|x| x.member != m);
    }

    /// The fence for an acquisition at `now`: max(previous + 1, now µs).
    fn advance_fence(&mut self, now: Ms) -> u64 {
        self.fence = (self.fence + 1).max(now * 1000);
        self.fence
    }
}

/// Arguments of [`acquire`] (acquire.lua's ARGV).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AcquireArgs {
    /// `ARGV[1]` the attempt's token.
    pub token: Token,
    /// `ARGV[2]` lease_ms.
    pub lease_ms: Ms,
    /// `ARGV[4]` the waiting caller's member, `None` for `""`.
    pub member: Option<Member>,
    /// `ARGV[5]` grace_ms.
    pub grace_ms: Ms,
    /// `ARGV[6]` park_ms (a key without expiry).
    pub park_ms: Ms,
    /// `ARGV[7]` handoff_ms.
    pub handoff_ms: Ms,
}

/// Reply of [`acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcquireReply {
    /// `{1, fence}`.
    Acquired {
        /// The fence (µs).
        fence: u64,
    },
    /// `{0, park}`: the holder's PTTL, or the reservation's park.
    Held {
        /// How long to park (ms).
        park_ms: i64,
    },
}

/// acquire.lua:124-257 (the Mutex's attempt; kind checks left out).
pub fn acquire(s: &mut Server, a: &AcquireArgs, now: Ms) -> AcquireReply {
    let holder = s.lock_at(now);
    // acquire.lua:135-156: the lock was free: SET NX took it.
    let Some(holder) = holder else {
        s.lock = Some((LockValue::Token(a.token), now + a.lease_ms));
        if let Some(m) = a.member {
            s.zrem(m);
        }
        return AcquireReply::Acquired {
            fence: s.advance_fence(now),
        };
    };
    // acquire.lua:157-167: reserved for us by the release that woke us.
    if let (Some(m), LockValue::Reserved { member, .. }) = (a.member, holder)
        && m == member
    {
        s.lock = Some((LockValue::Token(a.token), now + a.lease_ms));
        return AcquireReply::Acquired {
            fence: s.advance_fence(now),
        };
    }
    // acquire.lua:174-181: a re-sent attempt finds its own token.
    if holder == LockValue::Token(a.token) && !s.bugs.resent_acquire_parks {
        if let Some(m) = a.member {
            s.zrem(m);
        }
        return AcquireReply::Acquired { fence: s.fence };
    }
    // acquire.lua:212-242: reserved for another waiter.
    if let LockValue::Reserved { end, .. } = holder {
        let mut park = a.handoff_ms as i64;
        if let Some(m) = a.member {
            let expiry = end - a.handoff_ms + a.lease_ms + a.grace_ms;
            s.zadd(Entry {
                expiry,
                half: false,
                member: m,
            });
            let rank = s.waiters.iter().position(|e| e.member == m).unwrap_or(0);
            if rank <= 1 {
                s.zadd(Entry {
                    expiry,
                    half: true,
                    member: m,
                });
            } else if rank < STANDBYS && !s.bugs.newcomer_parks_a_lease {
                // The window of its rank, as a standby would give it.
                let window = (rank as i64 + 1) * 2 * a.handoff_ms as i64;
                park = window.min(park + a.lease_ms as i64);
            } else {
                park += a.lease_ms as i64;
            }
        }
        return AcquireReply::Held { park_ms: park };
    }
    // acquire.lua:243-257: held; queue until the holder's PTTL + grace.
    let pttl = s.pttl(now);
    if let Some(m) = a.member {
        let ttl = if pttl >= 0 { pttl as Ms } else { a.park_ms } + a.grace_ms;
        s.zadd(Entry {
            expiry: now + ttl,
            half: false,
            member: m,
        });
    }
    AcquireReply::Held { park_ms: pttl }
}

/// Reply of [`release`] (also [`fair_release`], [`rw_write_release`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    /// `1`: ours, released (and the next waiter woken or granted).
    Released,
    /// `0`: held by another token.
    NotOurs,
    /// `-1`: gone.
    Gone,
}

/// wake_next.lua: how many members after a woken one get a standby (the
/// fair and semaphore scripts send as many).
pub const STANDBYS: usize = 7;

/// wake_next.lua:66-122 (`head` is re-read here: the callers pass the
/// first members just read in the same script).
fn wake_next(s: &mut Server, handoff_ms: Ms, now: Ms) -> bool {
    if s.waiters.is_empty() {
        return false;
    }
    let buggy = s.bugs.frozen_woken_waiter;
    loop {
        // wake_next.lua:73-77: prune expired members (not in the old code).
        if !buggy {
            s.waiters.retain(|e| e.expiry > now);
        }
        let Some(first) = s.waiters.first().copied() else {
            return false;
        };
        // wake_next.lua:82-90: wake the head on its client's channel.
        let received = s.publish(first.member.client, Message::Wake(first.member.waiter));
        if received > 0 {
            // wake_next.lua:92-94: reserve the lock; the woken member leaves.
            s.lock = Some((
                LockValue::Reserved {
                    member: first.member,
                    end: now + handoff_ms,
                },
                now + handoff_ms,
            ));
            if buggy {
                return true;
            }
            s.zrem(first.member);
            // wake_next.lua:95-116: standbys for the next STANDBYS (head[3..]
            // of ZRANGE 0 STANDBYS: those read after the woken one); the
            // n-th after the woken one gets n windows of 2 × handoff_ms.
            let next: Vec<Entry> = s.waiters.iter().take(s.bugs.standbys()).copied().collect();
            for (n, e) in (1..).zip(next) {
                if e.member.client != first.member.client && !e.half {
                    let told = s.publish(
                        e.member.client,
                        Message::Standby(e.member.waiter, n * 2 * handoff_ms),
                    );
                    if told > 0 {
                        s.zadd(Entry { half: true, ..e });
                    }
                }
            }
            return true;
        }
        // wake_next.lua:119-120: nobody received: drop it, try the next.
        s.zrem(first.member);
    }
}

/// Arguments of [`release`] (release.lua's ARGV).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseArgs {
    /// `ARGV[1]` the token being released.
    pub token: Token,
    /// `ARGV[3]` handoff_ms.
    pub handoff_ms: Ms,
}

/// release.lua:27-38.
pub fn release(s: &mut Server, a: &ReleaseArgs, now: Ms) -> ReleaseReply {
    match s.lock_at(now) {
        Some(LockValue::Token(t)) if t == a.token => {}
        Some(_) => return ReleaseReply::NotOurs,
        None => return ReleaseReply::Gone,
    }
    if !wake_next(s, a.handoff_ms, now) {
        s.lock = None;
    }
    ReleaseReply::Released
}

/// pass.lua:16-27: the member leaves; a free lock (or its own
/// reservation) goes to the next waiter. Returns whether one was woken.
pub fn pass(s: &mut Server, member: Member, handoff_ms: Ms, now: Ms) -> bool {
    s.zrem(member);
    let holder = s.lock_at(now);
    if let Some(h) = holder {
        match h {
            LockValue::Reserved { member: m, .. } if m == member => {}
            _ => return false,
        }
    }
    let woke = wake_next(s, handoff_ms, now);
    if !woke && holder.is_some() {
        s.lock = None;
    }
    woke
}
