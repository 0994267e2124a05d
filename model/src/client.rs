//! The clients: processes with several waiting tasks, their wait loop
//! (acquire.rs), the hub's dispatch of messages (hub/registry.rs) and the
//! background pass-on (background.rs), as steps on the whole [`State`].
//!
//! Each task acquires once: it attempts, parks, is woken or told to stand
//! by, attempts again, holds, releases. A client queues one member per lock
//! (acquire.rs, "One place per client"): its `queuer`, the oldest waiting
//! task; when the queuer leaves, the next waiting task takes the place and
//! attempts at once. Script calls are atomic with their reply (the round
//! trip is instantaneous; a lost reply is the `Resend` fault). Time is the
//! server's: a client's lease deadline is counted from the attempt, as
//! lease.rs does.

use crate::scripts::{
    self, AcquireArgs, AcquireReply, Bugs, ClientId, ExtendReply, FairAcquireArgs,
    FairAcquireReply, FairArgs, Holder, LockValue, Member, Message, Ms, Published, ReleaseArgs,
    RwWriteArgs, SemAcquireArgs, Server, Token,
};

/// Which lock the instance models (the Election follows the Mutex: it runs
/// acquire.lua under the kind letter `l`, the same protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Mutex: wake-up, reservation, standbys.
    Mutex,
    /// FairMutex: grant, claim, confirm, standbys.
    Fair,
    /// RwLock: task 0 of each client writes, the others read.
    RwLock,
    /// Semaphore of `permits` permits: wake-ups, entry cut to a
    /// reservation, standbys.
    Semaphore,
}

/// The instance and its bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// The lock kind.
    pub kind: Kind,
    /// Tasks per client.
    pub tasks: Vec<u8>,
    /// One tick of server time (ms).
    pub tick_ms: Ms,
    /// Server time stops at this many ticks (the check's horizon).
    pub horizon_ticks: u64,
    /// The lease every acquisition asks for (ms).
    pub lease_ms: Ms,
    /// HANDOFF_MS.
    pub handoff_ms: Ms,
    /// The queue entries' grace (ms).
    pub grace_ms: Ms,
    /// CLAIM_MS (FairMutex).
    pub claim_ms: Ms,
    /// INTENT_WINDOW_MS (RwLock).
    pub window_ms: Ms,
    /// The Semaphore's permit count.
    pub permits: u8,
    /// SEM_RESERVE_MS (Semaphore).
    pub reserve_ms: Ms,
    /// The lease a shortening extend asks for (ms).
    pub short_ms: Ms,
    /// Faults allowed in one run (freeze, death, cancel, lost reply,
    /// shortening extend).
    pub max_faults: u8,
    /// Which faults may happen.
    pub faults: Faults,
    /// No lost wake-up: the most ticks the lock may stay free while a
    /// live waiter waits.
    pub stall_bound: u8,
    /// Historic behaviours switched on.
    pub bugs: Bugs,
    /// A client that never freezes or dies (a targeted instance's live
    /// waiter); `None`: any may.
    pub steady: Option<ClientId>,
    /// Every task asks before the first release (a targeted instance: a
    /// queue forms, then is served; no newcomer joins it later).
    pub ask_first: bool,
}

/// The faults a run may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Faults {
    /// A client stops taking steps for good (SIGSTOP; socket open).
    pub freeze: bool,
    /// A client dies (its subscription ends; its keys stay).
    pub die: bool,
    /// A waiting task's acquire is cancelled (dropped future).
    pub cancel: bool,
    /// An attempt's reply is lost and the attempt re-sent.
    pub resend: bool,
    /// A holder's shortening extend, its future maybe dropped.
    pub short_extend: bool,
}

impl Faults {
    /// Every fault but the shortening extend: a lease shortened while
    /// others wait leaves their parks on the old PTTL (found by this model,
    /// see the tests), so it is checked on its own.
    pub const USUAL: Faults = Faults {
        freeze: true,
        die: true,
        cancel: true,
        resend: true,
        short_extend: false,
    };
    /// No fault.
    pub const NONE: Faults = Faults {
        freeze: false,
        die: false,
        cancel: false,
        resend: false,
        short_extend: false,
    };
}

