//! Worker processes: this binary's `produce` and `consume` subcommands run
//! as children. A supervised consumer is started again when it dies (each
//! life writes its own history file, so a torn last line of a killed life
//! never corrupts the next one).
//!
//! A worker is not always one process: under `faketime` the worker is
//! faketime's *child*, and killing faketime by PID left that child running,
//! reparented to init (issue 23: `consume --skew-ms 90000` processes outlived
//! the test suite). So every worker starts in its own process group and
//! every signal goes to the whole group. A group is only signalled while
//! its leader is held unreaped (a zombie still holds its PID, and with it
//! the group ID), and the leader is only reaped once nothing else in its
//! group lives: a group ID can never name someone else's processes. When
//! the leader dies alone (faketime killed), the rest of its group is
//! SIGKILLed like a crashed worker, unless a graceful stop is under way.
//!
//! Every worker also carries the run's tag in its environment (inherited by
//! every descendant, whatever group it moves to): [`Workers::ensure_none_left`]
//! finds any worker process still alive at the end of a scenario, kills it,
//! and fails the scenario. A worker whose parent dies (the harness killed,
//! or interrupted with Ctrl-C, which now reaches only the harness's group)
//! stops itself: [`term_when_orphaned`].

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rmq_test_support::reap::{self, Proc};

/// The environment variable that carries the run's tag to every worker.
pub const TAG_VAR: &str = "RMQ_CHAOS_RUN";

/// How long a SIGKILLed worker may take to be reaped before we give up
/// waiting (the end-of-scenario check then reports it).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The processes one run started: their groups, and the tag in their
/// environment. Clones share the record.
#[derive(Clone)]
pub struct Workers {
    tag: Arc<str>,
    groups: Arc<Mutex<Vec<u32>>>,
}

impl Workers {
    /// A record with a tag no other run (or test) uses.
    pub fn new() -> Workers {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        Workers {
            tag: format!("{}-{nanos}-{n}", std::process::id()).into(),
            groups: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Starts `cmd` as a worker: in a process group of its own, tagged,
    /// stdin and stdout to /dev/null, stderr appended to `log`.
    pub fn spawn(&self, mut cmd: Command, log: &Path) -> io::Result<Worker> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = cmd
            .process_group(0)
            .env(TAG_VAR, &*self.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let pgid = child.id();
        lock(&self.groups).push(pgid);
        Ok(Worker {
            child,
            pgid,
            exited: None,
        })
    }

    /// Every process group started so far (one per worker life).
    #[cfg(test)]
    pub fn groups(&self) -> Vec<u32> {
        lock(&self.groups).clone()
    }

    /// Worker processes (and their descendants) still alive.
    pub fn leftovers(&self) -> Vec<Proc> {
        reap::with_env(TAG_VAR, &self.tag)
    }

    /// Waits up to `timeout` for every worker process to be gone. Any
    /// still alive then is SIGKILLed and named in the error.
    pub fn ensure_none_left(&self, timeout: Duration) -> Result<(), String> {
        let left = reap::wait_until_none(timeout, || self.leftovers());
        if left.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = left.iter().map(Proc::describe).collect();
        let ours = lock(&self.groups).clone();
        for p in &left {
            // Just seen alive, so its PID (and its group, which it is in)
            // cannot have been handed to anyone else.
            if ours.contains(&p.pgid) {
                reap::signal_group(p.pgid, "KILL");
            }
            reap::signal_pid(p.pid, "KILL");
        }
        let still = reap::wait_until_none(KILL_WAIT, || self.leftovers());
        Err(format!(
            "{} worker process(es) outlived the scenario{}: {}",
            left.len(),
            if still.is_empty() {
                " (killed now)"
            } else {
                " (and survive SIGKILL)"
            },
            list.join("; ")
        ))
    }
}

/// Where a worker's process group stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The leader runs.
    Running,
    /// The leader has exited (unreaped) but others in its group live on:
    /// a wrapper such as faketime died before the worker it runs.
    Orphans,
    /// All gone; the leader's exit code (`None`: killed by a signal).
    Exited(Option<i32>),
}

/// One worker process group, led by the child we spawned.
pub struct Worker {
    child: Child,
    pgid: u32,
    /// Set once the leader is reaped.
    exited: Option<Option<i32>>,
}

impl Worker {
    /// Its process group ID (the leader's PID).
    #[cfg(test)]
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// Sends a signal by name (`KILL`, `STOP`, `CONT`, `TERM`) to every
    /// process of the group. No-op once the leader is reaped.
    pub fn signal(&self, name: &str) {
        if self.exited.is_none() {
            reap::signal_group(self.pgid, name);
        }
    }

    /// Checks the group; reaps the leader once nothing else in it lives.
    pub fn state(&mut self) -> State {
        if let Some(code) = self.exited {
            return State::Exited(code);
        }
        let pid = self.child.id();
        // Without /proc, fall through to try_wait.
        let leader_done = reap::stat(pid).is_none_or(|p| !p.is_alive());
        if !leader_done {
            return State::Running;
        }
        if reap::group(self.pgid).iter().any(|p| p.pid != pid) {
            return State::Orphans;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = Some(status.code());
                State::Exited(status.code())
            }
            Ok(None) => State::Running,
            Err(_) => {
                self.exited = Some(None);
                State::Exited(None)
            }
        }
    }

