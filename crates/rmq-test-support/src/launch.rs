//! Spawning one `redis-server` child and waiting until it is ready.
//!
//! A launch either returns a ready, running child or an error; a failed
//! launch never leaves a process behind. Callers decide whether to retry
//! (new port on first start, same port on restart).

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::builder::{ServerConfig, LOG_FILE, STDIO_FILE};
use crate::probe::{probe, Probe};

/// Poll interval while waiting for readiness.
const POLL: Duration = Duration::from_millis(5);
/// Per-step timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// Why a launch failed.
#[derive(Debug)]
pub(crate) enum LaunchError {
    /// The binary could not be run at all; retrying is pointless.
    Spawn(String),
    /// The server did not become ready (port taken, crash, timeout).
    NotReady(String),
}

/// Spawns the server on `port` in `dir` and waits until it answers `PING`
/// with `+PONG` and reports our child's PID.
pub(crate) fn launch(config: &ServerConfig, port: u16, dir: &Path) -> Result<Child, LaunchError> {
    let stdio = open_stdio(dir).map_err(LaunchError::Spawn)?;
    let stderr = stdio
        .try_clone()
        .map_err(|e| LaunchError::Spawn(format!("cannot clone stdio log handle: {e}")))?;
    let mut child = Command::new(&config.binary)
        .args(config.args(port, dir))
        .stdin(Stdio::null())
        .stdout(stdio)
        .stderr(stderr)
        .spawn()
        .map_err(|e| {
            LaunchError::Spawn(format!(
                "cannot run {:?}: {e} (is redis-server installed? run scripts/ensure-deps.sh)",
                config.binary
            ))
        })?;
    match wait_ready(&mut child, port, config.startup_timeout) {
        Ok(()) => Ok(child),
        Err(e) => match reap(&mut child) {
            Ok(()) => Err(LaunchError::NotReady(e)),
            Err(stuck) => Err(LaunchError::Spawn(format!("{e}; {stuck}"))),
        },
    }
}

/// How long a SIGKILLed server may take to be gone before we say so.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// SIGKILLs the child (if still running) and reaps it, so that its PID is
/// gone for good. An error, naming the PID, if it has not exited
/// [`KILL_WAIT`] after SIGKILL: it would be left running.
pub(crate) fn reap(child: &mut Child) -> Result<(), String> {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
            Ok(None) => {
                return Err(format!(
                    "redis-server pid {} still runs {KILL_WAIT:?} after SIGKILL",
                    child.id()
                ))
            }
            Err(e) => return Err(format!("cannot reap redis-server pid {}: {e}", child.id())),
        }
    }
}

fn open_stdio(dir: &Path) -> Result<File, String> {
    let path = dir.join(STDIO_FILE);
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

fn wait_ready(child: &mut Child, port: u16, timeout: Duration) -> Result<(), String> {
    let mut deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "redis-server on port {port} exited early ({status})"
            ));
        }
        let last = match probe(port, PROBE_TIMEOUT) {
            Probe::Ready { pid } if pid == Some(child.id()) => return Ok(()),
            Probe::Ready { pid } => {
                return Err(format!(
                    "port {port} is answered by another process (pid {pid:?}), not our child {}",
                    child.id()
                ));
            }
            Probe::Loading => {
                // Loading the AOF is progress: do not time out meanwhile.
                deadline = deadline.max(Instant::now() + timeout);
                Probe::Loading
            }
            other => other,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "redis-server on port {port} not ready after {timeout:?} (last probe: {last:?})"
            ));
        }
        thread::sleep(POLL);
    }
}

/// The last `n` lines of a file in `dir` (empty if it does not exist).
pub(crate) fn tail(dir: &Path, file: &str, n: usize) -> String {
    let text = read_lossy(&dir.join(file));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A file's contents, lossily decoded; empty if it cannot be read.
pub(crate) fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Log excerpts for a panic message about the server in `dir`.
pub(crate) fn diagnostics(dir: &Path) -> String {
    format!(
        "--- {LOG_FILE} (last 60 lines) ---\n{}\n--- stdout/stderr ---\n{}\n---",
        tail(dir, LOG_FILE, 60),
        tail(dir, STDIO_FILE, 20)
    )
}
