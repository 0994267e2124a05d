//! The checked model: the actions any state allows, and the properties.
//!
//! Scheduling. Any live client may take any enabled step in any order
//! between two ticks of server time; a tick is allowed only once no live
//! client has anything due (a message to read, a park that ended, a
//! notified task): live clients act within a tick, messages to them arrive
//! within a tick, in any order. Frozen and dead clients take no step, ever.
//! A run stops at the horizon; faults are bounded by `max_faults`.
//!
//! Properties (all `always`, so the checker reports a path to the first
//! state that breaks one):
//! - **exclusion**: at most one task believes it holds the lock (guard
//!   deadline in the future); for the RwLock, no reader beside the writer;
//!   for the Semaphore, at most `permits` holders;
//! - **fences increase**: each exclusive acquisition's fence is above
//!   every earlier one;
//! - **no lost wake-up**: the lock never stays free for more than
//!   `stall_bound` ticks in a row while a live client's task waits (free:
//!   no hold the server knows of, or a key holding the token of a task that
//!   does not know it holds it). This is the model's "≤ 1 s";
//! - **FIFO** (FairMutex): nobody takes the lock while a live waiter whose
//!   member is queued earlier waits;
//! - **writer preference** (RwLock): no reader gets in while a live writer
//!   that registered its intent waits.

use stateright::{Model, Property};

use crate::client::{Config, Kind, Liveness, Phase, START_MS, State};
use crate::scripts::ClientId;

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Task `(c, t)` asks for the lock: its first attempt.
    Start(ClientId, u8),
    /// Task `(c, t)` attempts again (notified, or its park ended).
    Attempt(ClientId, u8),
    /// Task `(c, t)` attempts; the reply is lost and the call re-sent.
    Resend(ClientId, u8),
    /// The holder `(c, t)` releases.
    Release(ClientId, u8),
    /// The fair guard returned on a grant sends its confirm (bug e).
    Confirm(ClientId, u8),
    /// The waiting task `(c, t)` is cancelled.
    Cancel(ClientId, u8),
    /// The holder shortens its lease; `true`: the future is dropped.
    ShortExtend(ClientId, u8, bool),
    /// Client `c` freezes for good.
    Freeze(ClientId),
    /// Client `c` dies.
    Die(ClientId),
    /// The network delivers its `i`-th message.
    Deliver(usize),
    /// Server time advances one tick.
    Tick,
}

/// The model of one instance.
#[derive(Clone, Debug)]
pub struct WaitModel {
    /// The instance.
    pub cfg: Config,
}

