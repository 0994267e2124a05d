//! The run's plan: the workers to start and the seeded fault schedule.
//!
//! Everything random in a soak run comes from one [`Rng`] seeded by
//! `--seed` / `SOAK_SEED`, so a run's fault schedule (which fault, when, and
//! which worker slot it hits) is replayed exactly by passing the printed
//! seed again. What the workers and Redis do in between is not
//! deterministic; the schedule is.

use std::time::Duration;

use super::fault_kind::FaultKind;

/// A small deterministic PRNG (SplitMix64): good enough to draw faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }
}

/// The kinds of library workers and the lock each contends for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkerKind {
    /// `Mutex` (plain, a newcomer may barge in).
    Mutex,
    /// `FairMutex` (FIFO hand-off).
    Fair,
    /// `RwLock` writers.
    RwWrite,
    /// `RwLock` readers (on the writers' lock; they do not write).
    RwRead,
    /// `redbell run` (a plain `Mutex` in the CLI), on a lock of its own.
    Run,
    /// `Semaphore` permits ([`SEM_PERMITS`] of them; they do not write).
    #[value(name = "sem")]
    Semaphore,
    /// [`POOL_TASKS`] tasks of one process (one client), each a `Mutex`
    /// worker on the `mutex` workers' lock.
    Pool,
    /// The Python package's `Mutex` (`python/bench/soak_worker.py`, run by
    /// the venv's interpreter, `python.rs`), on the `mutex` workers' lock.
    #[value(name = "py")]
    Python,
    /// The Python package's `FairMutex`, on the `fair` workers' lock.
    #[value(name = "py-fair")]
    PythonFair,
}

impl WorkerKind {
    pub const ALL: [WorkerKind; 9] = [
        WorkerKind::Mutex,
        WorkerKind::Pool,
        WorkerKind::Fair,
        WorkerKind::RwWrite,
        WorkerKind::RwRead,
        WorkerKind::Run,
        WorkerKind::Semaphore,
        WorkerKind::Python,
        WorkerKind::PythonFair,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkerKind::Mutex => "mutex",
            WorkerKind::Fair => "fair",
            WorkerKind::RwWrite => "rw-write",
            WorkerKind::RwRead => "rw-read",
            WorkerKind::Run => "run",
            WorkerKind::Semaphore => "sem",
            WorkerKind::Pool => "pool",
            WorkerKind::Python => "py",
            WorkerKind::PythonFair => "py-fair",
        }
    }

    /// Whether its workers are Python processes (`python.rs`).
    pub fn is_python(self) -> bool {
        matches!(self, WorkerKind::Python | WorkerKind::PythonFair)
    }

    /// The lock's part of the lock name (readers share the writers' lock).
    pub fn lock_part(self) -> &'static str {
        match self {
            WorkerKind::RwWrite | WorkerKind::RwRead => "rw",
            WorkerKind::Pool | WorkerKind::Python => "mutex",
            WorkerKind::PythonFair => "fair",
            k => k.name(),
        }
    }

    /// How many workers of this kind run at once (`redbell run` workers
    /// start two processes a section, a Python worker costs more CPU than
    /// a Rust one: fewer of them; the semaphore's are
    /// twice its permits, so some always wait; one pool, of several tasks).
    pub fn workers(self) -> usize {
        match self {
            WorkerKind::Run | WorkerKind::Python | WorkerKind::PythonFair => 2,
            WorkerKind::Pool => 1,
            WorkerKind::Semaphore => 2 * SEM_PERMITS as usize,
            _ => 3,
        }
    }

    /// How many holders the lock admits at once, if more than one: the
    /// semaphore's permits (logged with every record, for the checker).
    pub fn permits(self) -> Option<u32> {
        (self == WorkerKind::Semaphore).then_some(SEM_PERMITS)
    }

    /// Whether its critical sections write their fence to the
    /// fence-checked store. Readers do not (they hold the lock shared with
    /// each other); nor do semaphore holders: concurrent
    /// permits have different fences, and a holder of a lower one may
    /// legitimately write after any number of later holders came and went,
    /// so a store rejecting fences below its maximum would reject correct
    /// behaviour (see `checker.rs`).
    pub fn writes(self) -> bool {
        !matches!(self, WorkerKind::RwRead | WorkerKind::Semaphore)
    }
}

/// The permits of the semaphore the `sem` workers share.
pub const SEM_PERMITS: u32 = 2;

/// The workers' lease (renewed by the library every third of it).
pub const LEASE: Duration = Duration::from_millis(1500);

/// How long a SIGSTOPped worker stays stopped: past its lease.
pub const STOP_FOR: Duration = Duration::from_millis(2200);

/// The tasks of a pool worker, each waiting on the lock in turn: enough to
/// fill the head of the waiter queue (a release reads its first three
/// members) with one process's members.
pub const POOL_TASKS: usize = 6;

/// The workers' response timeout (the library's default, set explicitly
/// so the black hole's bound below stays in step).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How soon a client whose connections all went silent must work again:
/// two response timeouts and a second (the bound of the issue that found
/// it; the checker adds the lease and the free-wait bound, `checker/run.rs`).
pub const BLACK_HOLE_RECOVERY: Duration =
    Duration::from_millis(2 * RESPONSE_TIMEOUT.as_millis() as u64 + 1000);