    /// Whether anything of the group still runs (reaping it when not).
    pub fn is_running(&mut self) -> bool {
        !matches!(self.state(), State::Exited(_))
    }

    /// SIGKILLs the whole group and reaps the leader.
    pub fn kill(&mut self) {
        if self.exited.is_some() {
            return;
        }
        self.signal("KILL");
        let deadline = Instant::now() + KILL_WAIT;
        while Instant::now() < deadline {
            if let State::Exited(_) = self.state() {
                return;
            }
            self.signal("KILL");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The command for a worker: `rmq-chaos <args> --skew-ms <ms> --history
/// <file>`; with a skew, under `faketime -f <±N>s` (the worker's clock is
/// off by that much).
pub fn worker_command(args: &[String], history: &Path, skew_s: i64) -> io::Result<Command> {
    let exe = std::env::current_exe()?;
    let mut cmd = if skew_s == 0 {
        Command::new(exe)
    } else {
        let mut c = Command::new("faketime");
        c.arg("-f").arg(format!("{skew_s:+}s")).arg(exe);
        c
    };
    cmd.args(args)
        .arg("--skew-ms")
        .arg((skew_s * 1000).to_string())
        .arg("--history")
        .arg(history);
    Ok(cmd)
}

/// In a worker: once its parent is gone (the harness died, or faketime
/// above it did), SIGTERM itself (a consumer then stops gracefully, a
/// producer ends) and exit after `grace` if that did not end it.
pub fn term_when_orphaned(grace: Duration) {
    let parent = std::os::unix::process::parent_id();
    thread::spawn(move || loop {
        thread::sleep(Duration::from_millis(100));
        if std::os::unix::process::parent_id() != parent {
            reap::signal_pid(std::process::id(), "TERM");
            thread::sleep(grace);
            std::process::exit(3);
        }
    });
}

/// A consumer kept alive until stopped.
pub struct Supervised {
    current: Arc<Mutex<Option<Worker>>>,
    stop: Arc<AtomicBool>,
    /// Exits with code 77 (a poison message crashed it).
    pub poison_crashes: Arc<AtomicU32>,
    /// Every exit while not stopping.
    pub restarts: Arc<AtomicU32>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Supervised {
    /// This binary with `args` (a consumer), `name-<life>.jsonl` as each
    /// life's history and `name.log` as the log, in `dir`.
    pub fn start(
        workers: &Workers,
        name: String,
        args: Vec<String>,
        dir: PathBuf,
        skew_s: i64,
    ) -> Supervised {
        let log = dir.join(format!("{name}.log"));
        Supervised::start_with(workers, log, move |life| {
            let history = dir.join(format!("{name}-{life}.jsonl"));
            worker_command(&args, &history, skew_s)
        })
    }

    /// Keeps a worker made by `command(life)` running.
    pub fn start_with(
        workers: &Workers,
        log: PathBuf,
        mut command: impl FnMut(u32) -> io::Result<Command> + Send + 'static,
    ) -> Supervised {
        let current: Arc<Mutex<Option<Worker>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let poison = Arc::new(AtomicU32::new(0));
        let restarts = Arc::new(AtomicU32::new(0));
        let (c, s, p, r, workers) = (
            current.clone(),
            stop.clone(),
            poison.clone(),
            restarts.clone(),
            workers.clone(),
        );
        let thread = thread::spawn(move || {
            let mut life = 0;
            while !s.load(Ordering::SeqCst) {
                match command(life).and_then(|cmd| workers.spawn(cmd, &log)) {
                    Ok(w) => *lock(&c) = Some(w),
                    Err(_) => {
                        thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                }
                life += 1;
                loop {
                    thread::sleep(Duration::from_millis(20));
                    let mut g = lock(&c);
                    let Some(w) = g.as_mut() else { break };
                    match w.state() {
                        State::Running => {}
                        // The wrapper died: its worker goes too, as a crash
                        // would, unless it is finishing a graceful stop.
                        State::Orphans if !s.load(Ordering::SeqCst) => w.signal("KILL"),
                        State::Orphans => {}
                        State::Exited(code) => {
                            if code == Some(77) {
                                p.fetch_add(1, Ordering::SeqCst);
                            }
                            *g = None;
                            break;
                        }
                    }
                }
                if !s.load(Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Supervised {
            current,
            stop,
            poison_crashes: poison,
            restarts,
            thread: Some(thread),
        }
    }

    /// Signals the current life's whole process group, if any; returns
    /// whether one was running.
    pub fn signal(&self, name: &str) -> bool {
        match lock(&self.current).as_ref() {
            Some(w) => {
                w.signal(name);
                true
            }
            None => false,
        }
    }

    /// Stops for good: SIGTERM (graceful), SIGKILL after `grace`, to the
    /// whole process group; returns once the supervising thread has reaped
    /// the last life.
    pub fn stop(mut self, grace: Duration) {
        self.shutdown(grace);
    }

    fn shutdown(&mut self, grace: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        self.signal("CONT");
        self.signal("TERM");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && lock(&self.current).is_some() {
            thread::sleep(Duration::from_millis(20));
        }
        let Some(t) = self.thread.take() else { return };
        // Again and again: a life started just before the stop flag was
        // seen must not be missed.
        let deadline = Instant::now() + KILL_WAIT;
        while !t.is_finished() && Instant::now() < deadline {
            self.signal("KILL");
            thread::sleep(Duration::from_millis(20));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shutdown(Duration::ZERO);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kills whatever the workers left when a test ends, failed or not.
    struct Cleanup(Workers);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.0.ensure_none_left(Duration::ZERO);
        }
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "not within 10 s: {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the workers have at least `n` live processes (and the
    /// first group is on record).
    fn wait_for(workers: &Workers, n: usize) {
        wait_until(&format!("{n} processes"), || {
            workers.leftovers().len() >= n && !workers.groups().is_empty()
        });
    }

    /// Fails (after killing them) if any of the workers' processes live.
    fn assert_all_gone(workers: &Workers) {
        if let Err(e) = workers.ensure_none_left(Duration::from_secs(5)) {
            panic!("{e}");
        }
        for g in workers.groups() {
            let members = reap::group(g);
            assert!(members.is_empty(), "group {g} not empty: {members:?}");
        }
    }

    /// The leak of issue 23: a worker under faketime that ignores SIGTERM
    /// and has a child of its own; stopping it must leave nothing.
    #[test]
    fn stopping_a_worker_under_faketime_leaves_no_process_of_its_group() {
        assert!(
            Command::new("faketime").arg("--help").output().is_ok(),
            "faketime is missing: run scripts/ensure-deps.sh"
        );
        let workers = Workers::new();
        let _cleanup = Cleanup(workers.clone());
        let sup = Supervised::start_with(&workers, "/dev/null".into(), |_| {
            let mut c = Command::new("faketime");
            c.args(["-f", "+90s", "sh", "-c", "trap '' TERM; sleep 60 & wait"]);
            Ok(c)
        });
        wait_for(&workers, 3); // faketime, sh, sleep
        sup.stop(Duration::from_millis(300));
        assert_all_gone(&workers);
    }

    /// A wrapper that dies alone (its leader killed by PID) takes its
    /// children with it; the next life starts in a new group.
    #[test]
    fn a_worker_whose_leader_dies_alone_is_killed_and_restarted() {
        let workers = Workers::new();
        let _cleanup = Cleanup(workers.clone());
        let sup =
            Supervised::start_with(&workers, "/dev/null".into(), |_| Ok(sh("sleep 60 & wait")));
        wait_for(&workers, 2);
        let first = workers.groups()[0];
        // The leader is unreaped while its child lives: the PID is its.
        assert!(reap::signal_pid(first, "KILL"));
        let left = reap::wait_until_none(Duration::from_secs(5), || reap::group(first));
        assert!(left.is_empty(), "the orphan lives on: {left:?}");
        wait_until("a second life", || workers.groups().len() >= 2);
        assert_eq!(sup.restarts.load(Ordering::SeqCst), 1);
        assert_eq!(workers.groups().len(), 2, "a second life");
        sup.stop(Duration::from_millis(300));
        assert_all_gone(&workers);
    }

    #[test]
    fn a_dropped_worker_takes_its_group_with_it() {
        let workers = Workers::new();
        let _cleanup = Cleanup(workers.clone());
        let w = workers
            .spawn(sh("sleep 60 & wait"), Path::new("/dev/null"))
            .expect("sh runs");
        wait_for(&workers, 2);
        assert_eq!(reap::group(w.pgid()).len(), 2);
        drop(w);
        assert_all_gone(&workers);
    }

    /// The end-of-scenario check finds a worker's descendant that left the
    /// group (its environment still carries the tag), kills it and fails.
    #[test]
    fn the_final_check_fails_on_a_survivor_and_kills_it() {
        let workers = Workers::new();
        let _cleanup = Cleanup(workers.clone());
        let mut w = workers
            .spawn(sh("setsid sleep 61 & wait"), Path::new("/dev/null"))
            .expect("sh runs");
        let group = w.pgid();
        wait_until("sleep in a session of its own", || {
            workers
                .leftovers()
                .iter()
                .any(|p| p.pgid != group && p.comm == "sleep")
        });
        w.kill();
        let err = workers
            .ensure_none_left(Duration::from_millis(300))
            .expect_err("the setsid sleep outlives its group");
        assert!(
            err.contains("sleep 61") && err.contains("killed now"),
            "{err}"
        );
        assert_all_gone(&workers);
        assert_eq!(workers.ensure_none_left(Duration::ZERO), Ok(()));
    }
}
