//! A holder's steps: release, the fair confirm, a shortening extend.

use super::*;

impl State {
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
}
