//! A task's attempts: the acquire scripts' calls, the queue place they
//! take and pass on, and the FIFO and writer checks judged as the lock
//! changes hands.

use super::*;

impl State {
    /// FIFO (FairMutex), judged whenever a script gave the lock to a new
    /// token (a grant, or a free lock taken): no live waiter whose member
    /// is queued with an earlier arrival may be left in the queue. (A
    /// sibling whose turn to queue has not come yet is not in the queue:
    /// "give or take the round trip between one being served and the next
    /// queuing", acquire.rs.)
    pub(super) fn check_fifo(&mut self) {
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
    pub(super) fn queues(&self, cfg: &Config, c: ClientId, t: u8) -> bool {
        match cfg.kind {
            Kind::RwLock => is_writer(cfg, t),
            _ if cfg.bugs.pool_queues_every_task => true,
            _ => self.clients[c as usize].queuer == Some(t),
        }
    }

    /// The task leaves the waiters (with the lock or not): the next
    /// waiting task of its client takes the queue place and attempts.
    pub(super) fn leave(&mut self, c: ClientId, t: u8) {
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

    pub(super) fn acquired(
        &mut self,
        cfg: &Config,
        c: ClientId,
        t: u8,
        fence: Option<u64>,
        from: Ms,
    ) {
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
    pub(super) fn check_order(&mut self, cfg: &Config, c: ClientId, t: u8) {
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
}
