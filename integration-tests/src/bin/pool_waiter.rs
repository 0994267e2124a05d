//! A worker process with a pool of tasks waiting on one lock, for the tests
//! of a frozen process whose tasks queue ahead of another client's waiter.
//!
//! Usage, with `REDIS_URL` set: `pool_waiter KIND NAME TASKS [PERMITS]`,
//! KIND one of `mutex`, `fair`, `write` (an RwLock writer) or `semaphore`
//! (PERMITS permits, default 1). One client; TASKS tasks each wait for the
//! lock, one after another (each starts once the previous one has had 20 ms
//! to attempt; the client queues them one at a time, or each for an
//! RwLock). Prints `waiting <TASKS>` once all are started,
//! then `acquired <task>` for each task that gets the lock, which it then
//! holds until the process is killed.

use std::io::Write;
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, name, tasks, permits) = match args.as_slice() {
        [kind, name, tasks] => (kind, name, tasks, 1),
        [kind, name, tasks, permits] | [kind, name, tasks, permits, ..] => {
            (kind, name, tasks, permits.parse()?)
        }
        _ => {
            return Err(
                "usage: pool_waiter mutex|fair|write|semaphore NAME TASKS [PERMITS]".into(),
            );
        }
    };
    let tasks: usize = tasks.parse()?;
    // A sixth argument: the URL to use instead of REDIS_URL's.
    let url = match args.get(5) {
        Some(url) => url.clone(),
        None => std::env::var("REDIS_URL")?,
    };
    let client = redbell::Client::connect(url.as_str()).await?;
    // A fifth argument `per-task`: each task has a Client of its own (one
    // process, several clients, as when libraries each make their own).
    let per_task = args.get(4).is_some_and(|a| a == "per-task");
    let mut handles: Vec<tokio::task::JoinHandle<Result<(), redbell::Error>>> = Vec::new();
    for task in 0..tasks {
        let client = if per_task {
            redbell::Client::connect(url.as_str()).await?
        } else {
            client.clone()
        };
        let (kind, name) = (kind.clone(), name.clone());
        handles.push(tokio::spawn(async move {
            let held: Box<dyn std::any::Any + Send> = match kind.as_str() {
                "mutex" => Box::new(client.mutex(&name).lock().await?),
                "fair" => Box::new(client.fair_mutex(&name).lock().await?),
                "write" => Box::new(client.rwlock(&name).write().await?),
                "semaphore" => Box::new(client.semaphore(&name, permits).acquire().await?),
                other => panic!("unknown kind {other:?}"),
            };
            println!("acquired {task}");
            let _ = std::io::stdout().flush();
            std::future::pending::<()>().await;
            drop(held);
            Ok(())
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("waiting {tasks}");
    std::io::stdout().flush()?;
    for handle in handles {
        handle.await??;
    }
    Ok(())
}
