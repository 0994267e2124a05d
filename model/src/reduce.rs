//! State reduction: each state the checker stores is first put in a
//! canonical form that forgets what no later step can read, so states
//! that differ only there are explored once.
//!
//! `tests/reduce.rs` checks the arguments below on small instances: with
//! each historic bug switched on and with none, the checker finds the same
//! broken properties with the reductions ([`Config::reduce`]) and without.
//!
//! Soundness. [`State::canonical`] maps a state `s` to a state `c(s)` such
//! that (1) every property gives the same verdict on `s` and `c(s)`, and
//! (2) the same actions are enabled in both, and each action `a` leads
//! from them to states `s'` and `t'` with `c(s') = c(t')`. The map is then
//! a bisimulation between the full and the reduced graph, so a property
//! broken in one is broken in the other (on a path of the same length).
//! Each rule below says what it forgets and why nothing reads it:
//!
//! - **Messages in flight** are kept per client, in publish order: a
//!   client reads its own first message, whatever the others' (the
//!   `Deliver` step takes a client's first message, so the interleaving of
//!   different clients' messages is not information).
//! - **Parks that ended**: a waiting task that is notified or whose park
//!   has ended attempts next whatever its deadline (a standby only pulls
//!   a deadline in, and every such step leaves it ready): stored as
//!   notified, deadline `now`.
//! - **Lapsed guards**: a holder whose guard deadline has passed is only
//!   read as "deadline passed" (exclusion counts guards in the future; a
//!   shortening extend takes the earlier deadline): stored as `now`.
//! - **Frozen and dead clients** take no step again: their waiting tasks'
//!   deadlines and their queue place are never read (the checks read
//!   only live clients' waiters; a holder's deadline still counts for
//!   exclusion and is kept).
//! - **Holders and finished tasks**: whether a task queued is read only
//!   of waiting tasks (writer preference, a cancel's pass-on); its
//!   arrival only by its own attempts and by the FIFO check of a token
//!   newly in the lock key. A holder's token was judged as it took the
//!   lock (in the same step), and it makes no attempt and is in no queue
//!   again (only a guard returned on its grant, bug (e), confirms
//!   later: its arrival is kept); a finished task's token never newly
//!   reaches the lock key once its member is out of the fair queue.
//! - **Deadlines past the horizon**: time stops at the horizon, so a
//!   park or guard deadline past it never comes; a standby pulls it in to
//!   the same point whichever it was: stored as one past the horizon.
//! - **Fences of past ticks**: every fence handed out from now on is at
//!   least `now` in µs, above any of an earlier tick, and the last fence
//!   and the counter are only compared with each other and with later
//!   fences: below `now`, only whether the last fence handed to a holder
//!   is behind the counter is kept. (A grant in flight carries its fence
//!   and claim end, which its reader does not use: dropped.)
//! - **The FIFO check's last token**, once its task finished and the lock
//!   key holds no longer it, is only compared with tokens that reach the
//!   lock key later, which a finished task's never does: stored as a
//!   token of nobody (not as none: none means no holder yet).
//! - **Lapsed keys**: an expired lock key, hand-off marker or reader
//!   entry reads as absent in every script (each compares its expiry
//!   with `now`; an expired reader's release answers "gone" either way),
//!   so it is dropped, as Redis would on its next read. (Expired queue
//!   entries, intents and permits are kept: scripts count or reclaim
//!   them.)

