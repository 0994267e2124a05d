//! The CLI as an operator configures it (issue 31): credentials outside
//! argv (`REDBELL_PASSWORD`, `--password-file`), a `REDBELL_*` variable for
//! every global flag, Sentinel with `requirepass` on the primary and the
//! sentinels, no credential in the command's environment, and the exit
//! code table row by row (77 a refused login or an ACL denial, 78 a bad
//! database or a certificate that does not verify).
//!
//! Through the real `redbell` binary, against real servers: the shared one
//! (`REDIS_URL`), a private one with `requirepass`, a Sentinel topology of
//! `scripts/redis/sentinel.sh --requirepass --sentinel-pass`, and (with
//! the `tls` feature) the TLS servers of `scripts/redis/tls.sh`.

use std::path::Path;
use std::process::{Child, Output};
use std::time::Duration;

use redbell_integration_tests::acl::User;
use redbell_integration_tests::cli::{
    code, finish, kill, redbell, run, scratch, stderr, stdout, wait_for_file,
};
use redbell_integration_tests::sentinel::{MASTER, Topology, free_layout_base};
use redbell_integration_tests::{PrivateRedis, free_port, lock_key};
use serde_json::Value;

const PW: &str = "primary-secret";
const SPW: &str = "sentinel-secret";

/// A name no other test uses: `ops-what-<uuid>`.
fn unique(what: &str) -> String {
    redbell_integration_tests::unique(&format!("ops-{what}"))
}

/// `redbell ARGS...` with the variables `env` set (over `REDIS_URL`, which
/// the helper sets to the shared server), run to completion.
fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = redbell(args);
    cmd.envs(env.iter().copied());
    finish(
        cmd.spawn().expect("redbell starts"),
        Duration::from_secs(60),
        &format!(
            "redbell {args:?} with {:?}",
            env.iter().map(|(k, _)| k).collect::<Vec<_>>()
        ),
    )
}

/// A `run` holder that writes its token and then its whole environment to
/// `dir`, and sleeps until killed; the token.
fn holder(args: &[&str], env: &[(&str, &str)], dir: &Path) -> (Child, String) {
    let script = format!(
        "env > '{0}/env.tmp'; mv '{0}/env.tmp' '{0}/env'; echo \"$REDBELL_TOKEN\" > '{0}/token'; \
         exec sleep 60",
        dir.display()
    );
    let mut cmd = redbell(&[args, &["-c", &script]].concat());
    cmd.envs(env.iter().copied());
    let child = cmd.spawn().expect("redbell starts");
    let token = wait_for_file(&dir.join("token"), Duration::from_secs(30));
    (child, token.trim().to_owned())
}

/// Asserts `out` exited `expected`, with `what` in the message.
fn assert_exit(out: &Output, expected: i32, what: &str) {
    assert_eq!(
        code(out),
        expected,
        "{what}: exit code (stderr: {})",
        stderr(out).trim()
    );
}

