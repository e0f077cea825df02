//! Finding and ending processes a test started, through `/proc` (Linux).
//!
//! Tests and the chaos harness start processes that start processes of
//! their own: `faketime` runs its command as a *child* and killing
//! `faketime` leaves that child running, reparented to init. Killing by PID
//! alone therefore leaks. This module lets a caller see what is left of a
//! process group ([`group`]), or of every process that carries a marker in
//! its environment ([`with_env`]; the environment is inherited by every
//! descendant, whatever group it moved to), and signal a whole group
//! ([`signal_group`]).
//!
//! Signals go through the `kill` utility, so the crate needs neither `libc`
//! nor `unsafe` code. A process group ID cannot be handed out again while
//! any process (even an unreaped zombie) is in the group, so signalling a
//! group is safe as long as the caller holds its leader unreaped or has just
//! seen live members in it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// One process, as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Process ID.
    pub pid: u32,
    /// Parent's PID (1, or a subreaper, once orphaned).
    pub ppid: u32,
    /// Process group ID.
    pub pgid: u32,
    /// State letter: `R`, `S`, `D`, `T`, `Z` (zombie), …
    pub state: char,
    /// Start time after boot, in clock ticks: with the PID, it names one
    /// process for good (a reused PID has a later start time).
    pub start_ticks: u64,
    /// The executable's name (at most 15 bytes).
    pub comm: String,
}

impl Proc {
    /// Running, sleeping or stopped: not a zombie waiting to be reaped.
    pub fn is_alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Its command line, arguments separated by spaces (empty once gone).
    pub fn cmdline(&self) -> String {
        std::fs::read(format!("/proc/{}/cmdline", self.pid))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(String::from_utf8_lossy)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    }

    /// `pid 123 (group 120): rmq-chaos consume …`, for error messages.
    pub fn describe(&self) -> String {
        let cmd = self.cmdline();
        let what = if cmd.is_empty() { &self.comm } else { &cmd };
        format!("pid {} (group {}): {what}", self.pid, self.pgid)
    }
}

/// The process `pid`, or `None` if there is none.
pub fn stat(pid: u32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses one `/proc/<pid>/stat` line. The name sits in parentheses and
/// may itself contain spaces and parentheses: the fields after it start
/// after the *last* `)`.
fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Proc {
        pid,
        comm,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgid: rest.get(2)?.parse().ok()?,
        // Field 22 of the line; `rest` starts at field 3.
        start_ticks: rest.get(19)?.parse().ok()?,
    })
}

/// Every process visible in `/proc`.
pub fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// The live members (zombies left out) of process group `pgid`.
pub fn group(pgid: u32) -> Vec<Proc> {
    processes()
        .into_iter()
        .filter(|p| p.pgid == pgid && p.is_alive())
        .collect()
}

/// Live processes whose environment holds `name=value` (only processes of
/// the same user, or any as root, can be read).
pub fn with_env(name: &str, value: &str) -> Vec<Proc> {
    let entry = format!("{name}={value}");
    processes()
        .into_iter()
        .filter(|p| p.is_alive() && env_has(p.pid, entry.as_bytes()))
        .collect()
}

fn env_has(pid: u32, entry: &[u8]) -> bool {
    std::fs::read(Path::new("/proc").join(pid.to_string()).join("environ"))
        .is_ok_and(|env| env.split(|&c| c == 0).any(|e| e == entry))
}

/// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`, …) to every process of
/// group `pgid` (`kill -<signal> -- -<pgid>`); returns whether `kill`
/// succeeded (false: no such group, or `kill` could not run).
///
/// The caller must know the group is its own: it holds the group leader
/// unreaped, or has just seen live members in it.
pub fn signal_group(pgid: u32, signal: &str) -> bool {
    if pgid <= 1 {
        return false; // -1 would mean every process we may signal
    }
    kill(&[format!("-{signal}"), "--".into(), format!("-{pgid}")])
}

/// Sends `signal` to the one process `pid` (same caveat as
/// [`signal_group`]: the caller must know the PID is still that process).
pub fn signal_pid(pid: u32, signal: &str) -> bool {
    if pid <= 1 {
        return false;
    }
    kill(&[format!("-{signal}"), pid.to_string()])
}

fn kill(args: &[String]) -> bool {
    Command::new("kill")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Polls `left` until it returns nothing or `timeout` has passed; returns
/// its last answer (empty: all gone). A killed process takes a moment to
/// disappear, which is why checks wait a little.
pub fn wait_until_none(timeout: Duration, mut left: impl FnMut() -> Vec<Proc>) -> Vec<Proc> {
    let deadline = Instant::now() + timeout;
    loop {
        let now = left();
        if now.is_empty() || Instant::now() >= deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;

    #[test]
    fn stat_lines_parse_even_with_parentheses_in_the_name() {
        let line = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 \
                    1000 100 18446744073709551615";
        let p = parse_stat(line).expect("parses");
        assert_eq!(
            (
                p.pid,
                p.comm.as_str(),
                p.state,
                p.ppid,
                p.pgid,
                p.start_ticks
            ),
            (4242, "a) b (c)", 'S', 1, 4240, 987_654)
        );
        assert!(parse_stat("garbage").is_none());
        let me = stat(std::process::id()).expect("this process");
        assert!(me.is_alive());
        assert!(!group(me.pgid).is_empty());
    }

    #[test]
    fn signalling_a_group_reaches_grandchildren() {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("sh")
            .args(["-c", "sleep 60 & sleep 61 & wait"])
            .env("RMQ_REAP_TEST", "grandchildren")
            .process_group(0)
            .spawn()
            .expect("sh runs");
        let pgid = child.id();
        let three = wait_until_none(Duration::from_secs(5), || {
            let g = group(pgid);
            if g.len() == 3 {
                Vec::new()
            } else {
                g
            }
        });
        assert!(three.is_empty(), "sh and two sleeps: {three:?}");
        assert_eq!(with_env("RMQ_REAP_TEST", "grandchildren").len(), 3);
        assert!(signal_group(pgid, "KILL"));
        let _ = child.wait();
        let left = wait_until_none(Duration::from_secs(5), || group(pgid));
        assert!(left.is_empty(), "{left:?}");
        assert!(!signal_group(1, "KILL") && !signal_pid(0, "KILL"));
    }

    /// A test that panics still stops its redis-server: `Drop` runs while
    /// unwinding and kills it by PID.
    #[test]
    fn a_panicking_test_leaves_no_redis_server() {
        let (tx, rx) = std::sync::mpsc::channel();
        let outcome = thread::spawn(move || {
            let server = RedisServer::start();
            let pid = server.pid().expect("running");
            let _ = tx.send(stat(pid).expect("its /proc entry"));
            panic!("a test failing on purpose, its server running");
        })
        .join();
        assert!(outcome.is_err());
        let started = rx.recv().expect("the server's process");
        let same = stat(started.pid).filter(|p| p.start_ticks == started.start_ticks);
        assert!(same.is_none(), "redis-server survived the panic: {same:?}");
    }
}