/// A client's liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Takes steps.
    Live,
    /// Takes no step again; its subscription still counts as a receiver.
    Frozen,
    /// Gone: no subscription, no steps; its keys lapse by their expiry.
    Dead,
}

/// Where a task is in its one acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not asked for the lock yet.
    Idle,
    /// Parked until `until` (ms), or sooner if `due` (notified).
    Waiting {
        /// The park's end.
        until: Ms,
        /// Notified: attempts now.
        due: bool,
    },
    /// Believes it holds the lock until `until` (its guard's deadline).
    Holding {
        /// The guard's lease deadline as the client counts it.
        until: Ms,
        /// A fair guard returned on its grant (bug e): not yet confirmed.
        unconfirmed: bool,
    },
    /// Released, lost, or gave up.
    Done,
}

/// One task (a `lock()` call) of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    /// Where it is.
    pub phase: Phase,
    /// The fair arrival it learnt from its first failed attempt (µs).
    pub arrival: Option<u64>,
    /// It registered a queue member or intent (FIFO and writer checks).
    pub queued: bool,
}

/// One client process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Live, frozen or dead.
    pub liveness: Liveness,
    /// Its tasks, oldest first.
    pub tasks: Vec<Task>,
    /// The task holding the client's queue place (one place per client).
    pub queuer: Option<u8>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Server time (ms).
    pub now: Ms,
    /// The lock's keys.
    pub server: Server,
    /// The clients.
    pub clients: Vec<Client>,
    /// Messages published, not yet read, in publish order (pub/sub keeps
    /// each connection's order: a client reads its own in order; clients
    /// read theirs in any interleaving).
    pub net: Vec<Published>,
    /// Faults injected so far.
    pub faults: u8,
    /// Ticks the lock has stayed free while a live waiter waited.
    pub stall: u8,
    /// The highest fence handed to an exclusive holder.
    pub last_fence: u64,
    /// False once an exclusive holder got a fence not above the last.
    pub fences_increase: bool,
    /// Acquisitions so far (saturating at 3).
    pub acquisitions: u8,
    /// The token the FIFO check last saw in the lock key.
    pub fifo_seen: Option<Token>,
    /// False once the FIFO order was broken (FairMutex).
    pub fifo_kept: bool,
    /// False once a reader got in ahead of a live waiting writer (RwLock).
    pub writers_preferred: bool,
}

/// Server time when a run starts (not 0: the fair queue's LONG marker is
/// scored by minus an arrival, which the scripts rely on being negative).
pub const START_MS: Ms = 1000;

/// A task's token: one acquisition per task.
pub fn token(c: ClientId, t: u8) -> Token {
    Token(u16::from(c) * 16 + u16::from(t) + 1)
}

fn member(c: ClientId, t: u8) -> Member {
    Member {
        client: c,
        waiter: t,
    }
}

/// Is `(c, t)` a writer? (RwLock: task 0 of each client.)
pub fn is_writer(cfg: &Config, t: u8) -> bool {
    cfg.kind != Kind::RwLock || t == 0
}

impl State {
    /// The initial state: every client live and subscribed, nothing held.
    pub fn new(cfg: &Config) -> State {
        let server = Server {
            subscribed: (0..cfg.tasks.len() as u8).collect(),
            bugs: cfg.bugs,
            ..Server::default()
        };
        State {
            now: START_MS,
            server,
            clients: cfg
                .tasks
                .iter()
                .map(|&n| Client {
                    liveness: Liveness::Live,
                    tasks: vec![
                        Task {
                            phase: Phase::Idle,
                            arrival: None,
                            queued: false,
                        };
                        n as usize
                    ],
                    queuer: None,
                })
                .collect(),
            net: Vec::new(),
            faults: 0,
            stall: 0,
            last_fence: 0,
            fences_increase: true,
            acquisitions: 0,
            fifo_seen: None,
            fifo_kept: true,
            writers_preferred: true,
        }
    }

