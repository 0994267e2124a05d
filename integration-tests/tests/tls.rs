//! TLS: locks, unlocks and a contended hand-off over `rediss://`, against
//! real TLS-only servers started by `scripts/redis/tls.sh` (a CA of its
//! own, a server and a client certificate made with openssl): one that
//! takes any client (`tls-auth-clients optional`) and one that requires a
//! client certificate (`tls-auth-clients yes`). Behind this crate's `tls`
//! feature (redbell's `tls-rustls`), which `make test` turns on:
//! `cargo test -p redbell-integration-tests --features tls --test tls`.
#![cfg(feature = "tls")]

use std::time::Duration;

use redbell::redis::{ClientTlsConfig, TlsCertificates};
use redbell::{Client, Error};
use redbell_integration_tests::{TlsServers, hand_off, promptly, unique};

/// The kit's two TLS servers ([`TlsServers`]), or a panic.
async fn tls_servers() -> TlsServers {
    TlsServers::start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// A PEM file `tls.sh` made.
fn pem(file: &str) -> Vec<u8> {
    let path = TlsServers::certificates_dir().join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Trust our CA; send the client certificate when `with_cert`.
fn certificates(with_cert: bool) -> TlsCertificates {
    TlsCertificates {
        root_cert: Some(pem("ca.crt")),
        client_tls: with_cert.then(|| ClientTlsConfig {
            client_cert: pem("client.crt"),
            client_key: pem("client.key"),
        }),
    }
}

async fn connect(url: &str, with_cert: bool) -> Result<Client, Error> {
    Client::builder(url)
        .tls(certificates(with_cert))
        .connect()
        .await
}

/// Locks and unlocks, then hands a held lock over to a parked waiter of
/// another client: the waiter gets it within a second of the unlock (its
/// wake-up came over the TLS pub/sub connection; the lease is 30 s).
async fn lock_unlock_and_hand_off(a: &Client, b: &Client) {
    let name = unique("tls");
    let first = promptly("lock over TLS", a.mutex(&name).lock())
        .await
        .expect("lock over TLS");
    let fence = first.fence();
    first.unlock().await.expect("unlock over TLS");
    let again = a.mutex(&name).lock().await.expect("lock again");
    assert!(again.fence() > fence, "fences increase");
    again.unlock().await.expect("unlock again");
    let handoff = hand_off(a, b).await;
    eprintln!("hand-off over TLS: {handoff:?}");
    assert!(
        handoff < Duration::from_secs(1),
        "the waiter got the lock {handoff:?} after the release: not woken, it waited out a park"
    );
}

/// Over `rediss://` with our own CA (no client certificate, on the server
/// that does not need one): lock, unlock and a contended hand-off work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_a_contended_hand_off_over_tls_with_a_custom_ca() {
    let servers = tls_servers().await;
    let a = connect(servers.optional_url(), false)
        .await
        .expect("connect a");
    let b = connect(servers.optional_url(), false)
        .await
        .expect("connect b");
    lock_unlock_and_hand_off(&a, &b).await;
    a.shutdown().await.expect("shutdown");
}

/// On the server that requires a client certificate, a client without one
/// cannot connect; with ours it locks, unlocks and hands off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_a_client_certificate() {
    let servers = tls_servers().await;
    let refused = promptly(
        "connecting without a certificate",
        connect(servers.required_url(), false),
    )
    .await;
    assert!(
        matches!(refused, Err(Error::Redis(_))),
        "a client without a certificate connected: {refused:?}"
    );
    let a = connect(servers.required_url(), true)
        .await
        .expect("connect a");
    let b = connect(servers.required_url(), true)
        .await
        .expect("connect b");
    lock_unlock_and_hand_off(&a, &b).await;
}

/// The server's certificate is checked: without our CA (the system's roots
/// only) the connection is refused, and certificates given for a
/// `redis://` URL are an error rather than a silent plaintext connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_certificate_is_verified() {
    let servers = tls_servers().await;
    let unknown_ca = promptly(
        "connecting without the CA",
        Client::connect(servers.optional_url()),
    )
    .await;
    assert!(
        matches!(unknown_ca, Err(Error::Redis(_))),
        "connected to a server whose CA is not trusted: {unknown_ca:?}"
    );
    let plain = servers.optional_url().replacen("rediss://", "redis://", 1);
    let mismatch = connect(&plain, false).await;
    assert!(
        matches!(&mismatch, Err(Error::Redis(e)) if e.to_string().contains("rediss")),
        "certificates for a redis:// URL: {mismatch:?}"
    );
}

/// The CLI over TLS: `--tls-ca`, and `--tls-cert`/`--tls-key` for the
/// server that requires a client certificate. Before these options the CLI
/// could not reach a TLS server with a CA of its own at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_a_command_under_a_lock_over_tls() {
    let servers = tls_servers().await;
    let dir = TlsServers::certificates_dir();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let run = |url: &str, with_cert: bool| {
        let mut cmd = std::process::Command::new(redbell_integration_tests::redbell_binary());
        cmd.args(["--url", url, "--tls-ca", &path("ca.crt")]);
        if with_cert {
            cmd.args([
                "--tls-cert",
                &path("client.crt"),
                "--tls-key",
                &path("client.key"),
            ]);
        }
        cmd.args(["run", &unique("tls-cli"), "--", "echo", "held"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run redbell")
    };
    let out = run(servers.optional_url(), false);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "held");
    let refused = run(servers.required_url(), false);
    assert_eq!(
        refused.status.code(),
        Some(69),
        "no client certificate: {refused:?}"
    );
    let out = run(servers.required_url(), true);
    assert!(out.status.success(), "with the client certificate: {out:?}");
}
