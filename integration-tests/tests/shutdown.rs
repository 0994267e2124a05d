//! `Client::shutdown` (issue 16): a guard dropped just before `main`
//! returns is released only if the program waits for the client's
//! background work. Runs the `drop_and_exit` program of this crate.

use std::process::{Command, Output};
use std::time::Duration;

use redbell_integration_tests::{del, exists, lock_key, log_output, pttl, raw, redis_url, unique};

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