    fn task(&self, c: ClientId, t: u8) -> &Task {
        &self.clients[c as usize].tasks[t as usize]
    }

    fn task_mut(&mut self, c: ClientId, t: u8) -> &mut Task {
        &mut self.clients[c as usize].tasks[t as usize]
    }

    /// Moves what the scripts published onto the network (a frozen or
    /// dead client never reads it: dropped; a fair probe is ignored).
    fn flush(&mut self, cfg: &Config) {
        if cfg.kind == Kind::Fair {
            self.check_fifo();
        }
        for p in std::mem::take(&mut self.server.published) {
            if self.clients[p.client as usize].liveness == Liveness::Live
                && !matches!(p.message, Message::Probe(_))
            {
                self.net.push(p);
            }
        }
    }

    /// FIFO (FairMutex), judged whenever a script gave the lock to a new
    /// token (a grant, or a free lock taken): no live waiter whose member
    /// is queued with an earlier arrival may be left in the queue. (A
    /// sibling whose turn to queue has not come yet is not in the queue:
    /// "give or take the round trip between one being served and the next
    /// queuing", acquire.rs.)
    fn check_fifo(&mut self) {
        let Some(LockValue::Token(tok)) = self.server.lock_at(self.now) else {
            return;
        };
        if self.fifo_seen == Some(tok)
            || self.server.fair.queue.is_empty() && self.fifo_seen.is_none()
        {
            self.fifo_seen = Some(tok);
            return;
        }
        self.fifo_seen = Some(tok);
        let (c, t) = ((tok.0 - 1) / 16, (tok.0 - 1) % 16);
        let mine = self.clients[c as usize].tasks[t as usize].arrival;
        for (score, m) in &self.server.fair.queue {
            let scripts::FairMember::Waiter(m, _) = *m else {
                continue;
            };
            // Judged by when each task first reached the server (its
            // first failed attempt), not by the score the scripts gave it.
            let other = &self.clients[m.client as usize];
            let theirs = other.tasks[m.waiter as usize].arrival;
            let ahead = match (mine, theirs) {
                (None, _) => true,
                (Some(a), Some(b)) => b < a,
                (Some(_), None) => *score < 0,
            };
            if ahead
                && other.liveness == Liveness::Live
                && matches!(other.tasks[m.waiter as usize].phase, Phase::Waiting { .. })
            {
                self.fifo_kept = false;
            }
        }
    }

    /// Does this task put its member in the queue when it attempts?
    fn queues(&self, cfg: &Config, c: ClientId, t: u8) -> bool {
        match cfg.kind {
            Kind::RwLock => is_writer(cfg, t),
            _ if cfg.bugs.pool_queues_every_task => true,
            _ => self.clients[c as usize].queuer == Some(t),
        }
    }

    /// The task leaves the waiters (with the lock or not): the next
    /// waiting task of its client takes the queue place and attempts.
    fn leave(&mut self, c: ClientId, t: u8) {
        let cl = &mut self.clients[c as usize];
        if cl.queuer == Some(t) {
            cl.queuer = None;
            if let Some(n) = cl
                .tasks
                .iter()
                .position(|x| matches!(x.phase, Phase::Waiting { .. }))
            {
                cl.queuer = Some(n as u8);
                cl.tasks[n].phase = match cl.tasks[n].phase {
                    Phase::Waiting { until, .. } => Phase::Waiting { until, due: true },
                    p => p,
                };
            }
        }
    }

    fn acquired(&mut self, cfg: &Config, c: ClientId, t: u8, fence: Option<u64>, from: Ms) {
        if let Some(f) = fence {
            if f <= self.last_fence {
                self.fences_increase = false;
            }
            self.last_fence = self.last_fence.max(f);
        }
        self.check_order(cfg, c, t);
        self.stall = 0;
        self.acquisitions = (self.acquisitions + 1).min(3);
        self.task_mut(c, t).phase = Phase::Holding {
            until: from + cfg.lease_ms,
            unconfirmed: false,
        };
        self.leave(c, t);
    }

