//! Where things are: the shared test server, the built binaries of the
//! workspace, and the scripts under `scripts/redis/` run to the end.

use std::path::PathBuf;
use std::process::Output;

/// The shared test server's URL, from `REDIS_URL`.
///
/// # Panics
///
/// When `REDIS_URL` is unset: run the tests with `make test`, or start a
/// server with `scripts/redis/start.sh` and export the URL it prints.
pub fn redis_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "REDIS_URL is not set: the integration tests need a real Redis. Run `make test`, \
             or `export REDIS_URL=$(scripts/redis/start.sh)` and then `cargo test`"
        ),
    }
}

/// The port of the shared test server ([`redis_url`]; 6379 if the URL
/// names none), for a [`Proxy`](crate::Proxy) in front of it.
///
/// # Panics
///
/// As [`redis_url`], or when the port is not a number.
pub fn redis_port() -> u16 {
    let url = redis_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or(rest);
    let port = host_port.rsplit_once(':').map_or("6379", |(_, p)| p);
    port.parse().expect("a port in REDIS_URL")
}

/// `<target>/debug/<name>` (`name` may be `examples/<example>`):
/// `CARGO_TARGET_DIR` if set (an absolute dir replaces the base), else the
/// workspace's `target/`.
///
/// # Panics
///
/// When it has not been built.
pub fn built_binary(name: &str) -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins --examples` first (`make test` does)",
        path.display()
    );
    path
}

/// The built `redbell` binary ([`built_binary`]).
pub fn redbell_binary() -> PathBuf {
    built_binary("redbell")
}

/// Prints a finished process's status and output to stderr, headed
/// `--- what`, for the test's log.
pub fn log_output(what: &str, out: &Output) {
    eprintln!(
        "--- {what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the kit's [`redis_script`](redbell_testkit::redis_script) to the
/// end; what it printed on stdout.
///
/// # Panics
///
/// When it cannot be run or fails (with its stderr).
pub async fn run_redis_script(script: &str, action: &str, base: u16) -> String {
    redbell_testkit::run_redis_script(script, action, base, &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
