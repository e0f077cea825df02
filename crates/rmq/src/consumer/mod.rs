//! Consuming: a [`Stream`] of [`Delivery`]s ([`ConsumerBuilder::stream`]) or
//! a handler run with a chosen concurrency ([`ConsumerBuilder::run`]).
//!
//! Three background duties serve a consumer, one file each: the fetch loop
//! (`fetcher.rs`, phase one), the settler (`settler.rs`, phase two, batched)
//! and the wake-up listener (`wake.rs`). Idle, a consumer sleeps until the
//! earliest due time it knows of, a notice of a new message, or a rescan
//! (every 5 s by default): a handful of Redis calls a second at most.
//!
//! Shutdown takes two steps: cancel the token and the consumer stops taking
//! messages; `run` then waits up to the grace period for running handlers
//! and releases (gives back, uncounted) whatever did not start or finish.

mod delivery;
mod fetcher;
mod schedule;
mod settler;
mod wake;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use delivery::Delivery;
pub use settler::Settled;

use crate::error::Result;
use crate::message::Received;
use crate::topic::Topic;
use schedule::Schedule;

/// What a handler decided about its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: remove the message.
    Ack,
    /// Failed: retry after `after` (the topic's backoff when `None`), or
    /// dead-letter it after the last attempt.
    Retry {
        /// Delay before the retry.
        after: Option<Duration>,
        /// Why it failed (kept with a dead letter).
        error: String,
    },
    /// Failed for good: straight to the dead letters.
    Dead {
        /// Why it failed.
        error: String,
    },
}

impl Outcome {
    /// A retry after the topic's backoff.
    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry {
            after: None,
            error: error.into(),
        }
    }
}

impl<E: std::fmt::Display> From<std::result::Result<(), E>> for Outcome {
    fn from(r: std::result::Result<(), E>) -> Self {
        match r {
            Ok(()) => Outcome::Ack,
            Err(e) => Outcome::retry(e.to_string()),
        }
    }
}

/// Counts of what [`ConsumerBuilder::run`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages given back for a retry.
    pub retried: u64,
    /// Messages moved to the dead letters.
    pub dead: u64,
    /// Messages released at shutdown.
    pub released: u64,
    /// Settles that failed (stale lease or Redis unreachable): those
    /// messages are redelivered after their lease.
    pub failed_settles: u64,
}

pub(crate) struct Shared {
    schedule: Mutex<Schedule>,
    notify: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Configures a consumer; get one from [`Topic::consumer`].
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    topic: Topic,
    concurrency: usize,
    batch: usize,
    rescan: Duration,
    auto_extend: bool,
    grace: Duration,
}

impl Topic {
    /// A consumer of this topic (parallel mode: any slot's due messages).
    pub fn consumer(&self) -> ConsumerBuilder {
        ConsumerBuilder {
            topic: self.clone(),
            concurrency: 16,
            batch: 64,
            rescan: Duration::from_secs(5),
            auto_extend: true,
            grace: Duration::from_secs(30),
        }
    }
}

impl Topic {
    /// Takes up to `max` due messages right now, without waiting, slot by
    /// slot from slot 0 (no cross-slot priority order). For tools, scripts
    /// and tests; a long-running consumer should use [`Topic::consumer`].
    pub async fn take(&self, max: usize) -> Result<Vec<Delivery>> {
        let settler = settler::Settler::spawn(self.clone());
        let mut out = Vec::new();
        for slot in 0..self.spec().slots {
            if out.len() >= max {
                break;
            }
            let (id, cmd) = fetcher::pop_call(self, slot, max - out.len());
            let v = self.redis().run_one(id, cmd).await?;
            let popped = fetcher::parse_pop(self.spec(), slot, crate::value::items(v));
            out.extend(
                popped
                    .messages
                    .into_iter()
                    .map(|m| Delivery::new(m, settler.clone(), None)),
            );
        }
        Ok(out)
    }
}