    /// Writer preference (RwLock), judged as `(c, t)` acquires.
    fn check_order(&mut self, cfg: &Config, c: ClientId, t: u8) {
        let now = self.now;
        match cfg.kind {
            Kind::RwLock if !is_writer(cfg, t) => {
                // No reader gets in while a live writer that registered
                // its intent still waits.
                for (oc, cl) in self.clients.iter().enumerate() {
                    let w = &cl.tasks[0];
                    if oc != c as usize
                        && cl.liveness == Liveness::Live
                        && w.queued
                        && matches!(w.phase, Phase::Waiting { .. })
                    {
                        self.writers_preferred = false;
                    }
                }
            }
            _ => {}
        }
        let _ = now;
    }

    /// An attempt of task `(c, t)`; `resend`: its first run's reply was
    /// lost and the same call is sent again.
    pub fn attempt(&mut self, cfg: &Config, c: ClientId, t: u8, resend: bool) {
        let now = self.now;
        let tok = token(c, t);
        let m = self.queues(cfg, c, t).then(|| member(c, t));
        if m.is_some() {
            self.task_mut(c, t).queued = true;
        }
        let runs = if resend { 2 } else { 1 };
        let mut reply = (None, 0i64, None);
        for _ in 0..runs {
            reply = match cfg.kind {
                Kind::Mutex => {
                    let a = AcquireArgs {
                        token: tok,
                        lease_ms: cfg.lease_ms,
                        member: m,
                        grace_ms: cfg.grace_ms,
                        park_ms: cfg.lease_ms,
                        handoff_ms: cfg.handoff_ms,
                    };
                    match scripts::acquire(&mut self.server, &a, now) {
                        AcquireReply::Acquired { fence } => (Some(fence), 0, None),
                        AcquireReply::Held { park_ms } => (None, park_ms, None),
                    }
                }
                Kind::Fair => {
                    let a = FairAcquireArgs {
                        token: tok,
                        lease_ms: cfg.lease_ms,
                        member: m,
                        grace_ms: cfg.grace_ms,
                        park_ms: cfg.lease_ms,
                        claim_ms: cfg.claim_ms,
                        arrival_us: self.task(c, t).arrival,
                    };
                    match scripts::fair_acquire(&mut self.server, &a, now) {
                        FairAcquireReply::Acquired { fence } => (Some(fence), 0, None),
                        FairAcquireReply::Parked { park_ms, now_us } => {
                            (None, park_ms, Some(now_us))
                        }
                    }
                }
                Kind::Semaphore => {
                    let a = SemAcquireArgs {
                        token: tok,
                        lease_ms: cfg.lease_ms,
                        member: m,
                        grace_ms: cfg.grace_ms,
                        park_ms: cfg.lease_ms,
                        permits: cfg.permits,
                        reserve_ms: cfg.reserve_ms,
                        arrival_us: self.task(c, t).arrival,
                    };
                    match scripts::sem_acquire(&mut self.server, &a, now) {
                        FairAcquireReply::Acquired { fence } => (Some(fence), 0, None),
                        FairAcquireReply::Parked { park_ms, now_us } => {
                            (None, park_ms, Some(now_us))
                        }
                    }
                }
                Kind::RwLock if is_writer(cfg, t) => {
                    let a = RwWriteArgs {
                        token: tok,
                        lease_ms: cfg.lease_ms,
                        member: m,
                        grace_ms: cfg.grace_ms,
                        park_ms: cfg.lease_ms,
                    };
                    match scripts::rw_write_acquire(&mut self.server, &a, now) {
                        AcquireReply::Acquired { fence } => (Some(fence), 0, None),
                        AcquireReply::Held { park_ms } => (None, park_ms, None),
                    }
                }
                Kind::RwLock => {
                    match scripts::rw_read_acquire(
                        &mut self.server,
                        tok,
                        cfg.lease_ms,
                        cfg.lease_ms,
                        now,
                    ) {
                        // Readers share the fence: not an exclusive hold.
                        AcquireReply::Acquired { .. } => (Some(0), 0, None),
                        AcquireReply::Held { park_ms } => (None, park_ms, None),
                    }
                }
            };
        }
        self.flush(cfg);
        match reply {
            (Some(f), _, _) => {
                let fence = (f != 0).then_some(f);
                self.acquired(cfg, c, t, fence, now);
            }
            (None, park, arrival) => {
                if arrival.is_some() && self.task(c, t).arrival.is_none() {
                    self.task_mut(c, t).arrival = arrival;
                }
                if self.clients[c as usize].queuer.is_none() && cfg.kind != Kind::RwLock {
                    // The first waiter of its client takes the place; it
                    // attempts again at once to queue (acquire.rs).
                    // (One step here: the model's subscription is always
                    // up, so the window between the two attempts is only
                    // a release that the due attempt then finds.)
                    self.clients[c as usize].queuer = Some(t);
                    self.attempt(cfg, c, t, false);
                    return;
                }
                self.task_mut(c, t).phase = Phase::Waiting {
                    until: now + park.max(0) as Ms,
                    due: false,
                };
            }
        }
    }

