//! A waiter's events: the messages it reads, a cancel and the pass-on
//! behind it, and the faults that stop a whole client.

use super::*;

impl State {
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

    pub(super) fn pass_on(&mut self, cfg: &Config, c: ClientId, t: u8, now: Ms) {
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

    pub(super) fn set_due(&mut self, c: ClientId, t: u8) {
        if let Phase::Waiting { until, .. } = self.task(c, t).phase {
            self.task_mut(c, t).phase = Phase::Waiting { until, due: true };
        }
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
