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

use rmq::{CancellationToken, Delivery};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::output::{self, Out};
use crate::reaper::Reaper;
use crate::{connect, CliError, CliResult, Global};

mod args;
mod dispatch;
mod ended;
mod exec;
mod printed;
mod source;
mod verdict;
mod worker;
pub use args::ConsumeArgs;
use args::{check_handler_flags, check_shares};
use dispatch::{Dispatch, Signals};
use ended::{report_outcome, Ended, Report};
use exec::handle_exec;
use verdict::{ack, nack, release};
use worker::Workers;

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
    fn new(
        a: &ConsumeArgs,
        out: Out,
        topics: &[rmq::Topic],
        finisher: Option<rmq_store::Finisher>,
        stop: CancellationToken,
    ) -> Ctx {
        Ctx {
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
            stop,
            stdout_closed: AtomicBool::new(false),
            finisher,
        }
    }

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
    let mut signals = Signals::listen()?;
    let finisher = finisher_of(&a).await?;
    let cancel = CancellationToken::new();
    let ctx = Arc::new(Ctx::new(&a, out, &topics, finisher, cancel.clone()));
    let coordinator = crate::coordinator::open(
        a.serial,
        &a.coordinator,
        Duration::from_millis(a.member_timeout),
        Duration::from_millis(a.coordinator_wait.unwrap_or(a.member_timeout)),
    )
    .await?;
    let mut dispatch = Dispatch {
        stream: source::Source::start(&a, topics, coordinator, cancel.clone()),
        workers: a
            .worker
            .as_deref()
            .map(|cmd| Arc::new(Workers::start(cmd, usize::from(a.workers), &ctx))),
        ctx: ctx.clone(),
        cancel,
        max: a.max,
        idle: a.idle_exit.map(Duration::from_millis),
        tasks: JoinSet::new(),
        report: Report::default(),
        started: 0,
    };
    dispatch.run(&mut signals).await;
    let (report, pool_limits) = dispatch.close().await;
    flush_store(&ctx).await;
    if !out.json {
        output::note(&report.summary(pool_limits));
    }
    if ctx.stdout_closed.load(Ordering::Relaxed) {
        return Err(CliError::quiet());
    }
    Ok(())
}

/// `--store-pg`: where acks and dead letters are reported.
async fn finisher_of(a: &ConsumeArgs) -> CliResult<Option<rmq_store::Finisher>> {
    let Some(url) = &a.store_pg else {
        return Ok(None);
    };
    rmq_store::Finisher::connect(url)
        .await
        .map(Some)
        .map_err(|e| CliError::runtime(e.to_string()))
}

/// The store hears of every ack and dead letter before `rmq` exits (or
/// gives up after 10 s: PostgreSQL down; those rows stay queued).
async fn flush_store(ctx: &Ctx) {
    let Some(f) = &ctx.finisher else {
        return;
    };
    if tokio::time::timeout(Duration::from_secs(10), f.flush())
        .await
        .is_err()
    {
        output::warn_line(
            "the message store did not take the last acks within 10 s; their rows stay queued",
        );
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