    /// The holder `(c, t)` releases.
    pub fn release(&mut self, cfg: &Config, c: ClientId, t: u8) {
        let now = self.now;
        let tok = token(c, t);
        match cfg.kind {
            Kind::Mutex => {
                let a = ReleaseArgs {
                    token: tok,
                    handoff_ms: cfg.handoff_ms,
                };
                scripts::release(&mut self.server, &a, now);
            }
            Kind::Fair => {
                let a = FairArgs {
                    claim_ms: cfg.claim_ms,
                };
                scripts::fair_release(&mut self.server, tok, &a, now);
            }
            Kind::Semaphore => {
                scripts::sem_release(&mut self.server, tok, cfg.permits, cfg.reserve_ms, now);
            }
            Kind::RwLock if is_writer(cfg, t) => {
                scripts::rw_write_release(&mut self.server, tok, cfg.window_ms, now);
            }
            Kind::RwLock => {
                scripts::rw_read_release(&mut self.server, tok, cfg.window_ms, now);
            }
        }
        self.task_mut(c, t).phase = Phase::Done;
        self.flush(cfg);
    }

    /// A fair guard returned on its grant (bug e) sends its confirm.
    pub fn confirm(&mut self, cfg: &Config, c: ClientId, t: u8) {
        let a = FairAcquireArgs {
            token: token(c, t),
            lease_ms: cfg.lease_ms,
            member: Some(member(c, t)),
            grace_ms: cfg.grace_ms,
            park_ms: cfg.lease_ms,
            claim_ms: cfg.claim_ms,
            arrival_us: None,
        };
        scripts::fair_acquire(&mut self.server, &a, self.now);
        self.flush(cfg);
        if let Phase::Holding { until, .. } = self.task(c, t).phase {
            self.task_mut(c, t).phase = Phase::Holding {
                until,
                unconfirmed: false,
            };
        }
    }

