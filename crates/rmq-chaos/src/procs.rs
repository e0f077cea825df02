//! Worker processes: this binary's `produce` and `consume` subcommands run
//! as children. A supervised consumer is started again when it dies (each
//! life writes its own history file, so a torn last line of a killed life
//! never corrupts the next one). Signals go by PID while the child is held
//! unreaped, so a PID can never belong to another process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Spawns `rmq-chaos <args> --history <file>`; with a skew, under
/// `faketime -f <±N>s` (the worker's clock is off by that much).
pub fn spawn(args: &[String], history: &Path, log: &Path, skew_s: i64) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut cmd = if skew_s == 0 {
        Command::new(exe)
    } else {
        let mut c = Command::new("faketime");
        c.arg("-f").arg(format!("{skew_s:+}s")).arg(exe);
        c
    };
    Ok(cmd
        .args(args)
        .arg("--skew-ms")
        .arg((skew_s * 1000).to_string())
        .arg("--history")
        .arg(history)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?)
}

/// Sends a signal by name (`KILL`, `STOP`, `CONT`, `TERM`).
pub fn signal(child: &Child, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A consumer kept alive until stopped.
pub struct Supervised {
    child: Arc<Mutex<Option<Child>>>,
    stop: Arc<AtomicBool>,
    /// Exits with code 77 (a poison message crashed it).
    pub poison_crashes: Arc<AtomicU32>,
    /// Every exit while not stopping.
    pub restarts: Arc<AtomicU32>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Supervised {
    pub fn start(name: String, args: Vec<String>, dir: PathBuf, skew_s: i64) -> Supervised {
        let child: Arc<Mutex<Option<Child>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let poison = Arc::new(AtomicU32::new(0));
        let restarts = Arc::new(AtomicU32::new(0));
        let (c, s, p, r) = (
            child.clone(),
            stop.clone(),
            poison.clone(),
            restarts.clone(),
        );
        let thread = thread::spawn(move || {
            let mut life = 0;
            while !s.load(Ordering::SeqCst) {
                let history = dir.join(format!("{name}-{life}.jsonl"));
                let log = dir.join(format!("{name}.log"));
                match spawn(&args, &history, &log, skew_s) {
                    Ok(ch) => *lock(&c) = Some(ch),
                    Err(_) => {
                        thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                }
                life += 1;
                loop {
                    thread::sleep(Duration::from_millis(20));
                    let mut g = lock(&c);
                    let Some(ch) = g.as_mut() else { break };
                    if let Ok(Some(status)) = ch.try_wait() {
                        if status.code() == Some(77) {
                            p.fetch_add(1, Ordering::SeqCst);
                        }
                        *g = None;
                        break;
                    }
                }
                if !s.load(Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Supervised {
            child,
            stop,
            poison_crashes: poison,
            restarts,
            thread: Some(thread),
        }
    }

    /// Signals the current life, if any; returns whether one was running.
    pub fn signal(&self, name: &str) -> bool {
        let g = lock(&self.child);
        match g.as_ref() {
            Some(ch) => {
                signal(ch, name);
                true
            }
            None => false,
        }
    }

    /// Stops for good: SIGTERM (graceful), SIGKILL after `grace`.
    pub fn stop(mut self, grace: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        self.signal("CONT");
        self.signal("TERM");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && lock(&self.child).is_some() {
            thread::sleep(Duration::from_millis(20));
        }
        self.signal("KILL");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
