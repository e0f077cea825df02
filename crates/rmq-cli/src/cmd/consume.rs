//! `rmq consume`: take messages and print them, or run a command per
//! message (`--exec`), ending every delivery explicitly.
//!
//! It uses the library's delivery stream rather than its `run` helper
//! because the CLI must decide per delivery how it ends (the child's exit
//! status), extend the lease while a child runs, and at shutdown kill the
//! running children and give their messages back untouched (`release`, so a
//! Ctrl-C does not count as a failed attempt).
//!
//! Children run with `sh -c CMD` in their own process group: a Ctrl-C in the
//! terminal reaches only `rmq`, which then kills each child's whole group
//! (the shell and whatever it started) and releases its message. Without
//! the group, the shell's children could survive and keep stderr open.
//! However `rmq` itself dies, its handlers die with it (`reaper.rs`).
//!
//! A handler's lease is extended beside it, never in its way: a lost slot
//! lease (serial mode) or a signal stops the handler at once, even while an
//! extension waits for an unreachable Redis (`Delivery::while_held`).
//!
//! Stopping: `--max N` after N deliveries were ended, `--idle-exit MS` after
//! MS with nothing to do, or SIGINT/SIGTERM/SIGHUP. In every case the
//! consumer stops taking messages, finishes (or, on a signal, kills and
//! releases) what runs, releases anything taken but not started, and exits 0.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use rmq::{CancellationToken, Delivery, LeaseLost, Settled};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::output::{self, Out};
use crate::reaper::{self, Reaper};
use crate::{connect, CliError, CliResult, Global};

/// How long to wait for a finished child's stderr to close (a background
/// grandchild may hold it open).
const STDERR_LINGER: Duration = Duration::from_millis(200);

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic name
    pub topic: String,
    /// Stop after N deliveries were ended
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Stop after MS milliseconds with nothing received or running
    #[arg(long, value_name = "MS")]
    pub idle_exit: Option<u64>,
    /// Messages handled at once
    #[arg(long, value_name = "C", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Run `sh -c CMD` per message: payload on stdin; env RMQ_KEY, RMQ_ATTEMPT,
    /// RMQ_TOPIC, RMQ_SLOT, RMQ_FENCE (serial); exit 0 acks, anything else retries
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Nack every message (a drill for retries and dead letters)
    #[arg(long, conflicts_with = "exec")]
    pub fail: bool,
    /// Serial mode: each slot is owned by one member of the group at a time
    /// and its messages are handled one at a time (RMQ_FENCE has the lease epoch)
    #[arg(long)]
    pub serial: bool,
    /// Serial mode: the consumer group
    #[arg(long, value_name = "G", default_value = "default", requires = "serial")]
    pub group: String,
    /// Serial mode: a member silent this long is gone
    #[arg(long, value_name = "MS", default_value_t = 6000, requires = "serial")]
    pub member_timeout: u64,
    /// Serial mode: how long a slot lease lasts unless renewed
    #[arg(long, value_name = "MS", default_value_t = 6000, requires = "serial")]
    pub slot_lease: u64,
}

/// What every handler task needs.
struct Ctx {
    out: Out,
    topic: String,
    lease: Duration,
    exec: Option<String>,
    /// Kills the handlers' process groups if this process dies (`--exec`).
    reaper: Option<Reaper>,
    fail: bool,
    /// Fires on a signal: kill running children and release their messages.
    kill: CancellationToken,
    /// Fires when stdout is closed: stop consuming.
    stop: CancellationToken,
    stdout_closed: AtomicBool,
}

/// How one delivery ended.
enum Ended {
    Acked,
    Retried,
    Dead,
    Released,
    /// The settle call failed: the message comes back after its lease.
    Failed,
}

#[derive(Default)]
struct Report {
    acked: u64,
    retried: u64,
    dead: u64,
    released: u64,
    failed: u64,
}

impl Report {
    fn count(&mut self, r: Result<Ended, tokio::task::JoinError>) {
        match r {
            Ok(Ended::Acked) => self.acked += 1,
            Ok(Ended::Retried) => self.retried += 1,
            Ok(Ended::Dead) => self.dead += 1,
            Ok(Ended::Released) => self.released += 1,
            Ok(Ended::Failed) | Err(_) => self.failed += 1,
        }
    }

    fn ended(&self) -> u64 {
        self.acked + self.retried + self.dead + self.failed
    }
}

