//! One soak worker process (the hidden `soak-worker` subcommand): takes its
//! lock over and over until told to stop, writes the guard's fence to the
//! fence-checked store on entering and on leaving each critical section
//! (readers and semaphore holders do not write: [`WorkerKind::writes`]),
//! and logs every wait, acquisition, write and hold as a JSON line (see
//! `checker.rs`). `redbell run` workers are in `runner.rs`.
//!
//! A pool worker ([`WorkerKind::Pool`]) does the same in [`POOL_TASKS`]
//! tasks of one process, on one client, each logging as `ID/TASK`: one
//! process with many members in the lock's waiter queue, which a bound per
//! queue member rather than per process misses when the process freezes
//! (`FreezePool`).

use std::time::Duration;

use super::checker::Event;
use super::plan::{POOL_TASKS, SEM_PERMITS, WorkerKind};
use super::worker_io::{Log, Store, WorkerArgs, error_kind, now_us, stopped};
use crate::fail::Failure;

enum Handle {
    Mutex(redbell::Mutex),
    Fair(redbell::FairMutex),
    Rw(redbell::RwLock),
    Semaphore(redbell::Semaphore),
}

enum Guard {
    Mutex(redbell::MutexGuard),
    Write(redbell::WriteGuard),
    Read(redbell::ReadGuard),
    Permit(redbell::Permit),
}

impl Guard {
    fn fence(&self) -> u64 {
        match self {
            Guard::Mutex(g) => g.fence(),
            Guard::Write(g) => g.fence(),
            Guard::Read(g) => g.fence(),
            Guard::Permit(p) => p.fence(),
        }
    }

    async fn unlock(self) -> Result<(), redbell::Error> {
        match self {
            Guard::Mutex(g) => g.unlock().await,
            Guard::Write(g) => g.unlock().await,
            Guard::Read(g) => g.unlock().await,
            Guard::Permit(p) => p.unlock().await,
        }
    }
}

impl Handle {
    async fn lock(&self, kind: WorkerKind) -> Result<Guard, redbell::Error> {
        Ok(match self {
            Handle::Mutex(m) => Guard::Mutex(m.lock().await?),
            Handle::Fair(m) => Guard::Mutex(m.lock().await?),
            Handle::Rw(l) if kind == WorkerKind::RwRead => Guard::Read(l.read().await?),
            Handle::Rw(l) => Guard::Write(l.write().await?),
            Handle::Semaphore(s) => Guard::Permit(s.acquire().await?),
        })
    }
}

/// Runs one library worker (any kind but [`WorkerKind::Run`], which
/// `runner.rs` drives) until the stop file appears.
pub async fn run(url: &str, args: WorkerArgs) -> Result<(), Failure> {
    let client = args.target.client(url).await?;
    let handle = |client: &redbell::Client| match args.kind {
        // (Python workers never get here: `python.rs` runs them.)
        WorkerKind::Mutex | WorkerKind::Run | WorkerKind::Pool | WorkerKind::Python => {
            Handle::Mutex(client.mutex(&args.lock))
        }
        WorkerKind::PythonFair => Handle::Fair(client.fair_mutex(&args.lock)),
        WorkerKind::Fair => Handle::Fair(client.fair_mutex(&args.lock)),
        WorkerKind::RwWrite | WorkerKind::RwRead => Handle::Rw(client.rwlock(&args.lock)),
        WorkerKind::Semaphore => Handle::Semaphore(client.semaphore(&args.lock, SEM_PERMITS)),
    };
    if args.kind != WorkerKind::Pool {
        let store = Store::open(args.target.store_url(url), &args.lock).await?;
        let log = Log::open(&args.log, &args.id, args.kind, &args.lock)?;
        sections(&args, &handle(&client), log, store).await;
        return Ok(());
    }
    // The pool: its tasks queue one after another, as the pool of a
    // service would.
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..POOL_TASKS {
        let id = format!("{}/{task}", args.id);
        let store = Store::open(args.target.store_url(url), &args.lock).await?;
        let log = Log::open(&args.log, &id, args.kind, &args.lock)?;
        let (args, handle) = (args.clone(), handle(&client));
        tasks.spawn(async move { sections(&args, &handle, log, store).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One worker's (or pool task's) critical sections until the stop file
/// appears.
async fn sections(args: &WorkerArgs, handle: &Handle, mut log: Log, mut store: Store) {
    let hold = Duration::from_millis(args.hold_ms);
    let mut seq = 0;
    while !stopped(&args.stop_file) {
        seq += 1;
        let wait = now_us();
        log.put(Event::Wait, seq, None, (wait, None), None);
        let guard = match handle.lock(args.kind).await {
            Ok(g) => g,
            Err(e) => {
                log.put(
                    Event::Error,
                    seq,
                    None,
                    (wait, Some(now_us())),
                    Some(format!("lock:{}", error_kind(&e))),
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let fence = guard.fence();
        let store = args.kind.writes().then_some(&mut store);
        Store::section(store, &mut log, seq, (wait, now_us(), fence), hold).await;
        if let Err(e) = guard.unlock().await {
            let t = now_us();
            log.put(
                Event::Error,
                seq,
                Some(fence),
                (t, Some(t)),
                Some(format!("unlock:{}", error_kind(&e))),
            );
        }
        // A short pause between sections so others get a turn (a longer one
        // for writers, or the writer-preferring RwLock starves its readers).
        let pause = if args.kind == WorkerKind::RwWrite {
            30
        } else {
            2
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
