//! The handler API: [`ConsumerBuilder::run`] runs a handler per message, up
//! to the consumer's concurrency, and ends each delivery by the handler's
//! [`Outcome`]. The lease is extended beside a long handler
//! ([`Delivery::while_held`]), a lost slot lease (serial mode) stops it at
//! once, and at shutdown running handlers get a grace period before their
//! messages are given back untouched.
//!
//! A handler's task handles, next, the message its own end took (take on
//! settle, `chain.rs`): a run of messages of one slot costs no new task
//! and no pass through the consumer's stream, only Redis's reply and the
//! handler's call back to it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::consumer::life::delivery::settler::{Op, Settled};
use crate::consumer::life::delivery::{nack, Delivery, LeaseLost};
use crate::consumer::ConsumerBuilder;
use crate::error::Result;
use crate::group::validate_group;
use crate::message::Received;

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
    /// Deliveries that ended because their message was cancelled in flight.
    pub cancelled: u64,
    /// Settles that failed (stale lease or Redis unreachable): those
    /// messages are redelivered after their lease.
    pub failed_settles: u64,
}

impl ConsumerBuilder {
    /// Runs `handler` on every message until `cancel` fires, up to the
    /// concurrency at once, and ends each delivery by the handler's
    /// [`Outcome`]. Long handlers get their lease extended.
    pub async fn run<H, F>(self, cancel: CancellationToken, handler: H) -> Result<RunReport>
    where
        H: Fn(Received) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        if let Some(c) = &self.serial {
            validate_group(&c.group)?;
        }
        let worker = Arc::new(Worker {
            topic: self.topic.clone(),
            handler,
            auto_extend: self.auto_extend,
            handler_timeout: self.handler_timeout,
            cancel: cancel.clone(),
            hard_stop: CancellationToken::new(),
            tally: Tally::default(),
        });
        let grace = self.grace;
        let mut deliveries = self.stream(cancel.clone());
        let mut tasks: JoinSet<()> = JoinSet::new();
        loop {
            tokio::select! {
                d = deliveries.next() => match d {
                    Some(d) if cancel.is_cancelled() => {
                        worker.tally.add(&Ended::Released);
                        let _ = d.release().await;
                    }
                    Some(d) => {
                        tasks.spawn(worker.clone().handle_run(d));
                    }
                    None => break,
                },
                Some(r) = tasks.join_next(), if !tasks.is_empty() => worker.tally.joined(r),
            }
        }
        let drain = async {
            while let Some(r) = tasks.join_next().await {
                worker.tally.joined(r);
            }
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            worker.hard_stop.cancel();
            while let Some(r) = tasks.join_next().await {
                worker.tally.joined(r);
            }
        }
        let stopped = deliveries.stopped_by();
        deliveries.close().await;
        match stopped {
            Some(e) => Err(e),
            None => Ok(worker.tally.report()),
        }
    }
}

/// What every handler task of one `run` shares.
struct Worker<H> {
    topic: crate::topic::Topic,
    handler: H,
    auto_extend: bool,
    /// The consumer's own handler timeout (None: the topic's).
    handler_timeout: Option<Duration>,
    cancel: CancellationToken,
    /// Fired when the grace period is over: running handlers stop.
    hard_stop: CancellationToken,
    tally: Tally,
}