/// How long a `redbell run` worker's command runs: long past the lease, so
/// a `redbell run` frozen early in it leaves the command running when the
/// lease runs out (unless something kills it first).
pub const RUN_HOLD: Duration = Duration::from_millis(3000);

/// How often a running command writes a line to its lock's unfenced log.
pub const RUN_LINE_EVERY: Duration = Duration::from_millis(100);

/// `redbell run --kill-grace` of the `run` workers.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// How long a command stays stopped before its `redbell run` gets the
/// SIGTERM (`SigstopCommand`).
pub const TERM_AFTER: Duration = Duration::from_millis(300);

/// One scheduled fault: when (from the start) and, for a fault aimed at a
/// worker, the slot it hits (an index into the live workers, taken modulo
/// their number when it is injected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub kind: FaultKind,
    pub slot: usize,
}

/// The faults that hit each topology's workers.
fn worker_faults(topology: &str) -> &'static [FaultKind] {
    match topology {
        "single" => &[
            FaultKind::Sigkill,
            FaultKind::SigkillRun,
            FaultKind::Sigstop,
            FaultKind::SigstopWaiter,
            FaultKind::SigstopWaiter,
            FaultKind::ClientKillNormal,
            FaultKind::ClientKillPubsub,
            FaultKind::ClientPause,
            FaultKind::Partition,
            FaultKind::HalfOpen,
            FaultKind::BlackHole,
            FaultKind::FreezePool,
            FaultKind::FreezeHost,
            FaultKind::SigstopRun,
            FaultKind::SigstopCommand,
        ],
        _ => &[
            FaultKind::Sigkill,
            FaultKind::SigkillRun,
            FaultKind::Sigstop,
            FaultKind::SigstopWaiter,
            FaultKind::FreezePool,
            FaultKind::FreezeHost,
            FaultKind::SigstopRun,
            FaultKind::SigstopCommand,
        ],
    }
}

/// The faults of each topology's servers, and how far apart they are.
fn server_faults(topology: &str) -> (&'static [FaultKind], u64) {
    match topology {
        "single" => (&[FaultKind::Restart], 8_000),
        "sentinel" => (
            &[
                FaultKind::Failover,
                FaultKind::KillPrimary,
                FaultKind::FreezeSentinel,
            ],
            12_000,
        ),
        "cluster" => (
            &[
                FaultKind::ClusterFailover,
                FaultKind::KillThenFailover,
                FaultKind::Migrate,
            ],
            10_000,
        ),
        _ => (&[], 0),
    }
}

/// The fault schedule of a run of `secs` seconds on `topology`: one fault
/// every 1–2 s, none in the first second and the last two (so the end of
/// the run is calm enough to judge stranded waiters); a server fault
/// instead of a worker's once its spacing has passed since the last one
/// (from the fifth second on).
pub fn schedule(seed: u64, secs: u64, topology: &str, only: &[FaultKind]) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let keep = |k: &&FaultKind| only.is_empty() || only.contains(k);
    let kinds: Vec<FaultKind> = worker_faults(topology)
        .iter()
        .filter(keep)
        .copied()
        .collect();
    let (server, spacing) = server_faults(topology);
    let server: Vec<FaultKind> = server.iter().filter(keep).copied().collect();
    let kinds = if kinds.is_empty() {
        server.clone()
    } else {
        kinds
    };
    let end_ms = secs.saturating_mul(1000).saturating_sub(2000);
    let mut at_ms = 1000 + rng.range(0, 1000);
    let mut last_server = 0;
    let mut out = Vec::new();
    while at_ms < end_ms {
        let mut kind = kinds[rng.range(0, kinds.len() as u64) as usize];
        let pick = rng.range(0, server.len().max(1) as u64) as usize;
        if !server.is_empty() && at_ms >= 5_000 && at_ms >= last_server + spacing {
            kind = server[pick];
            last_server = at_ms;
        }
        let slot = rng.range(0, 1 << 16) as usize;
        out.push(Planned {
            at: Duration::from_millis(at_ms),
            kind,
            slot,
        });
        at_ms += rng.range(1000, 2001);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_replayed_by_its_seed() {
        assert_eq!(
            schedule(42, 60, "single", &[]),
            schedule(42, 60, "single", &[])
        );
        assert_ne!(
            schedule(42, 60, "single", &[]),
            schedule(43, 60, "single", &[])
        );
        let only = schedule(42, 60, "single", &[FaultKind::SigstopWaiter]);
        assert!(only.iter().all(|p| p.kind == FaultKind::SigstopWaiter));
        let s = schedule(7, 60, "cluster", &[]);
        assert!(s.len() >= 25 && s.len() <= 58, "{}", s.len());
        assert!(s.windows(2).all(|w| {
            let gap = w[1].at - w[0].at;
            gap >= Duration::from_secs(1) && gap <= Duration::from_secs(2)
        }));
        assert!(s.last().unwrap().at <= Duration::from_secs(58));
        let server: Vec<_> = s.iter().filter(|p| p.kind.is_server()).collect();
        assert!(server.len() >= 4, "{}", server.len());
        assert!(
            server
                .windows(2)
                .all(|w| w[1].at - w[0].at >= Duration::from_secs(10))
        );
    }
}
