//! An acquire whose bytes reached Redis, whose connection then failed
//! before the reply, and whose retry was refused at connect: the lock was
//! taken, so the client must release it in the background once Redis is
//! reachable again, not leave it held by nobody until its lease ends.
//! (Only an acquire refused at connect, never sent, may skip that release.)

use std::time::Duration;

use redbell::Error;
use redbell_integration_tests::{
    PrivateRedis, Proxy, client, eventually, exists, get, lock_key, raw, unique, warm_up,
};
use tokio::time::timeout;

/// The lease of the lock taken under the cut: the ghost would stand this long.
const GHOST_LEASE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cut_after_it_ran_is_released_once_redis_is_back() {
    let redis = PrivateRedis::start().await;
    let proxy = Proxy::start(0, redis.port()).await.expect("a proxy");
    let port = proxy.port();
    let c = client(&proxy.url()).await;
    warm_up(&c).await; // the scripts are cached: the acquire runs as sent
    let mut admin = raw(&redis.url()).await;
    let name = unique("cut-after-run");

    // The replies are held back: the acquire reaches Redis and runs there,
    // its reply stays in the proxy.
    proxy.pause().await;
    let mutex = c.mutex(&name).with_lease(GHOST_LEASE);
    let attempt = tokio::spawn(async move { mutex.lock().await });
    let ran = eventually(Duration::from_secs(5), || {
        let mut admin = admin.clone();
        let key = lock_key(&name);
        async move { exists(&mut admin, &key).await }
    })
    .await;
    assert!(ran, "the acquire never reached Redis");
    let token = get(&mut admin, &lock_key(&name)).await;

    // Its connection dropped with the reply; new connections refused.
    proxy.cut().await.expect("cut the proxy");
    let e = timeout(Duration::from_secs(15), attempt)
        .await
        .expect("the lock() hung")
        .expect("the lock() panicked")
        .expect_err("got the lock through a cut proxy");
    eprintln!("the acquire failed with {e:?}");
    assert!(
        !matches!(&e, Error::Redis(r) if r.is_connection_refusal()),
        "an acquire that ran on Redis reported a refusal at connect: {e:?}"
    );

    // Redis reachable again at the same address: the background release
    // of the acquire's token runs there (its retries span 3.3 s).
    let back = Proxy::start(port, redis.port())
        .await
        .expect("the proxy back");
    let released = eventually(Duration::from_secs(10), || {
        let mut admin = admin.clone();
        let key = lock_key(&name);
        async move { !exists(&mut admin, &key).await }
    })
    .await;
    assert!(
        released,
        "the lock taken by the cut acquire ({token:?}) is still held: no release was queued, and \
         it stands for its {GHOST_LEASE:?} lease"
    );
    // And the client works there again.
    c.mutex(&name)
        .lock_timeout(Duration::from_secs(10))
        .await
        .expect("the lock after the cut")
        .unlock()
        .await
        .expect("the unlock after the cut");
    drop(back);
}