/// A delivery as printed.
#[derive(Serialize)]
struct DeliveryJson {
    key: String,
    payload: String,
    slot: u32,
    attempt: u32,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

/// How an `--exec` delivery ended, as printed.
#[derive(Serialize)]
struct OutcomeJson<'a> {
    key: String,
    slot: u32,
    attempt: u32,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

pub async fn run(g: &Global, a: ConsumeArgs) -> CliResult {
    let out = Out { json: g.json };
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGINT: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGTERM: {e}")))?;
    // A closed terminal or SSH session: stop like on SIGTERM.
    let mut sighup = signal(SignalKind::hangup())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGHUP: {e}")))?;

    let cancel = CancellationToken::new();
    let ctx = Arc::new(Ctx {
        out,
        topic: topic.name().to_string(),
        lease: Duration::from_millis(topic.spec().lease_ms),
        exec: a.exec.clone(),
        reaper: a.exec.as_ref().map(|_| Reaper::start()),
        fail: a.fail,
        kill: CancellationToken::new(),
        stop: cancel.clone(),
        stdout_closed: AtomicBool::new(false),
    });
    let mut consumer = topic.consumer().concurrency(usize::from(a.concurrency));
    if a.serial {
        consumer = consumer
            .serial(a.group.clone())
            .member_timeout(Duration::from_millis(a.member_timeout))
            .slot_lease(Duration::from_millis(a.slot_lease));
    }
    let mut stream = consumer.stream(cancel.clone());
    let mut tasks: JoinSet<Ended> = JoinSet::new();
    let mut report = Report::default();
    let mut started = 0u64;
    let idle = a.idle_exit.map(Duration::from_millis);
    let mut idle_deadline = Instant::now() + idle.unwrap_or_default();
    if a.max == Some(0) {
        cancel.cancel();
    }

    loop {
        let idle_armed = idle.is_some() && tasks.is_empty() && !cancel.is_cancelled();
        tokio::select! {
            d = stream.next() => match d {
                Some(d) if cancel.is_cancelled() => {
                    report.count(Ok(release(d).await));
                }
                Some(d) => {
                    started += 1;
                    tasks.spawn(handle(ctx.clone(), d));
                    if a.max.is_some_and(|m| started >= m) {
                        cancel.cancel();
                    }
                }
                None => break,
            },
            Some(r) = tasks.join_next(), if !tasks.is_empty() => {
                report.count(r);
                if let Some(i) = idle {
                    idle_deadline = Instant::now() + i;
                }
            }
            () = tokio::time::sleep_until(idle_deadline), if idle_armed => {
                tracing::info!("idle for {} ms: stopping", a.idle_exit.unwrap_or(0));
                cancel.cancel();
            }
            _ = sigint.recv() => stop_now(&cancel, &ctx.kill),
            _ = sigterm.recv() => stop_now(&cancel, &ctx.kill),
            _ = sighup.recv() => stop_now(&cancel, &ctx.kill),
        }
    }
    // Taking has stopped and everything taken has been handed out: wait for
    // the running handlers.
    while !tasks.is_empty() {
        tokio::select! {
            Some(r) = tasks.join_next() => report.count(r),
            _ = sigint.recv() => stop_now(&cancel, &ctx.kill),
            _ = sigterm.recv() => stop_now(&cancel, &ctx.kill),
            _ = sighup.recv() => stop_now(&cancel, &ctx.kill),
        }
    }
    // Serial mode: release the slot leases so other members take over at once.
    stream.close().await;

    if !out.json {
        let mut s = format!(
            "consumed {}: acked {}, retried {}, dead {}",
            report.ended(),
            report.acked,
            report.retried,
            report.dead
        );
        if report.released > 0 {
            s.push_str(&format!(", released {} untouched", report.released));
        }
        if report.failed > 0 {
            s.push_str(&format!(
                ", {} not settled (they come back after their lease)",
                report.failed
            ));
        }
        output::note(&s);
    }
    if ctx.stdout_closed.load(Ordering::Relaxed) {
        return Err(CliError::quiet());
    }
    Ok(())
}

fn stop_now(cancel: &CancellationToken, kill: &CancellationToken) {
    if !cancel.is_cancelled() {
        tracing::info!("signal received: stopping");
    }
    cancel.cancel();
    kill.cancel();
}

async fn release(d: Delivery) -> Ended {
    match d.release().await {
        Ok(()) => Ended::Released,
        Err(e) => {
            output::warn_line(&format!("could not release a message: {e}"));
            Ended::Failed
        }
    }
}

fn print(ctx: &Ctx, f: impl FnOnce(Out) -> CliResult) -> bool {
    match f(ctx.out) {
        Ok(()) => true,
        Err(e) => {
            if let Some(m) = e.message {
                output::warn_line(&m);
            }
            ctx.stdout_closed.store(true, Ordering::Relaxed);
            ctx.stop.cancel();
            false
        }
    }
}

async fn handle(ctx: Arc<Ctx>, d: Delivery) -> Ended {
    if ctx.kill.is_cancelled() {
        return release(d).await;
    }
    match ctx.exec.clone() {
        Some(cmd) => handle_exec(&ctx, d, &cmd).await,
        None => handle_print(&ctx, d).await,
    }
}

async fn handle_print(ctx: &Ctx, d: Delivery) -> Ended {
    let m = d.message();
    let printed = print(ctx, |out| {
        if out.json {
            out.json(&DeliveryJson {
                key: output::lossy(&m.key),
                payload: output::lossy(&m.payload),
                slot: m.slot,
                attempt: m.attempt,
                kind: m.kind.to_string(),
                priority: m.priority,
                due_ms: m.due_ms,
            })
        } else {
            let order = match (m.priority, m.due_ms) {
                (Some(p), _) => format!(", priority {p}"),
                (None, Some(due)) => format!(", due {}", output::clock(due)),
                (None, None) => String::new(),
            };
            output::line(&format!(
                "{} (slot {}, attempt {}{order}): {}",
                output::cell(&m.key, 80),
                m.slot,
                m.attempt,
                output::cell(&m.payload, 10_000)
            ))
        }
    });
    if !printed {
        return release(d).await;
    }
    if ctx.fail {
        nack(d, "failed on purpose (rmq consume --fail)").await
    } else {
        ack(d).await
    }
}

async fn ack(d: Delivery) -> Ended {
    match d.ack().await {
        Ok(()) => Ended::Acked,
        Err(e) => {
            output::warn_line(&format!("could not ack a message: {e}"));
            Ended::Failed
        }
    }
}

async fn nack(d: Delivery, error: &str) -> Ended {
    match d.nack(None, error).await {
        Ok(Settled::Dead) => Ended::Dead,
        Ok(_) => Ended::Retried,
        Err(e) => {
            output::warn_line(&format!("could not nack a message: {e}"));
            Ended::Failed
        }
    }
}

/// An environment value from bytes (NUL bytes, which no environment can
/// hold, are dropped).
fn env_value(b: &[u8]) -> OsString {
    let clean: Vec<u8> = b.iter().copied().filter(|&c| c != 0).collect();
    std::ffi::OsStr::from_bytes(&clean).to_os_string()
}

async fn handle_exec(ctx: &Ctx, d: Delivery, cmd: &str) -> Ended {
    let m = d.message().clone();
    let mut command = reaper::shell();
    command
        .arg("-c")
        .arg(cmd)
        .env("RMQ_KEY", env_value(&m.key))
        .env("RMQ_ATTEMPT", m.attempt.to_string())
        .env("RMQ_TOPIC", &ctx.topic)
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
            let ended = nack(d, &error).await;
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
        r = d.while_held(child.wait(), ctx.lease, true) => match r {
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
        Ok(s) if s.success() => ack(d).await,
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
            let ended = nack(d, &error).await;
            report_outcome(ctx, &m, &ended, Some(&error));
            return ended;
        }
        Err(e) => {
            let error = format!("cannot wait for the command: {e}");
            let ended = nack(d, &error).await;
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

/// The handler was reaped: its group need not be killed any more.
async fn forget(ctx: &Ctx, pid: Option<u32>) {
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.forget(pid).await;
    }
}

fn report_outcome(ctx: &Ctx, m: &rmq::Received, ended: &Ended, error: Option<&str>) {
    let outcome = match ended {
        Ended::Acked => "acked",
        Ended::Retried => "retried",
        Ended::Dead => "dead",
        Ended::Released => "released",
        Ended::Failed => "not settled",
    };
    print(ctx, |out| {
        if out.json {
            out.json(&OutcomeJson {
                key: output::lossy(&m.key),
                slot: m.slot,
                attempt: m.attempt,
                outcome,
                error,
            })
        } else {
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            output::line(&format!(
                "{outcome} {} (slot {}, attempt {}){why}",
                output::cell(&m.key, 80),
                m.slot,
                m.attempt
            ))
        }
    });
}
