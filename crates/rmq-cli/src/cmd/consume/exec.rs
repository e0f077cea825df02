//! `--exec`: each delivery runs `sh -c CMD` in its own process group, the
//! payload on its stdin and the message's fields in `RMQ_*` variables; its
//! exit status ends the delivery (see the parent module for signals).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use rmq::{Delivery, LeaseLost};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{ack, forget, nack, release, report_outcome, Ctx, Ended, STDERR_LINGER};
use crate::{output, reaper};

/// An environment value from bytes (NUL bytes, which no environment can
/// hold, are dropped).
fn env_value(b: &[u8]) -> OsString {
    let clean: Vec<u8> = b.iter().copied().filter(|&c| c != 0).collect();
    std::ffi::OsStr::from_bytes(&clean).to_os_string()
}

pub(super) async fn handle_exec(ctx: &Ctx, d: Delivery, cmd: &str) -> Ended {
    let m = d.message().clone();
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
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(p) = m.priority {
        command.env("RMQ_PRIORITY", p.to_string());
    }
    if let Some(due) = m.due_ms {
        command.env("RMQ_DUE_MS", due.to_string());
    }
    if ctx.out.json {
        // Keep stdout for rmq's JSON lines.
        command.stdout(Stdio::from(std::io::stderr()));
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let error = format!("cannot run sh -c: {e}");
            output::warn_line(&error);
            let ended = nack(ctx, d, &error).await;
            report_outcome(ctx, &m, &ended, Some(&error));
            return ended;
        }
    };
    let pid = child.id();
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.watch(pid).await;
    }
    if let Some(mut stdin) = child.stdin.take() {
        let payload = m.payload.clone();
        tokio::spawn(async move {
            // A command that does not read its stdin is fine.
            let _ = stdin.write_all(&payload).await;
        });
    }
    let stderr_task = child.stderr.take().map(|s| tokio::spawn(forward_stderr(s)));

    let status = tokio::select! {
        r = d.while_held(child.wait(), ctx.lease_of(&m.topic), true) => match r {
            Ok(status) => status,
            Err(LeaseLost) => {
                // Serial mode: another member owns the slot now; stop at once.
                stop_child(ctx, &mut child, pid, stderr_task).await;
                output::warn_line(&format!("slot {} lease lost: handler stopped", m.slot));
                return Ended::Failed;
            }
        },
        () = ctx.kill.cancelled() => {
            stop_child(ctx, &mut child, pid, stderr_task).await;
            let ended = release(d).await;
            report_outcome(ctx, &m, &ended, None);
            return ended;
        }
    };
    forget(ctx, pid).await;
    let first_line = match stderr_task {
        Some(t) => match tokio::time::timeout(STDERR_LINGER, t).await {
            Ok(Ok(line)) => line,
            _ => None,
        },
        None => None,
    };
    let ended = match status {
        Ok(s) if s.success() => ack(ctx, d).await,
        Ok(s) => {
            let what = match s.code() {
                Some(c) => format!("exit status {c}"),
                None => {
                    use std::os::unix::process::ExitStatusExt;
                    format!("killed by signal {}", s.signal().unwrap_or(0))
                }
            };
            let error = match &first_line {
                Some(l) => format!("{what}: {l}"),
                None => what,
            };
            let ended = nack(ctx, d, &error).await;
            report_outcome(ctx, &m, &ended, Some(&error));
            return ended;
        }
        Err(e) => {
            let error = format!("cannot wait for the command: {e}");
            let ended = nack(ctx, d, &error).await;
            report_outcome(ctx, &m, &ended, Some(&error));
            return ended;
        }
    };
    report_outcome(ctx, &m, &ended, None);
    ended
}

/// Copies a child's stderr to ours and returns its first non-empty line.
async fn forward_stderr(s: tokio::process::ChildStderr) -> Option<String> {
    let mut reader = BufReader::new(s);
    let mut first = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return first,
            Ok(_) => {
                // Short, line-sized writes: blocking here is harmless.
                let mut err = std::io::stderr().lock();
                let _ = std::io::Write::write_all(&mut err, &buf);
                if first.is_none() {
                    let l = String::from_utf8_lossy(&buf).trim().to_string();
                    if !l.is_empty() {
                        first = Some(l);
                    }
                }
            }
        }
    }
}

/// Kills a running handler's whole process group (the shell and what it
/// started) and reaps it.
async fn stop_child(
    ctx: &Ctx,
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    stderr_task: Option<tokio::task::JoinHandle<Option<String>>>,
) {
    if let Some(pid) = pid {
        reaper::kill_group(pid).await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    if let Some(t) = stderr_task {
        t.abort();
    }
    forget(ctx, pid).await;
}
