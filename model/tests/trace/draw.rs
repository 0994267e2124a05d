//! The seeded generator: random but valid actions of a few clients' tasks
//! on one lock name, drawn from the model's state (who holds, who waits,
//! who was just woken or granted), with real time passing between them.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redbell_model::scripts::{Member, Message, Ms, Published, Server, Token};

use crate::replay::{Act, Consts, Kind, Outcome};

/// What a task is doing, as far as the generator knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Idle,
    /// Queued (or trying) with this token; `arrival`: its first attempt's
    /// server time, µs (fair).
    Waiting {
        token: Token,
        arrival: Option<u64>,
        writer: bool,
    },
    /// Holding (its lease may have run out since) with this token.
    Holding {
        token: Token,
        reader: bool,
    },
}

pub struct Gen {
    rng: StdRng,
    pub kind: Kind,
    pub clients: u8,
    tasks: Vec<(Member, St)>,
    next_token: u16,
    /// Tasks told something by the last step (woken, granted, standby):
    /// they attempt next, more often than not.
    prompted: Vec<Member>,
    /// Every token handed out, for the odd stale release or extend.
    old: Vec<Token>,
}

impl Gen {
    pub fn new(seed: u64) -> (Gen, Consts) {
        let mut rng = StdRng::seed_from_u64(seed);
        let kinds = [Kind::Mutex, Kind::Election, Kind::Fair, Kind::Rw, Kind::Sem];
        let kind = kinds[rng.random_range(0..kinds.len())];
        let clients = rng.random_range(2..=3u8);
        let per = rng.random_range(1..=2u8);
        let tasks = (0..clients)
            .flat_map(|c| {
                (0..per).map(move |w| {
                    (
                        Member {
                            client: c,
                            waiter: w + 1,
                        },
                        St::Idle,
                    )
                })
            })
            .collect();
        let consts = Consts {
            grace_ms: rng.random_range(10..=80),
            park_ms: rng.random_range(100..=300),
            handoff_ms: rng.random_range(20..=100),
            claim_ms: rng.random_range(30..=150),
            window_ms: rng.random_range(20..=100),
            fence_ttl_ms: 60_000,
            permits: rng.random_range(1..=2),
            reserve_ms: rng.random_range(20..=100),
        };
        let g = Gen {
            rng,
            kind,
            clients,
            tasks,
            next_token: 1,
            prompted: Vec::new(),
            old: Vec::new(),
        };
        (g, consts)
    }

    /// Whether to start from a fence ahead of the clock (so that the
    /// counter branch, previous + 1, is exercised too).
    pub fn fence_ahead(&mut self) -> bool {
        self.rng.random_bool(0.2)
    }

    fn lease(&mut self) -> Ms {
        self.rng.random_range(30..=200)
    }

