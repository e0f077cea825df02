//! Handlers never outlive `rmq consume` (I5: a message whose consumer died
//! is redelivered to another one, so the old handler must be gone by then).
//!
//! Each `--exec` handler runs in its own process group, so that a Ctrl-C in
//! the terminal reaches only `rmq`, which then stops the handlers itself.
//! But a process group also outlives its parent: after a SIGKILL, a panic
//! or any death that skips `rmq`'s own clean-up, the handler would run on
//! while its message goes to another consumer. Two guards close that gap:
//!
//! - the **reaper**, a small process (`rmq` itself, hidden subcommand
//!   `reap-handlers`) started beside the consumer with a pipe to it. The
//!   consumer writes `+PGID` when it starts a handler and `-PGID` once the
//!   handler is gone. However the consumer dies, the kernel closes the pipe;
//!   the reaper reads end-of-file and kills every group still listed. It
//!   ignores SIGHUP, SIGINT and SIGTERM (they are the consumer's to act on)
//!   and lives in its own process group (a Ctrl-C does not reach it).
//! - the **parent-death signal**: when `setpriv` (util-linux) is there,
//!   handlers start as `setpriv --pdeathsig KILL sh -c CMD`, so the shell
//!   is killed by the kernel the moment `rmq` dies, even if the reaper was
//!   killed too (as by `pkill -9 rmq`).
//!
//! A group is listed between its handler's spawn and its reaping; a group
//! number is reused by the kernel only after every process of the group is
//! gone, and `-PGID` is written right after the handler was reaped.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::CliResult;

/// The consumer's end of the pipe to its reaper.
pub struct Reaper {
    /// The pipe; `None` when the reaper could not be started (the
    /// parent-death signal still guards the handlers' shells).
    pipe: tokio::sync::Mutex<Option<ChildStdin>>,
    _child: Option<Child>,
}

impl Reaper {
    /// Starts the reaper process. If it cannot start, says so once and
    /// carries on without it.
    pub fn start() -> Reaper {
        let spawned = std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .arg("reap-handlers")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .kill_on_drop(false)
                .spawn()
        });
        match spawned {
            Ok(mut child) => Reaper {
                pipe: tokio::sync::Mutex::new(child.stdin.take()),
                _child: Some(child),
            },
            Err(e) => {
                crate::output::warn_line(&format!(
                    "cannot start the handler reaper ({e}): a handler may outlive rmq if it is killed"
                ));
                Reaper {
                    pipe: tokio::sync::Mutex::new(None),
                    _child: None,
                }
            }
        }
    }

    /// Lists a handler's process group: killed if the consumer dies.
    pub async fn watch(&self, pgid: u32) {
        self.say(&format!("+{pgid}\n")).await;
    }

    /// The handler's group is gone: forget it.
    pub async fn forget(&self, pgid: u32) {
        self.say(&format!("-{pgid}\n")).await;
    }

    async fn say(&self, line: &str) {
        let mut pipe = self.pipe.lock().await;
        if let Some(p) = pipe.as_mut() {
            if let Err(e) = p.write_all(line.as_bytes()).await {
                crate::output::warn_line(&format!("the handler reaper is gone ({e})"));
                *pipe = None;
            }
        }
    }
}

/// How to start a handler's shell: under `setpriv --pdeathsig KILL` when
/// the machine has a `setpriv` that knows the option.
pub fn shell() -> Command {
    static SETPRIV: OnceLock<bool> = OnceLock::new();
    let has_setpriv = *SETPRIV.get_or_init(|| {
        std::process::Command::new("setpriv")
            .arg("--help")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--pdeathsig"))
    });
    if has_setpriv {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", "sh"]);
        c
    } else {
        Command::new("sh")
    }
}

/// Kills a whole process group (the shell and whatever it started).
pub async fn kill_group(pgid: u32) {
    let r = Command::new("sh")
        .arg("-c")
        .arg(format!("kill -9 -{pgid} 2>/dev/null"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = r {
        tracing::warn!("cannot kill process group {pgid}: {e}");
    }
}

/// `rmq reap-handlers`: the reaper's side. Reads `+PGID`/`-PGID` lines
/// until end-of-file, then kills every group still listed.
pub async fn run() -> CliResult {
    use tokio::signal::unix::{signal, SignalKind};
    // Handled (and ignored) so that they do not end the reaper: a terminal
    // hang-up or a Ctrl-C is the consumer's to act on.
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let listed: Mutex<HashSet<u32>> = Mutex::new(HashSet::new());
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(l)) => apply(&listed, &l),
                Ok(None) | Err(_) => break,
            },
            Some(()) = recv(&mut hup) => {}
            Some(()) = recv(&mut int) => {}
            Some(()) = recv(&mut term) => {}
        }
    }
    let groups: Vec<u32> = listed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .collect();
    for g in groups {
        kill_group(g).await;
    }
    Ok(())
}

async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

fn apply(listed: &Mutex<HashSet<u32>>, line: &str) {
    let (op, n) = line.split_at(line.len().min(1));
    let Ok(pgid) = n.trim().parse::<u32>() else {
        return;
    };
    // 0 and 1 would name our own group or init's: never kill those.
    if pgid <= 1 {
        return;
    }
    let mut l = listed.lock().unwrap_or_else(|p| p.into_inner());
    match op {
        "+" => {
            l.insert(pgid);
        }
        "-" => {
            l.remove(&pgid);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaper_lists_and_forgets_groups_and_ignores_garbage() {
        let l = Mutex::new(HashSet::new());
        for line in [
            "+42", "+43", "-42", "+1", "+0", "x9", "+", "", "+-5", "+abc",
        ] {
            apply(&l, line);
        }
        assert_eq!(
            *l.lock().unwrap_or_else(|p| p.into_inner()),
            HashSet::from([43])
        );
    }
}
