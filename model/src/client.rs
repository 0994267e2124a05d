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
//!
//! The steps: a task's attempts (`acquire.rs`), a holder's release,
//! confirm and extend (`hold.rs`), the messages a waiter reads, a cancel
//! and a client's freeze or death (`wait.rs`); here, the state and what
//! the scheduling and the properties read of it.

mod acquire;
mod hold;
mod wait;

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
    /// The reductions of [`crate::reduce`] on (off only to compare
    /// verdicts with them and without).
    pub reduce: bool,
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
}