//!
//! # No freeze at the horizon
//!
//! Once server time has reached the horizon, no tick comes, so the stall
//! count cannot change and no live client is ever made to act: a client
//! frozen there behaves as a live one that takes no further step (both
//! count as PUBLISH receivers; the frozen one only drops its messages and
//! leaves the FIFO and writer checks, which can only hide a violation).
//! Every state such a run reaches has, without the freeze, a counterpart
//! with the same holders and fences, so the model offers no freeze there
//! (a death stays: a dead client is no receiver).
//!
//! # Local reads first (a partial-order reduction)
//!
//! [`State::local_read`] picks, where it can, one step to take alone
//! instead of every enabled step: a client `c` reading a message whose
//! effect is local (a wake-up or grant for a task that still waits, a
//! standby, the RwLock's broadcast: each only marks a waiting task of `c`
//! notified or pulls its park's end in; a wake-up for a task gone is not
//! local: it runs a pass-on script), while `c`'s only other enabled steps
//! are a release, a shortening extend or a confirm of a holding task, a
//! freeze or a death, or steps of tasks the read does not touch that
//! cannot touch them either: a start (unless the read is the RwLock's
//! broadcast, which would touch the new waiter), an attempt or a cancel
//! of a waiting task that is not the client's queuer (only the queuer's
//! leaving passes its place on, notifying the next waiting task; while a
//! task waits, the client has a queuer, so a start queues nothing of the
//! others'). Such a read `d`:
//!
//! - is **invisible**: it changes no property's verdict (they read which
//!   tasks hold or wait, never a park's end or a notification);
//! - is **independent** of every step another client can take before it:
//!   those read and write the server, their own tasks and the end of the
//!   network's queue, never `c`'s parks; time cannot pass while `c` has a
//!   message to read; and none of them can enable a step of `c` (the
//!   fault budget they spend only disables). `c`'s own steps allowed
//!   beside it touch no task the read touches, read nothing it writes,
//!   and lead only to more such steps (none makes a touched task ready or
//!   another task the queuer); a freeze or death of `c` drops the
//!   message, which gives, in canonical form, the state of `d` followed
//!   by it.
//!
//! So a run that reaches a bad state from `s` can be reordered to take
//! `d` first (or, if `c` froze or died before reading, `d` then that
//! fault), reaching a state with the same verdicts by a path no longer,
//! with one message fewer in flight: by induction on (path length,
//! messages in flight), the reduced graph reaches a bad state whenever
//! the full one does. (The `sometimes` property is kept the same way: the
//! acquisition count does not change on a read.)

use crate::client::{Config, Liveness, Phase, START_MS, State};
use crate::model::Action;
use crate::scripts::{FairMember, LockValue, Member, Message, Token};

/// What the FIFO check remembers of a token that left the lock key for
/// good (its task finished): no task's token.
const STALE: Token = Token(0);

