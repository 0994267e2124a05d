//! Starting `redbell run`'s command (the rest of its process group's
//! handling is shared with `elect`: `process/group.rs`).

use std::ffi::OsString;

use nix::unistd::Pid;

use super::RunArgs;
use crate::fail::Failure;
use crate::process::group::start;
use crate::process::guardian::Guardian;

/// Starts the command in a process group of its own, with `REDBELL_NAME`,
/// `REDBELL_TOKEN` and `REDBELL_FENCE` in its environment and no
/// credentials (`connect::strip_secrets`). Returns it and
/// its group; fails with 127 when the program is not found, 126 when it
/// cannot be executed. `guardian` learns of the group before the command
/// runs.
pub(super) fn spawn(
    args: &RunArgs,
    token: &str,
    fence: u64,
    guardian: &Guardian,
) -> Result<(tokio::process::Child, Pid), Failure> {
    let (program, mut command) = match &args.shell {
        Some(script) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(script);
            (OsString::from("sh"), c)
        }
        None => {
            // clap guarantees a non-empty argv when -c is absent.
            let program = args.argv.first().cloned().unwrap_or_default();
            let mut c = tokio::process::Command::new(&program);
            c.args(args.argv.get(1..).unwrap_or_default());
            (program, c)
        }
    };
    command
        .env("REDBELL_NAME", &args.name)
        .env("REDBELL_TOKEN", token)
        .env("REDBELL_FENCE", fence.to_string());
    crate::connect::strip_secrets(&mut command);
    start(command, &program, guardian)
}
