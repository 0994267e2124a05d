//! A wake channel's subscription lingers after its last waiter left (so a
//! hot lock does not SUBSCRIBE and UNSUBSCRIBE on every acquisition), and
//! then goes. The linger sweep looks only at the channels whose last waiter
//! left (issue 32: a sweep of every channel, ten times a second, held the
//! lock each wake-up's dispatch takes for a time growing with the channels
//! waited on); these check that every idle channel still goes, once per
//! idle spell, while other channels stay in use.

use std::time::Duration;

use redbell_integration_tests::{client, raw, redis_url, subscribers, unique};

const LINGER: Duration = Duration::from_millis(200);
/// Far beyond the linger and the sweep's 100 ms tick, on a loaded machine.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// Parks one waiter of `waiters` on `name`, held by `holder`, then lets it
/// take the lock and release it: its client's channel is then idle.
async fn wait_once(holder: &redbell::Client, waiters: &redbell::Client, name: &str) {
    let guard = holder.mutex(name).lock().await.expect("holder locks");
    let m = waiters.mutex(name);
    let task = tokio::spawn(async move { m.lock().await?.unlock().await });
    let mut conn = raw(&redis_url()).await;
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    while subscribers(&mut conn, name).await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter on {name} never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.unlock().await.expect("holder unlocks");
    tokio::time::timeout(GONE_WITHIN, task)
        .await
        .expect("the waiter was not served")
        .expect("task")
        .expect("the waiter locks and unlocks");
}

/// Waits until nobody is subscribed to `name`'s channels.
async fn unsubscribed(name: &str) -> bool {
    let mut conn = raw(&redis_url()).await;
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    while subscribers(&mut conn, name).await > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_channels_are_unsubscribed_after_the_linger_each_time() {
    let url = redis_url();
    let holder = client(&url).await;
    let waiters = redbell::Client::builder(url.as_str())
        .subscription_linger(LINGER)
        .connect()
        .await
        .expect("connects");
    // Channels in use the whole time: the sweep must leave them alone.
    let busy: Vec<String> = (0..50)
        .map(|i| unique(&format!("linger-busy-{i}")))
        .collect();
    let mut held = Vec::new();
    let mut parked = Vec::new();
    for name in &busy {
        held.push(holder.mutex(name).lock().await.expect("holder locks"));
        let m = waiters.mutex(name);
        parked.push(tokio::spawn(async move { m.lock().await?.unlock().await }));
    }

    let names: Vec<String> = (0..5).map(|i| unique(&format!("linger-{i}"))).collect();
    for round in 0..2 {
        for name in &names {
            wait_once(&holder, &waiters, name).await;
        }
        for name in &names {
            assert!(
                unsubscribed(name).await,
                "round {round}: the idle channel of {name} was still subscribed after {GONE_WITHIN:?}"
            );
        }
    }
    let mut conn = raw(&url).await;
    for name in &busy {
        assert_eq!(
            subscribers(&mut conn, name).await,
            1,
            "the channel of {name}, still waited on, lost its subscription"
        );
    }
    for guard in held {
        guard.unlock().await.expect("holder unlocks");
    }
    for task in parked {
        tokio::time::timeout(GONE_WITHIN, task)
            .await
            .expect("a busy waiter was not served")
            .expect("task")
            .expect("locks and unlocks");
    }
}
