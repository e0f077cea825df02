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
//! Printing (no `--exec`) goes in batches: the deliveries the consumer has
//! handed out together (a pop's worth) are written with one write and one
//! flush, then acked; a line is always out before its ack, and a batch
//! that cannot be written (stdout closed) is released untouched. One
//! write per message made the CLI a third slower than the library.
//!
//! Stopping: `--max N` after N deliveries were ended, `--idle-exit MS` after
//! MS with nothing to do, or SIGINT/SIGTERM/SIGHUP. In every case the
//! consumer stops taking messages, finishes (or, on a signal, kills and
//! releases) what runs, releases anything taken but not started, and exits 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use rmq::{CancellationToken, Delivery};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::output::{self, Out};
use crate::reaper::Reaper;
use crate::{connect, CliError, CliResult, Global};

mod args;
mod exec;
mod printed;
mod source;
mod verdict;
mod worker;
pub use args::ConsumeArgs;
use args::{check_handler_flags, check_shares};
use exec::handle_exec;
use printed::handle_printed;
use verdict::{ack, nack, release};
use worker::{handle_worker, Workers};

/// Deliveries printed with one write at most.
const PRINT_BATCH: usize = 1_000;

/// How long to wait for a finished child's stderr to close (a background
/// grandchild may hold it open).
const STDERR_LINGER: Duration = Duration::from_millis(200);

/// What every handler task needs.
struct Ctx {
    out: Out,
    /// The topics consumed, by name (their settings as they are now).
    topics: std::collections::HashMap<String, rmq::Topic>,
    /// `--timeout`: how long a handler may run (else its topic's).
    handler_timeout: Option<Duration>,
    exec: Option<String>,
    /// Kills the handlers' process groups if this process dies (`--exec`).
    reaper: Option<Reaper>,
    fail: bool,
    /// Fires on a signal: kill running children and release their messages.
    kill: CancellationToken,
    /// Fires when stdout is closed: stop consuming.
    stop: CancellationToken,
    stdout_closed: AtomicBool,
    /// `--store-pg`: where acks and dead letters are reported.
    finisher: Option<rmq_store::Finisher>,
}

impl Ctx {
    /// The lease of a topic's deliveries (30 s for a topic not known).
    fn lease_of(&self, topic: &str) -> Duration {
        self.topics.get(topic).map_or(Duration::from_secs(30), |t| {
            Duration::from_millis(t.spec().lease_ms)
        })
    }

    /// How long a handler of `topic` may run: `--timeout`, else the
    /// topic's handler timeout; None: no limit.
    fn handler_timeout_of(&self, topic: &str) -> Option<Duration> {
        self.handler_timeout.or_else(|| {
            let ms = self.topics.get(topic)?.spec().handler_timeout_ms;
            (ms > 0).then(|| Duration::from_millis(ms))
        })
    }
}

/// How one delivery ended.
enum Ended {
    Acked,
    Retried,
    Dead,
    Released,
    /// The message was cancelled in flight: its nack or dead ended it.
    Cancelled,
    /// The settle call failed: the message comes back after its lease.
    Failed,
}

#[derive(Default)]
struct Report {
    acked: u64,
    retried: u64,
    dead: u64,
    released: u64,
    cancelled: u64,
    failed: u64,
}

impl Report {
    fn count(&mut self, r: Result<Vec<Ended>, tokio::task::JoinError>) {
        let Ok(ends) = r else {
            self.failed += 1;
            return;
        };
        for e in ends {
            match e {
                Ended::Acked => self.acked += 1,
                Ended::Retried => self.retried += 1,
                Ended::Dead => self.dead += 1,
                Ended::Released => self.released += 1,
                Ended::Cancelled => self.cancelled += 1,
                Ended::Failed => self.failed += 1,
            }
        }
    }

    fn ended(&self) -> u64 {
        self.acked + self.retried + self.dead + self.cancelled + self.failed
    }
}

/// How an `--exec` delivery ended, as printed.
#[derive(Serialize)]
struct OutcomeJson<'a> {
    key: String,
    slot: u32,
    attempt: u32,
    /// When it was taken (Unix ms, server clock).
    taken_ms: i64,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

