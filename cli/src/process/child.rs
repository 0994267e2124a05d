//! Starting the command of `run` or `elect`: in a process group of its own,
//! enrolled with the guardian before it execs, with the environment the
//! subcommand gives it and no credentials (`connect::strip_secrets`).

use std::ffi::{OsStr, OsString};

use nix::unistd::Pid;

use super::guardian::Guardian;
use crate::fail::Failure;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Program<'a> {
    /// A program and its arguments (clap guarantees at least the program).
    Argv(&'a [OsString]),
    /// `sh -c SCRIPT` (`run -c`).
    Shell(&'a str),
}

/// Starts `program` in a process group of its own with `env` added to its
/// environment; returns it and its group. `guardian` learns of the group
/// before the command runs. Fails with 127 when the program is not found,
/// 126 when it cannot be executed.
pub(crate) fn spawn(
    program: Program<'_>,
    env: &[(&str, String)],
    guardian: &Guardian,
) -> Result<(tokio::process::Child, Pid), Failure> {
    let (name, mut command) = match program {
        Program::Shell(script) => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(script);
            (OsString::from("sh"), c)
        }
        Program::Argv(argv) => {
            let name = argv.first().cloned().unwrap_or_default();
            let mut c = tokio::process::Command::new(&name);
            c.args(argv.get(1..).unwrap_or_default());
            (name, c)
        }
    };
    command.envs(env.iter().map(|(k, v)| (k, v)));
    crate::connect::strip_secrets(&mut command);
    start(command, &name, guardian)
}

fn start(
    mut command: tokio::process::Command,
    program: &OsStr,
    guardian: &Guardian,
) -> Result<(tokio::process::Child, Pid), Failure> {
    command.process_group(0);
    guardian.enroll(&mut command);
    let child = command.spawn().map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Failure::new(code, format!("cannot run {program:?}: {e}"))
    })?;
    // A spawned child has an id until it has been waited for.
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    Ok((child, Pid::from_raw(pid)))
}
