//! The background worker's unit tests, on Tokio's paused clock.

use std::sync::Mutex as StdMutex;

use super::*;
use crate::keys::Kind;

fn keys() -> Arc<LockKeys> {
    Arc::new(
        LockKeys::new(
            "redbell",
            "client",
            "lock",
            Kind::Plain,
            Duration::from_secs(60),
        )
        .unwrap(),
    )
}

fn release(token: &str) -> Work {
    Work::Release {
        keys: keys(),
        token: token.to_owned(),
    }
}

fn token(work: &Work) -> String {
    match work {
        Work::Release { token, .. } => token.clone(),
        Work::PassOn { member, .. } => member.clone(),
        Work::Resign { token, .. } => token.clone(),
    }
}

fn timed_out() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "timed out",
    )))
}

/// Each attempt's token and when it finished.
type Log = Arc<StdMutex<Vec<(String, Instant)>>>;

/// A worker whose attempts take 100 ms; those at tokens starting with
/// "bad" fail (retryably) after 2 s instead. Records each attempt's
/// token and when it finished.
fn worker(capacity: usize) -> (Sender, Log) {
    let log = Arc::new(StdMutex::new(Vec::new()));
    let sender = start_with(capacity, None, {
        let log = log.clone();
        move |work| {
            let log = log.clone();
            async move {
                let token = token(&work);
                let bad = token.starts_with("bad");
                let took = if bad { 2_000 } else { 100 };
                tokio::time::sleep(Duration::from_millis(took)).await;
                log.lock().unwrap().push((token, Instant::now()));
                if bad { Err(timed_out()) } else { Ok(()) }
            }
        }
    });
    (sender, log)
}

fn attempts(log: &Log, token: &str) -> Vec<Instant> {
    let log = log.lock().unwrap();
    log.iter()
        .filter(|(t, _)| t == token)
        .map(|(_, at)| *at)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_release_queued_twice_runs_once() {
    let (sender, log) = worker(CAPACITY);
    sender.send(release("a"));
    sender.send(release("a")); // queued
    tokio::time::sleep(Duration::from_millis(50)).await;
    sender.send(release("a")); // in flight
    sender.drain().await;
    assert_eq!(attempts(&log, "a").len(), 1);
    sender.send(release("a")); // done: a new release runs again
    sender.drain().await;
    assert_eq!(attempts(&log, "a").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_backlog_of_failing_work_does_not_delay_later_releases() {
    let (sender, log) = worker(CAPACITY);
    let start = Instant::now();
    for i in 0..200 {
        sender.send(release(&format!("bad-{i}")));
    }
    sender.send(release("first"));
    // Later, while the failed ones retry.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sent = Instant::now();
    sender.send(release("second"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = attempts(&log, "first");
    let second = attempts(&log, "second");
    assert_eq!(first.len(), 1);
    assert_eq!(
        first,
        vec![start + Duration::from_millis(100)],
        "not delayed by the failing ones"
    );
    assert_eq!(
        second,
        vec![sent + Duration::from_millis(100)],
        "not delayed by the retries"
    );
}

#[tokio::test(start_paused = true)]
async fn failing_work_is_retried_on_a_timer_then_given_up() {
    let (sender, log) = worker(CAPACITY);
    let start = Instant::now();
    sender.send(release("bad"));
    sender.drain().await;
    let at: Vec<Duration> = attempts(&log, "bad").iter().map(|t| *t - start).collect();
    let ms = Duration::from_millis;
    assert_eq!(
        at,
        vec![ms(2_000), ms(4_050), ms(6_300), ms(9_300), ms(13_300)],
        "one attempt, then one after each wait"
    );
}

#[tokio::test(start_paused = true)]
async fn the_queue_is_bounded() {
    let (sender, log) = worker(4);
    for i in 0..10 {
        sender.send(release(&format!("t{i}")));
    }
    sender.drain().await;
    assert_eq!(log.lock().unwrap().len(), 4);
    sender.send(release("later")); // room again
    sender.drain().await;
    assert_eq!(attempts(&log, "later").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn work_sent_by_the_last_sender_still_runs() {
    let (sender, log) = worker(CAPACITY);
    sender.send(release("last"));
    drop(sender);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(attempts(&log, "last").len(), 1);
}

/// A switch to a new primary that comes as another attempt ends (both
/// ready when the worker next runs) still makes the retries due: each
/// round, "fail" has failed once (its retry due 50 ms later) when the
/// attempt at "switch" announces a switch and ends. Its retry must run at
/// the switch. (A worker that waited for the switch in a `select!` beside
/// the attempts, and was woken by the ending attempt, dropped the switch
/// about one time in two: the retry then waited for its timer, up to 2 s.)
#[tokio::test(start_paused = true)]
async fn a_switch_as_an_attempt_ends_makes_the_retries_due() {
    let switches = Arc::new(Notify::new());
    let log: Log = Arc::new(StdMutex::new(Vec::new()));
    let sender = start_with(CAPACITY, Some(switches.clone()), {
        let log = log.clone();
        move |work| {
            let (log, switches) = (log.clone(), switches.clone());
            async move {
                let token = token(&work);
                log.lock().unwrap().push((token.clone(), Instant::now()));
                if token.starts_with("fail") {
                    return Err(timed_out());
                }
                switches.notify_waiters(); // the client moved; this attempt ends
                Ok(())
            }
        }
    });
    for round in 0..16 {
        let fail = format!("fail-{round}");
        sender.send(release(&fail));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let switched = Instant::now();
        sender.send(release(&format!("switch-{round}")));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tries = attempts(&log, &fail);
        assert_eq!(
            tries.get(1).map(|at| *at - switched),
            Some(Duration::ZERO),
            "round {round}: the retry of {fail} did not run at the switch ({tries:?})"
        );
    }
}