impl State {
    /// Puts the state in its canonical form (see the module's doc).
    pub fn canonical(&mut self, cfg: &Config) {
        let now = self.now;
        // Past the horizon: a deadline there never comes.
        let end = START_MS + cfg.horizon_ticks * cfg.tick_ms;
        // Fences of past ticks: only their order is read.
        let base = now * 1000;
        if self.server.fence < base && self.last_fence < base {
            let behind = self.last_fence < self.server.fence;
            self.server.fence = base - 1;
            self.last_fence = base - 1 - u64::from(behind);
        }
        for p in &mut self.net {
            if let Message::Grant(w, tok, ..) = p.message {
                p.message = Message::Grant(w, tok, 0, 0);
            }
        }
        if let Some(tok) = self.fifo_seen
            && tok != STALE
            && self.server.lock.map(|l| l.0) != Some(LockValue::Token(tok))
        {
            let (c, t) = ((tok.0 - 1) / 16, (tok.0 - 1) % 16);
            if self.clients[c as usize].tasks[t as usize].phase == Phase::Done {
                self.fifo_seen = Some(STALE);
            }
        }
        // Messages: grouped by client, each client's in publish order.
        self.net.sort_by_key(|p| p.client);
        // Lapsed keys.
        if self.server.lock_at(now).is_none() {
            self.server.lock = None;
        }
        if matches!(self.server.fair.handoff, Some((_, _, e)) if e <= now) {
            self.server.fair.handoff = None;
        }
        self.server.rw.readers.retain(|r| r.1 > now);
        let lock_token = match self.server.lock {
            Some((LockValue::Token(t), _)) => Some(t),
            _ => None,
        };
        for (c, cl) in self.clients.iter_mut().enumerate() {
            let live = cl.liveness == Liveness::Live;
            if !live {
                cl.queuer = None;
            }
            for (t, task) in cl.tasks.iter_mut().enumerate() {
                match task.phase {
                    Phase::Waiting { until, due } => {
                        if !live {
                            task.phase = Phase::Waiting {
                                until: now,
                                due: false,
                            };
                        } else if due || until <= now {
                            task.phase = Phase::Waiting {
                                until: now,
                                due: true,
                            };
                        } else if until > end {
                            task.phase = Phase::Waiting {
                                until: end + 1,
                                due,
                            };
                        }
                    }
                    Phase::Holding { until, unconfirmed } => {
                        if until <= now || until > end {
                            task.phase = Phase::Holding {
                                until: if until <= now { now } else { end + 1 },
                                unconfirmed,
                            };
                        }
                        if !unconfirmed {
                            task.queued = false;
                            task.arrival = None;
                        }
                    }
                    Phase::Done => {
                        task.queued = false;
                        let m = Member {
                            client: c as u8,
                            waiter: t as u8,
                        };
                        let tok = crate::client::token(c as u8, t as u8);
                        let queued = self
                            .server
                            .fair
                            .queue
                            .iter()
                            .any(|x| matches!(x.1, FairMember::Waiter(q, _) if q == m));
                        if !queued && lock_token != Some(tok) {
                            task.arrival = None;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl State {
    /// The read to take alone, if any (see the module's doc), given every
    /// enabled action `all`.
    pub fn local_read(&self, cfg: &Config, all: &[Action]) -> Option<Action> {
        let (i, p) = all.iter().find_map(|a| match *a {
            Action::Deliver(i) if self.is_local(cfg, i) => Some((i, self.net[i])),
            _ => None,
        })?;
        let c = p.client;
        let cl = &self.clients[c as usize];
        // The tasks the read touches.
        let target = |t: u8| match p.message {
            Message::Wake(w)
            | Message::Standby(w, _)
            | Message::Grant(w, ..)
            | Message::FairStandby(w, ..) => t == w,
            Message::RwReleased(_) | Message::Probe(_) => true,
        };
        let broadcast = matches!(p.message, Message::RwReleased(_));
        let waits = |t: u8| matches!(cl.tasks[t as usize].phase, Phase::Waiting { .. });
        // A step of another of `c`'s tasks that cannot touch a target: a
        // start (the queue place is taken, so it queues nothing of the
        // others'), or an attempt or cancel of a waiting task that is not
        // the queuer (its leaving passes no place on).
        let apart = |t: u8| {
            if waits(t) {
                !target(t) && cl.queuer != Some(t)
            } else {
                !broadcast
            }
        };
        let alone = all.iter().all(|a| match *a {
            Action::Deliver(j) => j == i || self.net[j].client != c,
            Action::Start(o, t)
            | Action::Attempt(o, t)
            | Action::Resend(o, t)
            | Action::Cancel(o, t) => o != c || apart(t),
            Action::Release(..)
            | Action::ShortExtend(..)
            | Action::Confirm(..)
            | Action::Freeze(_)
            | Action::Die(_)
            | Action::Tick => true,
        });
        alone.then_some(Action::Deliver(i))
    }

    /// Does reading message `i` only touch its client's waiting tasks?
    fn is_local(&self, cfg: &Config, i: usize) -> bool {
        let p = self.net[i];
        let waits = |w: u8| {
            self.clients[p.client as usize]
                .tasks
                .get(w as usize)
                .is_some_and(|t| matches!(t.phase, Phase::Waiting { .. }))
        };
        match p.message {
            Message::Wake(w) => waits(w),
            Message::Grant(w, ..) => !cfg.bugs.fair_guard_on_grant || !waits(w),
            Message::Standby(..) | Message::FairStandby(..) | Message::RwReleased(_) => true,
            Message::Probe(_) => false,
        }
    }
}
