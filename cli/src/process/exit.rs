//! How `run` and `elect` end: redbell's exit code from the command's, and
//! the last releases sent before the process exits.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

use crate::fail::{EX_FAILURE, EX_TEMPFAIL, Failure};

/// Redbell's exit code once the command has ended: 75 when the lease (or
/// the leadership) was lost meanwhile, else the command's own.
pub(crate) fn code(lost: bool, status: io::Result<ExitStatus>) -> u8 {
    if lost {
        return EX_TEMPFAIL;
    }
    match status {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("redbell: could not wait for the command: {e}");
            EX_FAILURE
        }
    }
}

/// The command's exit code, or 128 + the signal that killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EX_FAILURE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(EX_FAILURE),
        (None, None) => EX_FAILURE,
    }
}

/// The exit code of `redbell` ended by `sig` before its command ran.
pub(crate) fn signal_exit_code(sig: Signal) -> u8 {
    u8::try_from(128 + sig as i32).unwrap_or(EX_FAILURE)
}

/// Ends `run` or `elect` once their command is done: completes the
/// releases still queued (an acquire cancelled in flight, a resignation),
/// then returns for exit code 0 or exits the process with `outcome`'s code
/// (everything is cleaned up by then: the lock released, the group gone).
pub(crate) async fn finish(
    client: &redbell::Client,
    outcome: Result<u8, Failure>,
) -> Result<(), Failure> {
    if let Err(e) = client.shutdown().await {
        eprintln!("redbell: pending releases did not finish ({e}); their leases free them");
    }
    match outcome? {
        0 => Ok(()),
        code => std::process::exit(i32::from(code)),
    }
}
