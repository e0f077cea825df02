//! The handler API: [`ConsumerBuilder::run`] runs a handler per message, up
//! to the consumer's concurrency, and ends each delivery by the handler's
//! [`Outcome`]. The lease is extended beside a long handler
//! ([`Delivery::while_held`]), a lost slot lease (serial mode) stops it at
//! once, and at shutdown running handlers get a grace period before their
//! messages are given back untouched.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::delivery::{Delivery, LeaseLost};
use super::settler::Settled;
use super::ConsumerBuilder;
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
        let topic = self.topic.clone();
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
                        // The lease as it is now (an update changes it).
                        let lease = Duration::from_millis(topic.spec().lease_ms);
                        let (name, hard) = (topic.name().to_string(), hard_stop.clone());
                        let span = crate::observe::process_span(d.message());
                        tasks.spawn(async move {
                            use tracing::Instrument;
                            let started = std::time::Instant::now();
                            let ended = handle(d, h, lease, auto_extend, hard)
                                .instrument(span)
                                .await;
                            let secs = started.elapsed().as_secs_f64();
                            crate::observe::handled(&name, ended.name(), secs);
                            ended
                        });
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
        let stopped = deliveries.stopped_by();
        deliveries.close().await;
        match stopped {
            Some(e) => Err(e),
            None => Ok(report),
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

fn count(report: &mut RunReport, r: std::result::Result<Ended, tokio::task::JoinError>) {
    match r {
        Ok(Ended::Acked) => report.acked += 1,
        Ok(Ended::Retried) => report.retried += 1,
        Ok(Ended::Dead) => report.dead += 1,
        Ok(Ended::Cancelled) => report.cancelled += 1,
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
    let work = handler(d.message().clone());
    let outcome = tokio::select! {
        r = d.while_held(work, lease, auto_extend) => match r {
            Ok(o) => o,
            Err(LeaseLost) => {
                tracing::warn!(
                    slot = d.slot,
                    "slot lease lost: handler stopped, its message goes to the new owner"
                );
                return Ended::Failed;
            }
        },
        () = hard.cancelled() => {
            return match d.release().await {
                Ok(()) => Ended::Released,
                Err(_) => Ended::Failed,
            };
        }
    };
    let r = match outcome {
        Outcome::Ack => d.ack().await.map(|_| Ended::Acked),
        Outcome::Retry { after, error } => d.nack(after, &error).await.map(|s| match s {
            Settled::Dead => Ended::Dead,
            Settled::Cancelled => Ended::Cancelled,
            _ => Ended::Retried,
        }),
        Outcome::Dead { error } => d.dead(&error).await.map(|s| match s {
            Settled::Cancelled => Ended::Cancelled,
            _ => Ended::Dead,
        }),
    };
    r.unwrap_or_else(|e| {
        tracing::warn!("could not end a delivery: {e}");
        Ended::Failed
    })
}
