//! [`RedisServer`]: one throwaway `redis-server` child process.
//!
//! The child is held in a mutex so that `&self` methods (`pause`, `resume`,
//! `is_running`, `pid`) can check it has not been reaped before signalling
//! its PID: an unreaped child's PID cannot be reused by another process.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Child;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::builder::{RedisServerBuilder, ServerConfig, LOG_FILE};
use crate::launch::{diagnostics, launch, read_lossy, reap, tail, LaunchError};
use crate::port::free_port;
use crate::probe::{probe, Probe};
use crate::signal::{send, Signal};

/// Start-up attempts on first start, each on a new port.
const START_ATTEMPTS: u32 = 10;
/// Start-up attempts on restart, all on the same port.
const RESTART_ATTEMPTS: u32 = 5;
/// How long [`RedisServer::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A `redis-server` on `127.0.0.1:<port>` with its own temporary directory.
///
/// Dropping it SIGKILLs the process by PID, waits until it is reaped (its
/// PID gone) and deletes the directory, also while a test panics; if the
/// thread is panicking, the tail of the server log is printed to stderr.
#[derive(Debug)]
pub struct RedisServer {
    child: Mutex<Option<Child>>,
    port: u16,
    config: ServerConfig,
    // Last field: removed only after the child is gone.
    dir: TempDir,
}

impl RedisServer {
    /// A builder for a server with non-default settings.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Starts a server with the default settings (`builder().start()`).
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    pub(crate) fn start_with(config: ServerConfig) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("rmq-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create temp dir for redis-server: {e}"));
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            match launch(&config, port, dir.path()) {
                Ok(child) => {
                    return RedisServer {
                        child: Mutex::new(Some(child)),
                        port,
                        config,
                        dir,
                    }
                }
                Err(LaunchError::Spawn(e)) => panic!("{e}"),
                Err(LaunchError::NotReady(e)) => failures.push(format!("attempt {attempt}: {e}")),
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts:\n{}\n{}",
            failures.join("\n"),
            diagnostics(dir.path())
        );
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's TCP port (stable across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's socket address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The PID of the running process; `None` while stopped or exited.
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.lock();
        running(&mut guard).map(|c| c.id())
    }

    /// The server's temporary directory (its AOF and log live here).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process is running (a paused process counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether the server answers `PING` with `+PONG` within one second.
    pub fn ping(&self) -> bool {
        matches!(
            probe(self.port, Duration::from_secs(1)),
            Probe::Ready { .. }
        )
    }

    /// The contents of the server log file.
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join(LOG_FILE))
    }

    /// SIGKILLs the process and reaps it. No-op when stopped.
    ///
    /// # Panics
    ///
    /// Panics if the process has not exited 10 s after SIGKILL (it would
    /// be left running); while already panicking, says so on stderr.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.lock().take() {
            reap_or_panic(&mut child);
        }
    }

    /// Stops gracefully: SIGTERM (plus SIGCONT in case it is paused), waits
    /// up to 5 s for it to exit, then SIGKILLs it. No-op when stopped.
    pub fn stop(&mut self) {
        let Some(mut child) = self.lock().take() else {
            return;
        };
        if let Ok(None) = child.try_wait() {
            send(child.id(), Signal::Term);
            send(child.id(), Signal::Cont);
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline {
                if !matches!(child.try_wait(), Ok(None)) {
                    break;
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
        reap_or_panic(&mut child);
    }

    /// Starts the server again on the same port and directory (reloading the
    /// AOF when enabled) and waits until it answers `PING`, i.e. until
    /// loading has finished. A running server is [`stop`](Self::stop)ped first.
    ///
    /// # Panics
    ///
    /// Panics with the server log if it cannot start after a few attempts.
    pub fn restart(&mut self) {
        self.stop();
        let mut failures = Vec::new();
        for attempt in 1..=RESTART_ATTEMPTS {
            match launch(&self.config, self.port, self.dir.path()) {
                Ok(child) => {
                    *self.lock() = Some(child);
                    return;
                }
                Err(LaunchError::Spawn(e)) => panic!("{e}"),
                Err(LaunchError::NotReady(e)) => {
                    failures.push(format!("attempt {attempt}: {e}"));
                    thread::sleep(Duration::from_millis(50 * u64::from(attempt)));
                }
            }
        }
        panic!(
            "redis-server did not restart on port {} after {RESTART_ATTEMPTS} attempts:\n{}\n{}",
            self.port,
            failures.join("\n"),
            diagnostics(self.dir.path())
        );
    }

    /// Freezes the process with SIGSTOP (connections hang, nothing answers).
    /// No-op when stopped.
    pub fn pause(&self) {
        self.signal(Signal::Stop);
    }

    /// Thaws a paused process with SIGCONT. No-op when stopped.
    pub fn resume(&self) {
        self.signal(Signal::Cont);
    }

    fn signal(&self, signal: Signal) {
        let mut guard = self.lock();
        if let Some(child) = running(&mut guard) {
            send(child.id(), signal);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Kills and reaps `child`; a server that outlives SIGKILL fails the test
/// (or, during a panic, is reported on stderr: a second panic would abort).
fn reap_or_panic(child: &mut Child) {
    if let Err(e) = reap(child) {
        if thread::panicking() {
            eprintln!("{e}");
        } else {
            panic!("{e}");
        }
    }
}

/// The child if it has not exited (reaping it if it has).
fn running(slot: &mut Option<Child>) -> Option<&mut Child> {
    let child = slot.as_mut()?;
    match child.try_wait() {
        Ok(None) => Some(child),
        _ => None,
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if thread::panicking() {
            eprintln!(
                "--- redis-server on port {} ({}), last 60 log lines ---\n{}\n---",
                self.port,
                self.dir.path().display(),
                tail(self.dir.path(), LOG_FILE, 60)
            );
        }
    }
}
