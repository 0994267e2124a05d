//! One contended hand-off between two clients, timed.

use std::time::Duration;

use redbell::{Client, Error};
use tokio::time::{Instant, sleep};

use crate::{LONG, promptly, unique};

/// `holder` takes a fresh lock (30 s lease), a waiter of `waiter` parks on
/// it, the holder unlocks; how long after the unlock the waiter had the
/// lock. Well under a second means the release's wake-up reached it (over
/// the waiter's pub/sub connection); a missed wake-up shows as a park's
/// length.
///
/// # Panics
///
/// When a lock or unlock fails, or the waiter finishes (gets the lock, or
/// fails) while it is held, or does not get it within
/// [`PROMPT`](crate::PROMPT).
pub async fn hand_off(holder: &Client, waiter: &Client) -> Duration {
    let name = unique("handoff");
    let held = holder
        .mutex(&name)
        .with_lease(LONG)
        .lock()
        .await
        .expect("the holder's lock");
    let task = {
        let mutex = waiter.mutex(&name).with_lease(LONG);
        tokio::spawn(async move {
            let guard = mutex.lock().await?;
            let got = Instant::now();
            guard.unlock().await?;
            Ok::<_, Error>(got)
        })
    };
    sleep(Duration::from_millis(300)).await;
    if task.is_finished() {
        let outcome = task.await.expect("the waiter's task");
        panic!("the waiter finished while the lock was held: {outcome:?}");
    }
    let released = Instant::now();
    held.unlock().await.expect("the holder's unlock");
    let got = promptly("the parked waiter", task)
        .await
        .expect("the waiter's task")
        .expect("the waiter's lock");
    got - released
}
