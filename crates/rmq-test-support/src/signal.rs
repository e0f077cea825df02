//! Sending POSIX signals to a child by its PID.
//!
//! Uses the `kill` utility through [`std::process::Command`] so that the
//! crate needs neither `libc` nor `unsafe` code. `SIGKILL` is sent with
//! [`std::process::Child::kill`] instead and does not go through here.

use std::process::{Command, Stdio};

/// A signal this crate sends with `kill -<NAME> <pid>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Stop,
    Cont,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
        }
    }
}

/// Sends `signal` to the process `pid`.
///
/// The caller must hold an unreaped `Child` for `pid`, so the PID cannot
/// have been reused by an unrelated process.
///
/// # Panics
///
/// Panics if the `kill` utility cannot be run. A failing `kill` (the process
/// is already gone) is ignored.
pub(crate) fn send(pid: u32, signal: Signal) {
    let status = Command::new("kill")
        .arg(format!("-{}", signal.name()))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{} {pid}`: {e}", signal.name()));
    // A non-zero status means the process no longer exists (it may be a
    // zombie about to be reaped); nothing to do then.
    let _ = status;
}