    /// The holder shortens its lease to `short_ms`; `cancelled`: its
    /// future is dropped once the request is sent.
    pub fn short_extend(&mut self, cfg: &Config, c: ClientId, t: u8, cancelled: bool) {
        let now = self.now;
        let Phase::Holding { until, unconfirmed } = self.task(c, t).phase else {
            return;
        };
        let new = now + cfg.short_ms;
        // Today (b7ef3b0): a shorter deadline is pulled in before the
        // request is sent, so a dropped future leaves the shorter one.
        let before = if cfg.bugs.cancelled_shortening_extend {
            until
        } else {
            until.min(new)
        };
        let (tok, lease) = (token(c, t), cfg.short_ms);
        let server = &mut self.server;
        let reply = match cfg.kind {
            Kind::Mutex => scripts::extend(server, Holder::Mutex, tok, lease, now),
            Kind::Fair => scripts::extend(server, Holder::Fair, tok, lease, now),
            Kind::RwLock if is_writer(cfg, t) => {
                scripts::extend(server, Holder::Writer, tok, lease, now)
            }
            Kind::RwLock => scripts::rw_read_extend(server, tok, lease, now),
            Kind::Semaphore => scripts::sem_extend(server, tok, lease, now),
        };
        // A shortening extend tells the waiters.
        self.flush(cfg);
        let after = match (cancelled, reply) {
            (true, _) => before,
            (false, ExtendReply::Extended) => new,
            (false, _) => now, // lost: the guard reports it
        };
        self.task_mut(c, t).phase = Phase::Holding {
            until: after,
            unconfirmed,
        };
    }

    /// The waiting task `(c, t)` gives up (its future dropped): it leaves
    /// and its client's background worker passes its place on.
    pub fn cancel(&mut self, cfg: &Config, c: ClientId, t: u8) {
        let now = self.now;
        let had_place = self.queues(cfg, c, t) && self.task(c, t).queued;
        self.task_mut(c, t).phase = Phase::Done;
        if had_place {
            self.pass_on(cfg, c, t, now);
        }
        self.leave(c, t);
    }

    fn pass_on(&mut self, cfg: &Config, c: ClientId, t: u8, now: Ms) {
        match cfg.kind {
            Kind::Mutex => {
                scripts::pass(&mut self.server, member(c, t), cfg.handoff_ms, now);
            }
            Kind::Fair => {
                let a = FairArgs {
                    claim_ms: cfg.claim_ms,
                };
                scripts::fair_pass(&mut self.server, member(c, t), token(c, t), &a, now);
            }
            Kind::Semaphore => {
                scripts::sem_pass(
                    &mut self.server,
                    member(c, t),
                    cfg.permits,
                    cfg.reserve_ms,
                    now,
                );
            }
            Kind::RwLock => {
                scripts::rw_pass(&mut self.server, member(c, t), now);
            }
        }
        self.flush(cfg);
    }

    /// The client reads message `i` of the network.
    pub fn deliver(&mut self, cfg: &Config, i: usize) {
        let p = self.net.remove(i);
        let c = p.client;
        let now = self.now;
        let waiting = |s: &State, t: u8| {
            (t as usize) < s.clients[c as usize].tasks.len()
                && matches!(s.task(c, t).phase, Phase::Waiting { .. })
        };
        match p.message {
            Message::Wake(w) => {
                if waiting(self, w) {
                    self.set_due(c, w);
                } else {
                    // A wake-up for a waiter this client no longer has.
                    self.pass_on(cfg, c, w, now);
                }
            }
            Message::Standby(w, window) | Message::FairStandby(w, _, window) => {
                if waiting(self, w)
                    && let Phase::Waiting { until, due } = self.task(c, w).phase
                {
                    self.task_mut(c, w).phase = Phase::Waiting {
                        until: until.min(now + window),
                        due,
                    };
                }
            }
            Message::Grant(w, ..) => {
                if waiting(self, w) {
                    if cfg.bugs.fair_guard_on_grant {
                        // The guard returned on the message, its lease
                        // promised in full; the confirm follows.
                        self.check_order(cfg, c, w);
                        self.stall = 0;
                        self.task_mut(c, w).phase = Phase::Holding {
                            until: now + cfg.lease_ms,
                            unconfirmed: true,
                        };
                        self.leave(c, w);
                    } else {
                        self.set_due(c, w);
                    }
                }
            }
            Message::Probe(_) => {}
            Message::RwReleased(_) => {
                for t in 0..self.clients[c as usize].tasks.len() as u8 {
                    if waiting(self, t) {
                        self.set_due(c, t);
                    }
                }
            }
        }
    }