impl Model for WaitModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::new(&self.cfg)]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let cfg = &self.cfg;
        let fault = s.faults < cfg.max_faults;
        let end = START_MS + cfg.horizon_ticks * cfg.tick_ms;
        let released = s
            .clients
            .iter()
            .any(|c| c.tasks.iter().any(|t| t.phase == Phase::Done));
        let may_ask = !(cfg.ask_first && released);
        for (c, cl) in s.clients.iter().enumerate() {
            let c = c as ClientId;
            if cl.liveness != Liveness::Live {
                continue;
            }
            // A client that waits for or holds nothing is not worth
            // freezing (a stop before it asks is one that never asks).
            let involved = cl
                .tasks
                .iter()
                .any(|t| matches!(t.phase, Phase::Waiting { .. } | Phase::Holding { .. }))
                && cfg.steady != Some(c);
            // No freeze at the horizon (see reduce.rs: one there is a
            // client that takes no further step).
            if fault && involved && cfg.faults.freeze && (s.now < end || !cfg.reduce) {
                out.push(Action::Freeze(c));
            }
            if fault && involved && cfg.faults.die {
                out.push(Action::Die(c));
            }
            for (t, task) in cl.tasks.iter().enumerate() {
                let t = t as u8;
                match task.phase {
                    // A client's tasks ask in age order (task index).
                    Phase::Idle
                        if may_ask && (t == 0 || cl.tasks[t as usize - 1].phase != Phase::Idle) =>
                    {
                        out.push(Action::Start(c, t));
                        if fault && cfg.faults.resend {
                            out.push(Action::Resend(c, t));
                        }
                    }
                    Phase::Waiting { until, due } => {
                        if due || until <= s.now {
                            out.push(Action::Attempt(c, t));
                            if fault && cfg.faults.resend {
                                out.push(Action::Resend(c, t));
                            }
                        }
                        if fault && cfg.faults.cancel {
                            out.push(Action::Cancel(c, t));
                        }
                    }
                    Phase::Holding { unconfirmed, .. } => {
                        out.push(Action::Release(c, t));
                        if unconfirmed {
                            out.push(Action::Confirm(c, t));
                        }
                        if fault && cfg.faults.short_extend {
                            out.push(Action::ShortExtend(c, t, false));
                            out.push(Action::ShortExtend(c, t, true));
                        }
                    }
                    Phase::Idle | Phase::Done => {}
                }
            }
        }
        for (i, p) in s.net.iter().enumerate() {
            // Each client reads its messages in publish order.
            let first = s.net.iter().position(|q| q.client == p.client) == Some(i);
            if first && s.clients[p.client as usize].liveness == Liveness::Live {
                out.push(Action::Deliver(i));
            }
        }
        // Time passes only once a task has asked: a run whose first step
        // comes k ticks in is, shifted by k ticks, one that starts at once
        // (nothing is stored yet, and every property is about time spans
        // and order), and that run goes on k ticks longer.
        let asked = s
            .clients
            .iter()
            .any(|c| c.tasks.iter().any(|t| t.phase != Phase::Idle));
        if asked && s.now < end && !s.urgent() {
            out.push(Action::Tick);
        }
        if let Some(a) = s.local_read(cfg, out).filter(|_| cfg.reduce) {
            out.clear();
            out.push(a);
        }
    }

    fn next_state(&self, s: &State, a: Action) -> Option<State> {
        let cfg = &self.cfg;
        let mut n = s.clone();
        match a {
            Action::Start(c, t) | Action::Attempt(c, t) => n.attempt(cfg, c, t, false),
            Action::Resend(c, t) => {
                n.faults += 1;
                n.attempt(cfg, c, t, true);
            }
            Action::Release(c, t) => n.release(cfg, c, t),
            Action::Confirm(c, t) => n.confirm(cfg, c, t),
            Action::Cancel(c, t) => {
                n.faults += 1;
                n.cancel(cfg, c, t);
            }
            Action::ShortExtend(c, t, cancelled) => {
                n.faults += 1;
                n.short_extend(cfg, c, t, cancelled);
            }
            Action::Freeze(c) => n.fault_client(c, false),
            Action::Die(c) => n.fault_client(c, true),
            Action::Deliver(i) => n.deliver(cfg, i),
            Action::Tick => n.tick(cfg),
        }
        if cfg.reduce {
            n.canonical(cfg);
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always("exclusion", |m: &WaitModel, s: &State| {
                let (w, r) = s.holders(&m.cfg);
                if m.cfg.kind == Kind::Semaphore {
                    return w <= m.cfg.permits as usize;
                }
                w <= 1 && (w == 0 || r == 0)
            }),
            Property::always("fences increase", |_, s: &State| s.fences_increase),
            Property::always("no lost wake-up", |m: &WaitModel, s: &State| {
                s.stall <= m.cfg.stall_bound
            }),
            // Not vacuous: runs with three acquisitions exist.
            Property::sometimes("three acquisitions", |_, s: &State| s.acquisitions >= 3),
        ];
        match self.cfg.kind {
            Kind::Fair => p.push(Property::always("fifo", |_, s: &State| s.fifo_kept)),
            Kind::RwLock => p.push(Property::always("writer preference", |_, s: &State| {
                s.writers_preferred
            })),
            Kind::Mutex | Kind::Semaphore => {}
        }
        p
    }
}