/// The command's environment as `holder` wrote it: no password in it.
fn assert_no_secret(dir: &Path, secrets: &[&str]) {
    let env = std::fs::read_to_string(dir.join("env")).expect("the command's environment");
    for secret in secrets {
        assert!(
            !env.contains(secret),
            "the command's environment carries the password {secret:?}:\n{env}"
        );
    }
    assert!(
        env.contains("REDBELL_TOKEN="),
        "not the command's env: {env}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn password_from_env_or_file_never_reaches_the_command() {
    let server = PrivateRedis::start_with_password(PW).await;
    let plain = server.url_without_password();
    let name = unique("pw");

    // REDBELL_URL without a password, REDBELL_PASSWORD beside it.
    let dir = scratch();
    let env = [("REDBELL_URL", plain.as_str()), ("REDBELL_PASSWORD", PW)];
    let (child, token) = holder(&["run", "--ttl", "5s", &name], &env, &dir);
    let mut conn = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("the private server");
    let on_server: Option<String> = redis::cmd("GET")
        .arg(lock_key(&name))
        .query(&mut conn)
        .expect("GET");
    assert_eq!(
        on_server.as_deref(),
        Some(token.as_str()),
        "held on the private server"
    );
    assert_no_secret(&dir, &[PW]);

    // --password-file, REDIS_URL without a password: sees the holder.
    let file = dir.join("password");
    std::fs::write(&file, format!("{PW}\n")).expect("write the password file");
    let file = file.to_str().expect("utf-8 path");
    let out = run_env(
        &["--password-file", file, "status", "--json", &name],
        &[("REDIS_URL", plain.as_str())],
    );
    assert_exit(&out, 0, "status with --password-file");
    let s: Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(s["holder"], token.as_str(), "{s}");
    kill("TERM", child.id());
    assert_exit(
        &finish(child, Duration::from_secs(30), "holder"),
        143,
        "holder",
    );

    // The password in REDIS_URL, as before: the command does not inherit it.
    let dir = scratch();
    let with_pw = server.url();
    let (child, _) = holder(
        &["run", "--ttl", "5s", &name],
        &[("REDIS_URL", with_pw.as_str())],
        &dir,
    );
    assert_no_secret(&dir, &[PW]);
    kill("TERM", child.id());
    finish(child, Duration::from_secs(30), "holder with REDIS_URL");

    // No password, a wrong one: 77, not 1 ("held elsewhere").
    let out = run_env(
        &["run", "-n", &name, "true"],
        &[("REDIS_URL", plain.as_str())],
    );
    assert_exit(&out, 77, "no password");
    let out = run_env(
        &["run", "-n", &name, "true"],
        &[
            ("REDBELL_URL", plain.as_str()),
            ("REDBELL_PASSWORD", "wrong"),
        ],
    );
    assert_exit(&out, 77, "a wrong password");
    assert!(
        !stderr(&out).contains("wrong"),
        "the password printed: {}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_requirepass_from_the_environment() {
    let base = free_layout_base();
    let (_topo, urls) =
        Topology::start_at(base, &["--requirepass", PW, "--sentinel-pass", SPW]).await;
    // The sentinels' URLs without their password: it comes from the env.
    let sentinels = urls
        .iter()
        .map(|u| u.replace(&format!(":{SPW}@"), ""))
        .collect::<Vec<_>>()
        .join(",");
    assert!(!sentinels.contains(SPW), "{sentinels}");
    let env = [
        ("REDBELL_SENTINEL", sentinels.as_str()),
        ("REDBELL_MASTER", MASTER),
        ("REDBELL_SENTINEL_PASSWORD", SPW),
        ("REDBELL_PASSWORD", PW),
        ("REDBELL_DB", "2"),
    ];
    let name = unique("sentinel");
    let dir = scratch();
    let (child, token) = holder(&["run", "--ttl", "5s", &name], &env, &dir);
    // In database 2 of the primary the sentinels name (its first port).
    let mut primary = redis::Client::open(format!("redis://:{PW}@127.0.0.1:{base}/2"))
        .and_then(|c| c.get_connection())
        .expect("the primary");
    let held: Option<String> = redis::cmd("GET")
        .arg(lock_key(&name))
        .query(&mut primary)
        .expect("GET");
    assert_eq!(
        held.as_deref(),
        Some(token.as_str()),
        "the lock in db 2 of the primary"
    );
    assert_no_secret(&dir, &[PW, SPW]);

    // The flags as well as the variables: the passwords only from the env.
    let out = run_env(
        &[
            "--sentinel",
            &sentinels,
            "--master",
            MASTER,
            "--db",
            "2",
            "status",
            "--json",
            &name,
        ],
        &[("REDBELL_PASSWORD", PW), ("REDBELL_SENTINEL_PASSWORD", SPW)],
    );
    assert_exit(&out, 0, "status through the sentinels");
    let s: Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(s["holder"], token.as_str(), "{s}");
    // Without the primary's password: a refused login.
    let out = run_env(
        &[
            "--sentinel",
            &sentinels,
            "--master",
            MASTER,
            "status",
            &name,
        ],
        &[("REDBELL_SENTINEL_PASSWORD", SPW)],
    );
    assert_exit(&out, 77, "no primary password");
    kill("TERM", child.id());
    assert_exit(
        &finish(child, Duration::from_secs(30), "holder"),
        143,
        "holder",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_row_by_row() {
    let name = unique("codes");
    // 0, and 1: held elsewhere.
    let dir = scratch();
    let (child, _) = holder(&["run", "--ttl", "5s", &name], &[], &dir);
    assert_exit(&run(&["run", "-n", &name, "true"]), 1, "held elsewhere");
    // 2: usage, and a name in use as another kind of lock.
    assert_exit(&run(&["run", "--bogus", &name, "true"]), 2, "a bad flag");
    assert_exit(
        &run(&["run", "--permits", "2", &name, "true"]),
        2,
        "a kind conflict",
    );
    // 75: the lease broken while the command ran.
    assert_exit(&run(&["unlock", "--force", &name]), 0, "unlock --force");
    assert_exit(
        &finish(child, Duration::from_secs(30), "holder"),
        75,
        "lease lost",
    );
    // 126, 127, 128+N.
    let other = unique("codes-cmd");
    let plain_file = scratch().join("not-executable");
    std::fs::write(&plain_file, "true\n").expect("write a file (mode 0644)");
    let plain_file = plain_file.to_str().expect("utf-8 path");
    assert_exit(&run(&["run", &other, plain_file]), 126, "not executable");
    assert_exit(&run(&["run", &other, "/nonexistent/cmd"]), 127, "not found");
    assert_exit(
        &run(&["run", &other, "-c", "kill -TERM $$"]),
        143,
        "killed by SIGTERM",
    );
    // 69: nothing listens.
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    assert_exit(
        &run(&["--url", &nobody, "status", &other]),
        69,
        "unreachable",
    );
    // 77: an ACL user denied the lock's keys (credentials in the URL, as
    // before; and as --user with REDBELL_PASSWORD).
    let user = User::create("+@all ~someone-else:* &*").await;
    let url = redbell_integration_tests::redis_url();
    let host = url.split("://").nth(1).and_then(|r| r.split('/').next());
    let host = host.expect("REDIS_URL is redis://host:port").to_owned();
    let in_url = format!("redis://{}:{}@{host}", user.name(), user.password());
    let out = run(&["--url", &in_url, "run", "-n", &other, "true"]);
    assert_exit(&out, 77, "an ACL denial");
    let out = run_env(
        &["--user", user.name(), "run", "-n", &other, "true"],
        &[("REDBELL_PASSWORD", user.password())],
    );
    assert_exit(&out, 77, "an ACL denial (--user)");
    // 78: a database the server does not have.
    let out = run(&["--db", "12345", "status", &other]);
    assert_exit(&out, 78, "a bad --db");
    let bad_db = format!("redis://{host}/12345");
    assert_exit(&run(&["--url", &bad_db, "status", &other]), 78, "a bad /db");
    // The table, in `redbell --help`.
    let help = stdout(&run(&["--help"]));
    for row in ["69 ", "75 ", "77 ", "78 ", "126/127", "128+N"] {
        assert!(
            help.contains(row),
            "`redbell --help` lacks the row {row:?}:\n{help}"
        );
    }
}

#[test]
fn a_lease_below_the_floor_is_refused_and_durations_print_rounded() {
    let name = unique("ttl");
    let out = run(&["run", "--ttl", "10ms", &name, "--", "sleep", "1"]);
    assert_exit(&out, 2, "--ttl 10ms");
    let err = stderr(&out);
    assert!(err.contains("10ms") && err.contains("at least 1s"), "{err}");
    // The grace cut to a third of the lease, printed rounded.
    let out = run(&[
        "run",
        "-v",
        "--ttl",
        "1s",
        "--kill-grace",
        "5s",
        &name,
        "true",
    ]);
    assert_exit(&out, 0, "--ttl 1s");
    let err = stderr(&out);
    assert!(err.contains("cut to 333.3ms"), "not rounded: {err}");
}

/// A TLS server whose CA the client does not know: 78, no retry mends it.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_certificate_authority_is_a_configuration_error() {
    let servers = redbell_integration_tests::TlsServers::start()
        .await
        .expect("tls.sh");
    let url = servers.optional_url().to_owned();
    let name = unique("tls");
    let out = run(&["--url", &url, "status", &name]);
    assert_exit(&out, 78, "an unknown CA");
    // With the CA: it works (so the 78 above was the certificate's).
    let ca = redbell_integration_tests::TlsServers::certificates_dir().join("ca.crt");
    let out = run(&[
        "--url",
        &url,
        "--tls-ca",
        ca.to_str().expect("utf-8"),
        "status",
        &name,
    ]);
    assert_exit(&out, 0, "with --tls-ca");
}

/// `--tls-insecure` (like `redis-cli --insecure`) reaches the TLS server
/// whose CA is unknown, with a warning on stderr; so does a URL ending in
/// `#insecure`, which before gave a redis-rs message about a build feature
/// that a CLI user cannot act on. On a `redis://` URL the flag is a usage
/// error.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread")]
async fn tls_insecure_skips_the_certificate_check_with_a_warning() {
    let servers = redbell_integration_tests::TlsServers::start()
        .await
        .expect("tls.sh");
    let url = servers.optional_url().to_owned();
    let name = unique("tls-insecure");
    let out = run(&["--url", &url, "status", &name]);
    assert_exit(&out, 78, "no flag");
    assert!(
        stderr(&out).contains("--tls-insecure"),
        "no hint: {}",
        stderr(&out)
    );
    let warned = |out: &Output| {
        let err = stderr(out);
        assert!(
            err.contains("warning") && err.contains("not verified"),
            "no warning: {err}"
        );
    };
    let out = run(&["--url", &url, "--tls-insecure", "status", &name]);
    assert_exit(&out, 0, "--tls-insecure");
    warned(&out);
    let out = run_env(
        &["status", &name],
        &[("REDBELL_URL", &url), ("REDBELL_TLS_INSECURE", "1")],
    );
    assert_exit(&out, 0, "REDBELL_TLS_INSECURE=1");
    warned(&out);
    let out = run(&["--url", &format!("{url}#insecure"), "status", &name]);
    assert_exit(&out, 0, "a #insecure URL");
    warned(&out);
    let plain = run(&["--tls-insecure", "status", &name]); // REDIS_URL: redis://
    assert_exit(&plain, 2, "--tls-insecure on a redis:// URL");
    assert!(stderr(&plain).contains("rediss://"), "{}", stderr(&plain));
}