impl ConsumerBuilder {
    /// Messages in flight at once (handlers running, or deliveries not yet
    /// ended); default 16.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
    /// Messages taken per round trip at most; default 64.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, 1_000);
        self
    }
    /// How often every slot is looked at even without a notice; default 5 s.
    pub fn rescan(mut self, every: Duration) -> Self {
        self.rescan = every.max(Duration::from_millis(10));
        self
    }
    /// `run`: extend the lease of a handler that runs long (default on).
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }
    /// `run`: how long to wait for running handlers at shutdown; default 30 s.
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }

    /// Deliveries as a stream, until `cancel` fires; then the stream yields
    /// what was already taken and ends. End each delivery (see [`Delivery`]).
    pub fn stream(self, cancel: CancellationToken) -> Deliveries {
        let spec = self.topic.spec();
        let shared = Arc::new(Shared {
            schedule: Mutex::new(Schedule::new(spec.kind, spec.slots)),
            notify: Notify::new(),
        });
        let settler = settler::Settler::spawn(self.topic.clone());
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let (tx, rx) = mpsc::channel(self.concurrency);
        let stop = cancel.child_token();
        tokio::spawn(wake::listen(
            self.topic.clone(),
            shared.clone(),
            stop.clone(),
        ));
        tokio::spawn(fetcher::fetch_loop(
            self.topic.clone(),
            shared,
            settler,
            permits,
            tx,
            fetcher::FetchConfig {
                batch: self.batch.min(self.concurrency),
                concurrency: self.concurrency,
                rescan: self.rescan,
            },
            stop.clone(),
        ));
        Deliveries {
            rx,
            _stop: stop.drop_guard(),
        }
    }

    /// Runs `handler` on every message until `cancel` fires, up to the
    /// concurrency at once, and ends each delivery by the handler's
    /// [`Outcome`]. Long handlers get their lease extended.
    pub async fn run<H, F>(self, cancel: CancellationToken, handler: H) -> Result<RunReport>
    where
        H: Fn(Received) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let lease = Duration::from_millis(self.topic.spec().lease_ms);
        let auto_extend = self.auto_extend;
        let grace = self.grace;
        let handler = Arc::new(handler);
        let hard_stop = CancellationToken::new();
        let mut deliveries = self.stream(cancel.clone());
        let mut tasks: JoinSet<Ended> = JoinSet::new();
        let mut report = RunReport::default();
        loop {
            tokio::select! {
                d = deliveries.next() => match d {
                    Some(d) if cancel.is_cancelled() => {
                        report.released += 1;
                        let _ = d.release().await;
                    }
                    Some(d) => {
                        let h = handler.clone();
                        tasks.spawn(handle(d, h, lease, auto_extend, hard_stop.clone()));
                    }
                    None => break,
                },
                Some(r) = tasks.join_next(), if !tasks.is_empty() => count(&mut report, r),
            }
        }
        let drain = async {
            while let Some(r) = tasks.join_next().await {
                count(&mut report, r);
            }
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            hard_stop.cancel();
            while let Some(r) = tasks.join_next().await {
                count(&mut report, r);
            }
        }
        Ok(report)
    }
}

enum Ended {
    Acked,
    Retried,
    Dead,
    Released,
    Failed,
}

fn count(report: &mut RunReport, r: std::result::Result<Ended, tokio::task::JoinError>) {
    match r {
        Ok(Ended::Acked) => report.acked += 1,
        Ok(Ended::Retried) => report.retried += 1,
        Ok(Ended::Dead) => report.dead += 1,
        Ok(Ended::Released) => report.released += 1,
        Ok(Ended::Failed) | Err(_) => report.failed_settles += 1,
    }
}

async fn handle<H, F>(
    d: Delivery,
    handler: Arc<H>,
    lease: Duration,
    auto_extend: bool,
    hard: CancellationToken,
) -> Ended
where
    H: Fn(Received) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    let fut = handler(d.message().clone());
    tokio::pin!(fut);
    let period = (lease / 3).max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let outcome = loop {
        tokio::select! {
            o = &mut fut => break o,
            _ = tick.tick(), if auto_extend => {
                if let Err(e) = d.extend(lease).await {
                    tracing::warn!("could not extend a lease: {e}");
                }
            }
            _ = hard.cancelled() => {
                return match d.release().await { Ok(()) => Ended::Released, Err(_) => Ended::Failed };
            }
        }
    };
    let r = match outcome {
        Outcome::Ack => d.ack().await.map(|_| Ended::Acked),
        Outcome::Retry { after, error } => d.nack(after, &error).await.map(|s| match s {
            Settled::Dead => Ended::Dead,
            _ => Ended::Retried,
        }),
        Outcome::Dead { error } => d.dead(&error).await.map(|_| Ended::Dead),
    };
    r.unwrap_or_else(|e| {
        tracing::warn!("could not end a delivery: {e}");
        Ended::Failed
    })
}

/// A stream of deliveries; see [`ConsumerBuilder::stream`]. Dropping it
/// stops the consumer.
pub struct Deliveries {
    rx: mpsc::Receiver<Delivery>,
    _stop: tokio_util::sync::DropGuard,
}

impl Stream for Deliveries {
    type Item = Delivery;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.rx.poll_recv(cx)
    }
}
