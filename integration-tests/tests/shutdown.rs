//! `Client::shutdown` (issue 16): a guard dropped just before `main`
//! returns is released only if the program waits for the client's
//! background work. Runs the `drop_and_exit` program of this crate. So is
//! a dropped `Leadership`'s resignation (issue 30), wherever it is dropped.

use std::process::{Command, Output};
use std::time::Duration;

use redbell_integration_tests::{
    client, del, exists, lock_key, log_output, promptly, pttl, raw, redis_url, unique,
};

/// Runs `drop_and_exit NAME [--shutdown]` against the shared server.
fn drop_and_exit(name: &str, shutdown: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_drop_and_exit"));
    cmd.arg(name).env("REDIS_URL", redis_url());
    if shutdown {
        cmd.arg("--shutdown");
    }
    let out = cmd.output().expect("run drop_and_exit");
    log_output(
        if shutdown {
            "with shutdown"
        } else {
            "without shutdown"
        },
        &out,
    );
    assert!(
        out.status.success(),
        "drop_and_exit failed: {:?}",
        out.status
    );
    out
}

/// With `shutdown().await` before returning, the key is gone the moment the
/// process has exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_completes_the_release_of_a_dropped_guard() {
    let name = unique("shutdown");
    let key = lock_key(&name);
    let mut conn = raw(&redis_url()).await;
    drop_and_exit(&name, true);
    assert!(
        !exists(&mut conn, &key).await,
        "the key is still held after the process shut its client down and exited (pttl {} ms)",
        pttl(&mut conn, &key).await
    );
}

/// Today's behaviour without it, as documented on `Client`: the release
/// queued by the drop dies with the runtime, and the key stays held until
/// its lease (30 s by default) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_shutdown_the_release_dies_with_the_runtime() {
    let name = unique("no-shutdown");
    let key = lock_key(&name);
    let mut conn = raw(&redis_url()).await;
    drop_and_exit(&name, false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ttl = pttl(&mut conn, &key).await;
    assert!(
        ttl > 20_000,
        "expected the key left held with most of its 30 s lease; pttl {ttl} ms"
    );
    del(&mut conn, &[&key]).await;
}

/// A `Leadership` dropped where no runtime is (a plain thread, as when a
/// value is dropped by a thread pool that is not Tokio's) still resigns,
/// and `shutdown()` waits for it: the leader key no longer names it and
/// the lock is free. The resignation used to run on a bare `tokio::spawn`,
/// skipped without a runtime at hand, and never waited for by `shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_dropped_off_the_runtime_resigns_before_shutdown_returns() {
    let c = client(&redis_url()).await;
    let name = unique("shutdown-leader");
    let (key, leader) = (lock_key(&name), format!("{}:leader", lock_key(&name)));
    let leadership = promptly("campaign", c.election(&name).campaign("v"))
        .await
        .expect("campaign");
    let term = leadership.term();
    std::thread::spawn(move || drop(leadership))
        .join()
        .expect("the dropping thread");
    promptly("shutdown", c.shutdown()).await.expect("shutdown");
    let mut conn = raw(&redis_url()).await;
    let token: Option<String> = redis::cmd("HGET")
        .arg(&leader)
        .arg("token")
        .query_async(&mut conn)
        .await
        .expect("HGET the leader key");
    assert_eq!(
        token.as_deref().unwrap_or(""),
        "",
        "the leader key still names the dropped leader of term {term} after shutdown"
    );
    assert!(
        !exists(&mut conn, &key).await,
        "the election's lock is still held after shutdown (pttl {} ms)",
        pttl(&mut conn, &key).await
    );
    del(&mut conn, &[&leader]).await;
}
