//! The forwarder: an rmq consumer whose handler is a broker publish.
//!
//! It consumes with the normal two-phase engine, so everything a consumer
//! promises holds here: a delivery is acked only after its sink returned
//! (the broker confirmed the message), a refused or failed publish is
//! retried after the topic's backoff and becomes a dead letter with the
//! broker's error after the topic's last attempt, and a forwarder that dies
//! leaves its deliveries to come back after their lease. Throughput comes
//! from concurrency: every delivery in flight has its publish in flight on
//! the broker connection, and confirms are awaited together.
//!
//! In serial mode ([`Forwarder::serial`]) a slot has one message in flight
//! at a time, so the broker receives each entity's messages in order (as
//! long as each is confirmed before the next is taken, which is how serial
//! mode works).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmq::{CancellationToken, Outcome, Topic};

use crate::sink::Sink;

/// Deliveries in flight by default: each one a publish awaiting its confirm.
pub const DEFAULT_CONCURRENCY: usize = 256;
/// Messages one pop takes by default.
pub const DEFAULT_BATCH: usize = 64;
/// How long a stopping forwarder waits for the publishes in flight: longer
/// than either sink waits for a confirm, so a publish is never cut off
/// (its delivery released) while the broker may still take it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(45);

/// Forwards one topic's due messages to a [`Sink`].
pub struct Forwarder<S> {
    topic: Topic,
    sink: Arc<S>,
    concurrency: usize,
    batch: usize,
    serial: Option<String>,
    coordinator: Option<Arc<dyn rmq::Coordinator>>,
}

/// What a forwarder did until it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardReport {
    /// Messages the broker confirmed (and rmq then acked).
    pub forwarded: u64,
    /// Of those, messages JetStream already had (same id): stored once.
    pub duplicates: u64,
    /// Publishes that failed and were given back for a retry.
    pub retried: u64,
    /// Messages that became dead letters after their last attempt.
    pub dead: u64,
    /// Deliveries given back unstarted at shutdown.
    pub released: u64,
    /// Acks rmq refused or could not record (the lease had run out, Redis
    /// was unreachable): those messages come back and are published again.
    pub failed_settles: u64,
}

impl<S: Sink> Forwarder<S> {
    /// A forwarder with [`DEFAULT_CONCURRENCY`] and [`DEFAULT_BATCH`].
    pub fn new(topic: Topic, sink: S) -> Forwarder<S> {
        Forwarder {
            topic,
            sink: Arc::new(sink),
            concurrency: DEFAULT_CONCURRENCY,
            batch: DEFAULT_BATCH,
            serial: None,
            coordinator: None,
        }
    }

    /// Publishes in flight at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Messages taken per pop (at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Consumes in serial mode as a member of `group`: one message of a
    /// slot in flight at a time, so each entity's messages reach the
    /// broker in order.
    pub fn serial(mut self, group: impl Into<String>) -> Self {
        self.serial = Some(group.into());
        self
    }

    /// Serial mode: where the group's members meet, e.g. ZooKeeper with
    /// `rmq-zk` (see [`rmq::ConsumerBuilder::coordinator`]); Redis when not set.
    pub fn coordinator(mut self, c: Arc<dyn rmq::Coordinator>) -> Self {
        self.coordinator = Some(c);
        self
    }

    /// Forwards until `cancel` fires (then finishes the publishes in
    /// flight, waiting up to [`SHUTDOWN_GRACE`], and gives back what was
    /// taken but not started) or the consumer stops on an error.
    ///
    /// # Errors
    ///
    /// What [`rmq::ConsumerBuilder::run`] returns (an invalid group name, a
    /// topic that was dropped, Redis refusing the consumer's scripts).
    pub async fn run(self, cancel: CancellationToken) -> rmq::Result<ForwardReport> {
        let duplicates = Arc::new(AtomicU64::new(0));
        let mut consumer = self
            .topic
            .consumer()
            .concurrency(self.concurrency)
            .batch(self.batch)
            .shutdown_grace(SHUTDOWN_GRACE);
        if let Some(group) = self.serial {
            consumer = consumer.serial(group);
            if let Some(c) = self.coordinator {
                consumer = consumer.coordinator(c);
            }
        }
        let sink = self.sink;
        let dups = duplicates.clone();
        let report = consumer
            .run(cancel, move |msg| {
                let sink = sink.clone();
                let dups = dups.clone();
                async move {
                    match sink.publish(&msg).await {
                        Ok(confirmed) => {
                            if confirmed.duplicate {
                                dups.fetch_add(1, Ordering::Relaxed);
                            }
                            Outcome::Ack
                        }
                        Err(e) => {
                            tracing::warn!(topic = %msg.topic, attempt = msg.attempt, error = %e, "publish failed");
                            Outcome::retry(e.to_string())
                        }
                    }
                }
            })
            .await?;
        Ok(ForwardReport {
            forwarded: report.acked,
            duplicates: duplicates.load(Ordering::Relaxed),
            retried: report.retried,
            dead: report.dead,
            released: report.released,
            failed_settles: report.failed_settles,
        })
    }
}
