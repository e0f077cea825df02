//! What `rmq consume` does with each delivery until it stops: hands it to
//! a handler task (a worker, an `--exec` child, or a printed batch), counts
//! how the tasks end, and stops taking at `--max`, after `--idle-exit` or
//! on a signal; then waits for the running handlers.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use rmq::{CancellationToken, Delivery};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::ended::{Ended, Report};
use super::printed::handle_printed;
use super::source::Source;
use super::worker::{handle_worker, Workers};
use super::{handle, release, Ctx, PRINT_BATCH};
use crate::{CliError, CliResult};

/// SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session): each
/// stops the consumer, kills the running children and releases their
/// messages.
pub(super) struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub(super) fn listen() -> CliResult<Signals> {
        let on = |kind, name: &str| {
            signal(kind).map_err(|e| CliError::runtime(format!("cannot listen for {name}: {e}")))
        };
        Ok(Signals {
            int: on(SignalKind::interrupt(), "SIGINT")?,
            term: on(SignalKind::terminate(), "SIGTERM")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Until one of them arrives.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

/// The deliveries handed out and the handler tasks running them.
pub(super) struct Dispatch {
    pub(super) ctx: Arc<Ctx>,
    pub(super) stream: Source,
    pub(super) workers: Option<Arc<Workers>>,
    /// Fires to stop taking (`--max`, `--idle-exit`, a signal).
    pub(super) cancel: CancellationToken,
    /// `--max`: deliveries handed out at most.
    pub(super) max: Option<u64>,
    /// `--idle-exit`: stop after this long with nothing running.
    pub(super) idle: Option<Duration>,
    /// Each task ends one delivery (a worker's, `--exec`) or one printed
    /// batch.
    pub(super) tasks: JoinSet<Vec<Ended>>,
    pub(super) report: Report,
    /// Deliveries handed out so far.
    pub(super) started: u64,
}

impl Dispatch {
    /// Hands deliveries out until the stream ends (it ends once taking
    /// stopped and everything taken was handed out), then waits for the
    /// running handlers.
    pub(super) async fn run(&mut self, signals: &mut Signals) {
        if self.max == Some(0) {
            self.cancel.cancel();
        }
        let mut idle_deadline = Instant::now() + self.idle.unwrap_or_default();
        loop {
            let idle_armed =
                self.idle.is_some() && self.tasks.is_empty() && !self.cancel.is_cancelled();
            tokio::select! {
                d = self.stream.next() => match d {
                    Some(d) if self.cancel.is_cancelled() => {
                        self.report.count(Ok(vec![release(d).await]));
                    }
                    Some(d) => self.hand_out(d),
                    None => break,
                },
                Some(r) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.report.count(r);
                    if let Some(i) = self.idle {
                        idle_deadline = Instant::now() + i;
                    }
                }
                () = tokio::time::sleep_until(idle_deadline), if idle_armed => {
                    tracing::info!("idle for {} ms: stopping", self.idle.unwrap_or_default().as_millis());
                    self.cancel.cancel();
                }
                () = signals.recv() => self.stop_now(),
            }
        }
        while !self.tasks.is_empty() {
            tokio::select! {
                Some(r) = self.tasks.join_next() => self.report.count(r),
                () = signals.recv() => self.stop_now(),
            }
        }
    }

    /// After [`run`](Self::run): stops the workers and the stream (serial
    /// mode: the slot leases are released so that other members take over
    /// at once); returns the counts and a pool's last limits.
    pub(super) async fn close(self) -> (Report, Option<String>) {
        // Every delivery has ended: nothing holds a worker now.
        if let Some(w) = self.workers.and_then(Arc::into_inner) {
            w.stop().await;
        }
        let pool_limits = self.stream.limits();
        self.stream.close().await;
        (self.report, pool_limits)
    }

    /// Starts the handler task of one delivery: a worker's, an `--exec`
    /// child's, or, when printing, a batch of what the consumer has handed
    /// out already (one write and one flush, then its acks).
    fn hand_out(&mut self, d: Delivery) {
        self.started += 1;
        let ctx = self.ctx.clone();
        if let Some(w) = self.workers.clone() {
            self.tasks
                .spawn(async move { vec![handle_worker(&ctx, d, &w).await] });
        } else if let Some(cmd) = ctx.exec.clone() {
            self.tasks
                .spawn(async move { vec![handle(ctx, d, cmd).await] });
        } else {
            let mut batch = vec![d];
            while batch.len() < PRINT_BATCH && self.max.is_none_or(|m| self.started < m) {
                match self.stream.next().now_or_never() {
                    Some(Some(d)) => {
                        self.started += 1;
                        batch.push(d);
                    }
                    _ => break,
                }
            }
            self.tasks.spawn(handle_printed(ctx, batch));
        }
        if self.max.is_some_and(|m| self.started >= m) {
            self.cancel.cancel();
        }
    }

    /// A signal: stop taking, and kill the running children (their
    /// messages are released).
    fn stop_now(&self) {
        if !self.cancel.is_cancelled() {
            tracing::info!("signal received: stopping");
        }
        self.cancel.cancel();
        self.ctx.kill.cancel();
    }
}