    fn token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        self.old.push(t);
        t
    }

    /// The next action.
    pub fn next(&mut self, model: &Server) -> (Act, usize) {
        let r = self.rng.random_range(0..100);
        if r < 20 {
            let ms = match self.rng.random_range(0..10) {
                0..=5 => self.rng.random_range(1..15),
                6..=8 => self.rng.random_range(15..80),
                _ => self.rng.random_range(80..250),
            };
            return (Act::Sleep(ms), usize::MAX);
        }
        if r < 23 {
            let c = self.rng.random_range(0..self.clients);
            let act = if model.subscribed.contains(&c) {
                Act::Unsubscribe(c)
            } else {
                Act::Subscribe(c)
            };
            return (act, usize::MAX);
        }
        if r < 27
            && let Some(&token) = self
                .old
                .get(self.rng.random_range(0..self.old.len().max(1)))
        {
            // A stale or foreign token: a late release or renewal.
            let lease = self.lease();
            let act = match (self.kind, self.rng.random_range(0..4)) {
                (Kind::Mutex | Kind::Election, 0..=1) => Act::Release { token },
                (Kind::Fair, 0..=1) => Act::FairRelease { token },
                (Kind::Rw, 0) => Act::WriteRelease { token },
                (Kind::Rw, 1) => Act::ReadRelease { token },
                (Kind::Sem, 0..=1) => Act::SemRelease { token },
                (Kind::Rw, 2) => Act::ReadExtend {
                    token,
                    lease,
                    also: None,
                },
                (Kind::Sem, _) => Act::SemExtend {
                    token,
                    lease,
                    also: None,
                },
                _ => Act::Extend {
                    token,
                    lease,
                    also: None,
                },
            };
            return (act, usize::MAX);
        }
        let i = match self.prompted.pop() {
            Some(m) if self.rng.random_bool(0.7) => {
                self.tasks.iter().position(|t| t.0 == m).unwrap_or(0)
            }
            _ => self.rng.random_range(0..self.tasks.len()),
        };
        let (member, st) = self.tasks[i];
        let wait = self.rng.random_bool(0.85).then_some(member);
        let lease = self.lease();
        // A renewal batch of two: another token (stale, foreign, or the
        // same) renewed in the same call.
        let also = if self.rng.random_bool(0.3) {
            self.old
                .get(self.rng.random_range(0..self.old.len().max(1)))
                .copied()
        } else {
            None
        };
        let act = match (self.kind, st) {
            (_, St::Idle) => {
                let token = self.token();
                match self.kind {
                    Kind::Mutex | Kind::Election => Act::Acquire {
                        token,
                        lease,
                        member: wait,
                    },
                    Kind::Fair => Act::FairAcquire {
                        token,
                        lease,
                        member: wait,
                        arrival: None,
                    },
                    Kind::Rw if self.rng.random_bool(0.5) => Act::ReadAcquire { token, lease },
                    Kind::Rw => Act::WriteAcquire {
                        token,
                        lease,
                        member: wait,
                    },
                    Kind::Sem => Act::SemAcquire {
                        token,
                        lease,
                        member: wait,
                        arrival: None,
                    },
                }
            }
            (
                kind,
                St::Waiting {
                    token,
                    arrival,
                    writer,
                },
            ) => {
                let give_up = self.rng.random_bool(0.15);
                match kind {
                    Kind::Mutex | Kind::Election if give_up => Act::Pass { member },
                    Kind::Mutex | Kind::Election => Act::Acquire {
                        token,
                        lease,
                        member: Some(member),
                    },
                    Kind::Fair if give_up => Act::FairPass { member, token },
                    Kind::Fair => {
                        let arrival = arrival.filter(|_| self.rng.random_bool(0.3));
                        Act::FairAcquire {
                            token,
                            lease,
                            member: Some(member),
                            arrival,
                        }
                    }
                    Kind::Rw if writer && give_up => Act::RwPass { member },
                    Kind::Rw if writer => Act::WriteAcquire {
                        token,
                        lease,
                        member: Some(member),
                    },
                    Kind::Rw => Act::ReadAcquire { token, lease },
                    Kind::Sem if give_up => Act::SemPass { member },
                    Kind::Sem => {
                        let arrival = arrival.filter(|_| self.rng.random_bool(0.3));
                        Act::SemAcquire {
                            token,
                            lease,
                            member: Some(member),
                            arrival,
                        }
                    }
                }
            }
            (kind, St::Holding { token, reader }) => match (kind, self.rng.random_range(0..10)) {
                (Kind::Rw, 0..=4) if reader => Act::ReadRelease { token },
                (Kind::Rw, 5..=7) if reader => Act::ReadExtend { token, lease, also },
                (Kind::Rw, _) if reader => Act::ReadAcquire { token, lease },
                (_, 0..=4) => match kind {
                    Kind::Mutex | Kind::Election => Act::Release { token },
                    Kind::Fair => Act::FairRelease { token },
                    Kind::Rw => Act::WriteRelease { token },
                    Kind::Sem => Act::SemRelease { token },
                },
                (Kind::Sem, 5..=7) => Act::SemExtend { token, lease, also },
                (_, 5..=7) => Act::Extend { token, lease, also },
                // A re-sent attempt (its first reply lost).
                (Kind::Mutex | Kind::Election, _) => Act::Acquire {
                    token,
                    lease,
                    member: wait,
                },
                (Kind::Fair, _) => Act::FairAcquire {
                    token,
                    lease,
                    member: wait,
                    arrival: None,
                },
                (Kind::Rw, _) => Act::WriteAcquire {
                    token,
                    lease,
                    member: wait,
                },
                (Kind::Sem, _) => Act::SemAcquire {
                    token,
                    lease,
                    member: wait,
                    arrival: None,
                },
            },
        };
        (act, i)
    }

    /// What the step told: the task's new state, and who was prompted.
    pub fn learn(&mut self, act: Act, task: usize, outcome: Outcome, published: &[Published]) {
        self.prompted = published
            .iter()
            .filter_map(|p| {
                let w = match p.message {
                    Message::Wake(w) | Message::Standby(w, _) | Message::Grant(w, ..) => w,
                    Message::FairStandby(w, ..) => w,
                    _ => return None,
                };
                Some(Member {
                    client: p.client,
                    waiter: w,
                })
            })
            .collect();
        let Some((member, st)) = self.tasks.get(task).copied() else {
            return;
        };
        let new = match (act, outcome) {
            (
                Act::Acquire { token, .. }
                | Act::FairAcquire { token, .. }
                | Act::WriteAcquire { token, .. }
                | Act::SemAcquire { token, .. },
                Outcome::Acquired,
            ) => St::Holding {
                token,
                reader: false,
            },
            (Act::ReadAcquire { token, .. }, Outcome::Acquired) => St::Holding {
                token,
                reader: true,
            },
            (
                Act::Acquire {
                    token,
                    member: Some(_),
                    ..
                },
                Outcome::Held { .. },
            ) => St::Waiting {
                token,
                arrival: None,
                writer: false,
            },
            (
                Act::FairAcquire {
                    token,
                    member: Some(_),
                    ..
                }
                | Act::SemAcquire {
                    token,
                    member: Some(_),
                    ..
                },
                Outcome::Held { now_us },
            ) => {
                let arrival = match st {
                    St::Waiting {
                        arrival: Some(a), ..
                    } => Some(a),
                    _ => now_us,
                };
                St::Waiting {
                    token,
                    arrival,
                    writer: false,
                }
            }
            (
                Act::WriteAcquire {
                    token,
                    member: Some(_),
                    ..
                },
                Outcome::Held { .. },
            ) => St::Waiting {
                token,
                arrival: None,
                writer: true,
            },
            (Act::ReadAcquire { token, .. }, Outcome::Held { .. }) if self.rng.random_bool(0.7) => {
                St::Waiting {
                    token,
                    arrival: None,
                    writer: false,
                }
            }
            (Act::Extend { .. } | Act::ReadExtend { .. } | Act::SemExtend { .. }, _) => st,
            _ => St::Idle,
        };
        self.tasks[task] = (member, new);
    }
}
