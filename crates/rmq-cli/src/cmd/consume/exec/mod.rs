//! `--exec`: each delivery runs `sh -c CMD` in its own process group, the
//! payload on its stdin and the message's fields in `RMQ_*` variables; its
//! exit ends the delivery by `exit`'s protocol (0 acks, 65 dead-letters,
//! anything else retries, after a delay the handler may ask for on its last
//! stdout line), with the end of its stderr as the error (`streams`). A
//! handler that runs past its timeout (`--timeout`, else the topic's
//! handler timeout) is killed with its process group and its message
//! retried. See the parent module for signals.

mod exit;
pub(super) mod streams;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use rmq::{Delivery, LeaseLost};
use tokio::io::AsyncWriteExt;

use super::{forget, nack, release, report_outcome, Ctx, Ended, STDERR_LINGER};
use crate::{output, reaper};
use streams::Sink;

/// An environment value from bytes (NUL bytes, which no environment can
/// hold, are dropped).
fn env_value(b: &[u8]) -> OsString {
    let clean: Vec<u8> = b.iter().copied().filter(|&c| c != 0).collect();
    std::ffi::OsStr::from_bytes(&clean).to_os_string()
}

pub(super) async fn handle_exec(ctx: &Ctx, d: Delivery, cmd: &str) -> Ended {
    let m = d.message().clone();
    let mut child = match command_for(&m, cmd).spawn() {
        Ok(c) => c,
        Err(e) => {
            let error = format!("cannot run sh -c: {e}");
            output::warn_line(&error);
            return failed(ctx, d, &m, &error).await;
        }
    };
    let pid = child.id();
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.watch(pid).await;
    }
    feed(&mut child, m.payload.clone());
    let outputs = Outputs::capture(&mut child, ctx.out.json);
    let limit = ctx.handler_timeout_of(&m.topic);
    let timed_out = past(limit);

    let status = tokio::select! {
        r = d.while_held(child.wait(), ctx.lease_of(&m.topic), true) => match r {
            Ok(status) => status,
            Err(LeaseLost) => {
                // Serial mode: another member owns the slot now; stop at once.
                stop_child(ctx, &mut child, pid, outputs).await;
                output::warn_line(&format!("slot {} lease lost: handler stopped", m.slot));
                return Ended::Failed;
            }
        },
        () = ctx.kill.cancelled() => {
            stop_child(ctx, &mut child, pid, outputs).await;
            let ended = release(d).await;
            report_outcome(ctx, &m, &ended, None);
            return ended;
        }
        () = timed_out => {
            stop_child(ctx, &mut child, pid, outputs).await;
            let error = format!("timed out after {:?}", limit.unwrap_or_default());
            output::warn_line(&format!("handler {error}: killed, its message is retried"));
            return failed(ctx, d, &m, &error).await;
        }
    };
    forget(ctx, pid).await;
    let (last_line, stderr_tail) = outputs.collected().await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let error = format!("cannot wait for the command: {e}");
            return failed(ctx, d, &m, &error).await;
        }
    };
    let verdict = exit::verdict(status, last_line.as_deref(), &stderr_tail);
    let (ended, error) = verdict.end(ctx, d).await;
    report_outcome(ctx, &m, &ended, error.as_deref());
    ended
}

/// Writes the payload to the handler's stdin, in the background (a
/// command that does not read its stdin is fine).
fn feed(child: &mut tokio::process::Child, payload: Vec<u8>) {
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
    }
}

/// Ends once `limit` has passed (never without one).
async fn past(limit: Option<std::time::Duration>) {
    match limit {
        Some(limit) => tokio::time::sleep(limit).await,
        None => std::future::pending().await,
    }
}

/// `sh -c CMD` for message `m`: its fields in `RMQ_*` variables, its
/// stdio piped, in a process group of its own (killed whole).
fn command_for(m: &rmq::Received, cmd: &str) -> tokio::process::Command {
    let mut command = reaper::shell();
    command
        .arg("-c")
        .arg(cmd)
        .env("RMQ_KEY", env_value(&m.key))
        .env("RMQ_ATTEMPT", m.attempt.to_string())
        .env("RMQ_TOPIC", &m.topic)
        .env("RMQ_SLOT", m.slot.to_string())
        .env(
            "RMQ_FENCE",
            m.fence.map(|f| f.to_string()).unwrap_or_default(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(p) = m.priority {
        command.env("RMQ_PRIORITY", p.to_string());
    }
    if let Some(due) = m.due_ms {
        command.env("RMQ_DUE_MS", due.to_string());
    }
    command
}

/// What a handler writes: its stdout copied through (to stderr under
/// `--json`, whose stdout is rmq's JSON lines) with its last line kept, and
/// the tail of its stderr.
struct Outputs {
    stdout: Option<tokio::task::JoinHandle<Option<String>>>,
    stderr: Option<tokio::task::JoinHandle<String>>,
}

impl Outputs {
    fn capture(child: &mut tokio::process::Child, json: bool) -> Outputs {
        let sink = if json { Sink::Stderr } else { Sink::Stdout };
        Outputs {
            stdout: child
                .stdout
                .take()
                .map(|s| tokio::spawn(streams::copy_keeping_last_line(s, sink))),
            stderr: child
                .stderr
                .take()
                .map(|s| tokio::spawn(streams::copy_keeping_tail(s))),
        }
    }

    /// Its last stdout line and stderr tail, once the streams close (a
    /// process it left behind may hold them open: not waited for past one
    /// linger, for both).
    async fn collected(self) -> (Option<String>, String) {
        let linger = tokio::time::Instant::now() + STDERR_LINGER;
        let last_line = match self.stdout {
            Some(t) => tokio::time::timeout_at(linger, t)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten(),
            None => None,
        };
        let stderr_tail = match self.stderr {
            Some(t) => tokio::time::timeout_at(linger, t)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => String::new(),
        };
        (last_line, stderr_tail)
    }
}

/// Ends `d` as a failure (retried after the backoff) and reports it.
async fn failed(ctx: &Ctx, d: Delivery, m: &rmq::Received, error: &str) -> Ended {
    let ended = nack(ctx, d, error).await;
    report_outcome(ctx, m, &ended, Some(error));
    ended
}

/// Kills a running handler's whole process group (the shell and what it
/// started) and reaps it.
async fn stop_child(
    ctx: &Ctx,
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    outputs: Outputs,
) {
    if let Some(pid) = pid {
        reaper::kill_group(pid).await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    if let Some(t) = outputs.stderr {
        t.abort();
    }
    forget(ctx, pid).await;
}