impl<H, F> Worker<H>
where
    H: Fn(Received) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    /// Handles `d`, then each message its end took (see the module docs),
    /// until an end takes none; once the consumer is stopping, what an end
    /// took goes back untouched.
    async fn handle_run(self: Arc<Self>, d: Delivery) {
        use tracing::Instrument;
        let name = self.topic.name().to_string();
        let mut d = d;
        loop {
            // The lease as it is now (an update changes it).
            let lease = Duration::from_millis(self.topic.spec().lease_ms);
            let span = crate::observe::process_span(d.message());
            let started = std::time::Instant::now();
            let (ended, next) = self.handle(d, lease).instrument(span).await;
            let secs = started.elapsed().as_secs_f64();
            crate::observe::handled(&name, ended.name(), secs);
            self.tally.add(&ended);
            let Some(next) = next else {
                return;
            };
            if self.cancel.is_cancelled() {
                self.tally.add(&Ended::Released);
                let _ = next.release().await;
                return;
            }
            d = next;
        }
    }

    /// Runs the handler on `d` and ends it by the outcome; returns how it
    /// ended and what its end took.
    async fn handle(&self, mut d: Delivery, lease: Duration) -> (Ended, Option<Delivery>) {
        // The topic's timeout as it is now (an update changes it).
        let limit = self
            .handler_timeout
            .unwrap_or_else(|| Duration::from_millis(self.topic.spec().handler_timeout_ms));
        let work = timed((self.handler)(d.hand_to_handler()), limit);
        let outcome = tokio::select! {
            r = d.while_held(work, lease, self.auto_extend) => match r {
                Ok(o) => o,
                Err(LeaseLost) => {
                    tracing::warn!(
                        slot = d.slot,
                        "slot lease lost: handler stopped, its message goes to the new owner"
                    );
                    return (Ended::Failed, None);
                }
            },
            () = self.hard_stop.cancelled() => {
                let ended = match d.release().await {
                    Ok(()) => Ended::Released,
                    Err(_) => Ended::Failed,
                };
                return (ended, None);
            }
        };
        let (op, counts_as): (Op, fn(Settled) -> Ended) = match outcome {
            Outcome::Ack => (Op::Ack, |_| Ended::Acked),
            Outcome::Retry { after, error } => (nack(after, &error), |s| match s {
                Settled::Dead => Ended::Dead,
                Settled::Cancelled => Ended::Cancelled,
                _ => Ended::Retried,
            }),
            Outcome::Dead { error } => (Op::Dead { error }, |s| match s {
                Settled::Cancelled => Ended::Cancelled,
                _ => Ended::Dead,
            }),
        };
        let (r, next) = d.end_and_next(op).await;
        let ended = r.map(counts_as).unwrap_or_else(|e| {
            tracing::warn!("could not end a delivery: {e}");
            Ended::Failed
        });
        (ended, next)
    }
}

/// The handler's work, limited to `limit` (none when zero): past it the
/// work is dropped and the outcome is a retry, `timed out after …`.
async fn timed<F>(work: F, limit: Duration) -> Outcome
where
    F: Future<Output = Outcome>,
{
    if limit.is_zero() {
        return work.await;
    }
    match tokio::time::timeout(limit, work).await {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::warn!(
                timeout_ms = limit.as_millis() as u64,
                "handler timed out: its message is retried"
            );
            Outcome::retry(timed_out(limit))
        }
    }
}

/// The error of a delivery whose handler ran past `limit` ("timed out
/// after 2s", "timed out after 1.5s").
fn timed_out(limit: Duration) -> String {
    format!("timed out after {limit:?}")
}

/// Counts of what the handler tasks did, kept as they go (a task that
/// panics loses none of what it counted before).
#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    released: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    fn add(&self, ended: &Ended) {
        let counter = match ended {
            Ended::Acked => &self.acked,
            Ended::Retried => &self.retried,
            Ended::Dead => &self.dead,
            Ended::Released => &self.released,
            Ended::Cancelled => &self.cancelled,
            Ended::Failed => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A handler task ended: one that panicked (its handler did) counts
    /// as a failed settle, its message being redelivered after its nack.
    fn joined(&self, r: std::result::Result<(), tokio::task::JoinError>) {
        if r.is_err() {
            self.add(&Ended::Failed);
        }
    }

    fn report(&self) -> RunReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RunReport {
            acked: get(&self.acked),
            retried: get(&self.retried),
            dead: get(&self.dead),
            released: get(&self.released),
            cancelled: get(&self.cancelled),
            failed_settles: get(&self.failed),
        }
    }
}

enum Ended {
    Acked,
    Retried,
    Dead,
    Released,
    Cancelled,
    Failed,
}

impl Ended {
    /// The `outcome` label of the handler metrics.
    fn name(&self) -> &'static str {
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