    fn set_due(&mut self, c: ClientId, t: u8) {
        if let Phase::Waiting { until, .. } = self.task(c, t).phase {
            self.task_mut(c, t).phase = Phase::Waiting { until, due: true };
        }
    }

    /// Is the lock free for a waiter: no live hold on the server, or the
    /// key holds the token of a task that does not know it holds it (a
    /// reservation; a fair claim; a re-sent attempt's own token)?
    pub fn free(&self, cfg: &Config) -> bool {
        let now = self.now;
        let key_free = match self.server.lock_at(now) {
            None | Some(LockValue::Reserved { .. }) => true,
            Some(LockValue::Token(tok)) => {
                let (c, t) = ((tok.0 - 1) / 16, (tok.0 - 1) % 16);
                !matches!(
                    self.clients[c as usize].tasks[t as usize].phase,
                    Phase::Holding { .. }
                )
            }
        };
        let no_readers =
            cfg.kind != Kind::RwLock || self.server.rw.readers.iter().all(|r| r.1 <= now);
        // A permit is free while fewer than `permits` live leases are held
        // by tasks that know it (a re-sent attempt's own permit does not
        // count).
        let permit_free = cfg.kind != Kind::Semaphore
            || self
                .server
                .sem
                .holders
                .iter()
                .filter(|h| h.0 > now && self.knows(h.1))
                .count()
                < cfg.permits as usize;
        key_free && no_readers && permit_free
    }

    /// Does the task of token `tok` know it holds (or is it gone)?
    fn knows(&self, tok: Token) -> bool {
        let (c, t) = ((tok.0 - 1) / 16, (tok.0 - 1) % 16);
        matches!(
            self.clients[c as usize].tasks[t as usize].phase,
            Phase::Holding { .. } | Phase::Done
        ) || self.clients[c as usize].liveness != Liveness::Live
    }

    /// A live client's task waits.
    pub fn live_waiter(&self) -> bool {
        self.clients.iter().any(|c| {
            c.liveness == Liveness::Live
                && c.tasks
                    .iter()
                    .any(|t| matches!(t.phase, Phase::Waiting { .. }))
        })
    }

    /// Must a live client act before time moves on (a message to read, a
    /// park that ended, a notified task)?
    pub fn urgent(&self) -> bool {
        self.net
            .iter()
            .any(|p| self.clients[p.client as usize].liveness == Liveness::Live)
            || self.clients.iter().any(|c| {
                c.liveness == Liveness::Live
                    && c.tasks.iter().any(|t| {
                        matches!(t.phase, Phase::Waiting { until, due } if due || until <= self.now)
                    })
            })
    }

    /// Server time advances one tick; the stall counter with it.
    pub fn tick(&mut self, cfg: &Config) {
        if self.free(cfg) && self.live_waiter() {
            self.stall = self.stall.saturating_add(1);
        } else {
            self.stall = 0;
        }
        self.now += cfg.tick_ms;
    }

    /// How many tasks believe they hold the lock exclusively now (and
    /// readers, for the RwLock).
    pub fn holders(&self, cfg: &Config) -> (usize, usize) {
        let mut w = 0;
        let mut r = 0;
        for cl in &self.clients {
            for (t, task) in cl.tasks.iter().enumerate() {
                if let Phase::Holding { until, .. } = task.phase
                    && until > self.now
                {
                    if is_writer(cfg, t as u8) {
                        w += 1;
                    } else {
                        r += 1;
                    }
                }
            }
        }
        (w, r)
    }

    /// The client freezes or dies.
    pub fn fault_client(&mut self, c: ClientId, dead: bool) {
        self.faults += 1;
        self.net.retain(|p| p.client != c);
        let cl = &mut self.clients[c as usize];
        cl.liveness = if dead {
            Liveness::Dead
        } else {
            Liveness::Frozen
        };
        if dead {
            self.server.subscribed.remove(&c);
        }
    }
}
