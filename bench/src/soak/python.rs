//! The Python workers ([`WorkerKind::Python`], [`WorkerKind::PythonFair`]):
//! the Python package's `Mutex` and `FairMutex` on the Rust workers' locks,
//! under the same faults, logging the same records (`worker_io.rs`) for the
//! same checker.
//!
//! A Python worker is started like any other (`soak-worker --kind py`), and
//! that process replaces itself (`exec`) with the venv's interpreter
//! running `python/bench/soak_worker.py` with the same arguments: the pid,
//! the process group and the proxy URL stay the worker's, so every fault
//! reaches the Python process itself.
//!
//! The interpreter is `REDBELL_PYTHON` if set, else `target/py-venv/bin/python`
//! of this checkout (`make test-python` creates it). Without it, or on a
//! topology the package cannot connect to, the soak skips the Python kinds
//! with a message ([`unavailable`]).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use super::plan::WorkerKind;
use super::worker_io::WorkerArgs;
use crate::fail::{EX_FAILURE, Failure};

/// This checkout's root (the bench crate's parent).
fn root() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    bench.parent().map_or(bench.clone(), PathBuf::from)
}

/// The Python interpreter of the workers.
pub fn interpreter() -> PathBuf {
    std::env::var_os("REDBELL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/py-venv/bin/python"))
}

/// The worker script.
fn script() -> PathBuf {
    root().join("python/bench/soak_worker.py")
}

/// Why the Python workers cannot run on `topology`, if they cannot: no
/// interpreter, no `redbell` package in it, or no connect function of the
/// package for the topology (`connect_sentinel`, `connect_cluster`).
pub fn unavailable(topology: &str) -> Option<String> {
    let python = interpreter();
    if !python.exists() {
        return Some(format!(
            "{} is missing (`make test-python` creates the venv; REDBELL_PYTHON names another)",
            python.display()
        ));
    }
    let connect = match topology {
        "sentinel" => "connect_sentinel",
        "cluster" => "connect_cluster",
        _ => "connect",
    };
    let check = format!("import sys, redbell; sys.exit(0 if hasattr(redbell, '{connect}') else 3)");
    match std::process::Command::new(&python)
        .args(["-c", &check])
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        Ok(s) if s.code() == Some(3) => Some(format!(
            "the redbell package of {} has no {connect}() for the {topology} topology",
            python.display()
        )),
        Ok(_) => Some(format!("{} cannot import redbell", python.display())),
        Err(e) => Some(format!("cannot run {}: {e}", python.display())),
    }
}

/// Replaces this process with the Python worker; returns only on failure.
pub fn exec(url: &str, args: &WorkerArgs) -> Failure {
    let kind = match args.kind {
        WorkerKind::PythonFair => "py-fair",
        _ => "py",
    };
    let mut cmd = std::process::Command::new(interpreter());
    cmd.arg(script())
        .env("REDIS_URL", url)
        .args(["--id", &args.id, "--kind", kind, "--lock", &args.lock])
        .arg("--log")
        .arg(&args.log)
        .arg("--stop-file")
        .arg(&args.stop_file)
        .args(["--hold-ms", &args.hold_ms.to_string()]);
    let t = &args.target;
    for (flag, value) in [
        ("--sentinels", &t.sentinels),
        ("--cluster", &t.cluster),
        ("--store-url", &t.store_url),
    ] {
        if let Some(v) = value {
            cmd.args([flag, v]);
        }
    }
    let e = cmd.exec();
    Failure::new(
        EX_FAILURE,
        format!("cannot run {}: {e}", interpreter().display()),
    )
}