pub async fn run(g: &Global, mut a: ConsumeArgs) -> CliResult {
    let out = Out { json: g.json };
    if let Some(addr) = a.metrics_listen {
        crate::scrape::listen(addr)?;
    }
    let names: Vec<&str> = a.topic.split(',').map(str::trim).collect();
    check_shares(&a, &names)?;
    check_handler_flags(&a)?;
    if a.worker.is_some() {
        // Deliveries in hand: every worker's share.
        a.concurrency = a.workers.saturating_mul(a.worker_concurrency);
    }
    let client = connect::client(g).await?;
    let mut topics = Vec::with_capacity(names.len());
    for name in &names {
        topics.push(client.topic(name).await?);
    }
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGINT: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGTERM: {e}")))?;
    // A closed terminal or SSH session: stop like on SIGTERM.
    let mut sighup = signal(SignalKind::hangup())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGHUP: {e}")))?;

    let finisher = match &a.store_pg {
        Some(url) => Some(
            rmq_store::Finisher::connect(url)
                .await
                .map_err(|e| CliError::runtime(e.to_string()))?,
        ),
        None => None,
    };
    let cancel = CancellationToken::new();
    let ctx = Arc::new(Ctx {
        out,
        topics: topics
            .iter()
            .map(|t| (t.name().to_string(), t.clone()))
            .collect(),
        handler_timeout: a.timeout.map(Duration::from_millis),
        exec: a.exec.clone(),
        reaper: (a.exec.is_some() || a.worker.is_some()).then(Reaper::start),
        fail: a.fail,
        kill: CancellationToken::new(),
        stop: cancel.clone(),
        stdout_closed: AtomicBool::new(false),
        finisher,
    });
    let coordinator = crate::coordinator::open(
        a.serial,
        &a.coordinator,
        Duration::from_millis(a.member_timeout),
        Duration::from_millis(a.coordinator_wait.unwrap_or(a.member_timeout)),
    )
    .await?;
    let mut stream = source::Source::start(&a, topics, coordinator, cancel.clone());
    let workers = a
        .worker
        .as_deref()
        .map(|cmd| Arc::new(Workers::start(cmd, usize::from(a.workers), &ctx)));
    // Each task ends one delivery (--exec) or one printed batch.
    let mut tasks: JoinSet<Vec<Ended>> = JoinSet::new();
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
                    report.count(Ok(vec![release(d).await]));
                }
                Some(d) => {
                    started += 1;
                    if let Some(w) = workers.clone() {
                        let ctx = ctx.clone();
                        tasks.spawn(async move { vec![handle_worker(&ctx, d, &w).await] });
                    } else if let Some(cmd) = ctx.exec.clone() {
                        let ctx = ctx.clone();
                        tasks.spawn(async move { vec![handle(ctx, d, cmd).await] });
                    } else {
                        // Printing: what the consumer has handed out already
                        // goes in one write and one flush (then its acks).
                        let mut batch = vec![d];
                        while batch.len() < PRINT_BATCH && a.max.is_none_or(|m| started < m) {
                            match stream.next().now_or_never() {
                                Some(Some(d)) => {
                                    started += 1;
                                    batch.push(d);
                                }
                                _ => break,
                            }
                        }
                        tasks.spawn(handle_printed(ctx.clone(), batch));
                    }
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
    // Every delivery has ended: nothing holds a worker now.
    if let Some(w) = workers.and_then(Arc::into_inner) {
        w.stop().await;
    }
    let pool_limits = stream.limits();
    // Serial mode: release the slot leases so other members take over at once.
    stream.close().await;
    // The store hears of every ack and dead letter before we exit (or
    // gives up after 10 s: PostgreSQL down; those rows stay queued).
    if let Some(f) = &ctx.finisher {
        if tokio::time::timeout(Duration::from_secs(10), f.flush())
            .await
            .is_err()
        {
            output::warn_line(
                "the message store did not take the last acks within 10 s; their rows stay queued",
            );
        }
    }

    if !out.json {
        let mut s = format!(
            "consumed {}: acked {}, retried {}, dead {}",
            report.ended(),
            report.acked,
            report.retried,
            report.dead
        );
        if report.cancelled > 0 {
            s.push_str(&format!(", cancelled {}", report.cancelled));
        }
        if report.released > 0 {
            s.push_str(&format!(", released {} untouched", report.released));
        }
        if report.failed > 0 {
            s.push_str(&format!(
                ", {} not settled (they come back after their lease)",
                report.failed
            ));
        }
        if let Some(l) = pool_limits {
            s.push_str(&format!("; pool limits at the end: {l}"));
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

/// Runs `--exec`'s command for one delivery and ends it by the exit status.
async fn handle(ctx: Arc<Ctx>, d: Delivery, cmd: String) -> Ended {
    let topic = d.topic.clone();
    if ctx.kill.is_cancelled() {
        return release(d).await;
    }
    let started = Instant::now();
    let ended = handle_exec(&ctx, d, &cmd).await;
    let secs = started.elapsed().as_secs_f64();
    rmq::observe::handled(&topic, ended.label(), secs);
    ended
}

/// The handler was reaped: its group need not be killed any more.
async fn forget(ctx: &Ctx, pid: Option<u32>) {
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.forget(pid).await;
    }
}

impl Ended {
    /// How it ended, as the `outcome` metric label says it.
    fn label(&self) -> &'static str {
        match self {
            Ended::Acked => "acked",
            Ended::Retried => "retried",
            Ended::Dead => "dead",
            Ended::Released => "released",
            Ended::Cancelled => "cancelled",
            Ended::Failed => "failed",
        }
    }
}

fn report_outcome(ctx: &Ctx, m: &rmq::Received, ended: &Ended, error: Option<&str>) {
    let outcome = match ended {
        Ended::Failed => "not settled",
        e => e.label(),
    };
    print(ctx, |out| {
        if out.json {
            out.json(&OutcomeJson {
                key: output::lossy(&m.key),
                slot: m.slot,
                attempt: m.attempt,
                taken_ms: m.taken_ms,
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
