//! One consumer pool over several topics ([`Pool`]): a fixed number of
//! deliveries in flight at once across all of them, shared among the topics
//! so that a topic whose downstream saturates does not take the pool from
//! the others — the original design's planned next step ("regulate the
//! consumption speed per message type, so that a bottleneck in one type of
//! message does not drag down consumption as a whole").
//!
//! Each topic gets its own consumer (its own fetch loop, settler and
//! wake-ups, exactly as alone) behind a [`Gate`]: a semaphore whose size is
//! the topic's share of the pool, resized every 100 ms. With adaptive
//! throttling (the default) a topic's share follows its handler's latency
//! and failures (`flow/limiter.rs`); without it, the shares are fixed: the pool
//! split by weight, each topic capped at its maximum (what a capped topic
//! leaves goes to the others). Either way a shared pool semaphore caps the
//! total, also while shares move. Flow control only decides how many of a topic run, never
//! which message first: priorities and serial mode hold within each topic.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::SelectAll;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::flow::{resize, Gate};
use super::flow::{PoolLimits, Share};
use super::{ConsumerBuilder, Deliveries, Outcome, RunReport};
use crate::error::Result;
use crate::message::Received;
use crate::topic::Topic;

/// How often shares are recomputed.
const TICK: Duration = Duration::from_millis(100);

/// A consumer pool over several topics; see the module docs.
#[derive(Debug)]
pub struct Pool {
    topics: Vec<Topic>,
    concurrency: usize,
    batch: usize,
    adaptive: bool,
    shares: BTreeMap<String, Share>,
    grace: Duration,
    serial: Option<(String, Option<Duration>, Option<Duration>)>,
    coordinator: Option<Arc<dyn crate::Coordinator>>,
    limits: PoolLimits,
    /// [`Pool::max_deliveries`]: one budget for all the topics.
    budget: Option<Arc<super::flow::Budget>>,
}

impl Pool {
    /// A pool over `topics` (64 at once in all, adaptive, equal weights).
    pub fn new(topics: impl IntoIterator<Item = Topic>) -> Pool {
        Pool {
            topics: topics.into_iter().collect(),
            concurrency: 64,
            batch: 64,
            adaptive: true,
            shares: BTreeMap::new(),
            grace: Duration::from_secs(30),
            serial: None,
            coordinator: None,
            limits: PoolLimits::default(),
            budget: None,
        }
    }
    /// At most `n` deliveries over the pool's whole life, across all its
    /// topics, then it ends (see [`crate::ConsumerBuilder::max_deliveries`]).
    pub fn max_deliveries(mut self, n: u64) -> Self {
        self.budget = Some(super::flow::Budget::new(n));
        self
    }
    /// Deliveries in flight at once across all topics; default 64.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
    /// Messages taken per round trip per topic at most; default 64.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, 1_000);
        self
    }
    /// Adaptive per-topic throttling (default on). Off, the shares are
    /// fixed: the pool split by weight, each topic capped at its maximum
    /// ([`Pool::share`]).
    pub fn adaptive(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }
    /// A topic's weight and bounds.
    pub fn share(mut self, topic: impl Into<String>, share: Share) -> Self {
        self.shares.insert(topic.into(), share);
        self
    }
    /// `run`: how long to wait for running handlers at shutdown; default 30 s.
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }
    /// Serial mode in consumer group `group`, on every topic (see
    /// [`ConsumerBuilder::serial`]).
    pub fn serial(mut self, group: impl Into<String>) -> Self {
        self.serial = Some((group.into(), None, None));
        self
    }
    /// Serial mode: a member silent this long is gone (default 6 s).
    pub fn member_timeout(mut self, d: Duration) -> Self {
        if let Some(s) = self.serial.as_mut() {
            s.1 = Some(d);
        }
        self
    }
    /// Serial mode: how long a slot lease lasts unless renewed (default 6 s).
    pub fn slot_lease(mut self, d: Duration) -> Self {
        if let Some(s) = self.serial.as_mut() {
            s.2 = Some(d);
        }
        self
    }
    /// Serial mode: another membership backend than Redis (see
    /// [`ConsumerBuilder::coordinator`]).
    pub fn coordinator(mut self, c: Arc<dyn crate::Coordinator>) -> Self {
        self.coordinator = Some(c);
        self
    }
    /// A handle on the limits per topic while the pool runs.
    pub fn limits(&self) -> PoolLimits {
        self.limits.clone()
    }

    /// The consumers, one per topic, each behind its gate, and the task
    /// that resizes the gates until `cancel` fires.
    fn consumers(self, cancel: &CancellationToken) -> Vec<ConsumerBuilder> {
        let pool = Arc::new(Semaphore::new(self.concurrency));
        let mut gates = Vec::with_capacity(self.topics.len());
        let mut out = Vec::with_capacity(self.topics.len());
        for topic in &self.topics {
            let s = self.shares.get(topic.name()).copied().unwrap_or_default();
            let max = if s.max == 0 {
                self.concurrency
            } else {
                s.max.min(self.concurrency)
            };
            let gate = Arc::new(Gate::new(topic.name(), s, max, self.adaptive));
            let mut c = topic
                .consumer()
                .concurrency(max)
                .batch(self.batch)
                .shutdown_grace(self.grace);
            if let Some((group, timeout, lease)) = &self.serial {
                c = c.serial(group.clone());
                if let Some(d) = timeout {
                    c = c.member_timeout(*d);
                }
                if let Some(d) = lease {
                    c = c.slot_lease(*d);
                }
                if let Some(coordinator) = &self.coordinator {
                    c = c.coordinator(coordinator.clone());
                }
            }
            c.gate = Some(gate.clone());
            c.pool = Some(pool.clone());
            c.budget = self.budget.clone();
            gates.push(gate);
            out.push(c);
        }
        let limits = self.limits.clone();
        let (total, stop) = (self.concurrency, cancel.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tokio::select! {
                    _ = tick.tick() => resize(&gates, total, &limits),
                    () = stop.cancelled() => {
                        gates.iter().for_each(|g| g.close());
                        return;
                    }
                }
            }
        });
        out
    }

    /// The deliveries of all topics as one stream, until `cancel` fires.
    /// End each delivery (see [`Delivery`](crate::Delivery)): how long it
    /// took and whether it failed is what adapts its topic's share.
    pub fn stream(self, cancel: CancellationToken) -> PoolDeliveries {
        let consumers = self.consumers(&cancel);
        let mut all = SelectAll::new();
        for c in consumers {
            all.push(c.stream(cancel.clone()));
        }
        PoolDeliveries { all }
    }

    /// Runs `handler` on every message of every topic until `cancel`
    /// fires, as [`ConsumerBuilder::run`] does for one topic; the counts
    /// are summed over the topics.
    pub async fn run<H, F>(self, cancel: CancellationToken, handler: H) -> Result<RunReport>
    where
        H: Fn(Received) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let runs = self.consumers(&cancel).into_iter().map(|c| {
            let h = handler.clone();
            c.run(cancel.clone(), move |m| h(m))
        });
        let mut total = RunReport::default();
        for r in futures::future::join_all(runs).await {
            let r = r?;
            total.acked += r.acked;
            total.retried += r.retried;
            total.dead += r.dead;
            total.released += r.released;
            total.cancelled += r.cancelled;
            total.failed_settles += r.failed_settles;
        }
        Ok(total)
    }
}

/// The deliveries of a [`Pool`]'s topics, merged.
pub struct PoolDeliveries {
    all: SelectAll<Deliveries>,
}

impl PoolDeliveries {
    /// Why a topic's stream ended by itself, if one did.
    pub fn stopped_by(&self) -> Option<crate::Error> {
        self.all.iter().find_map(Deliveries::stopped_by)
    }

    /// Stops taking messages on every topic (see [`Deliveries::close`]).
    pub async fn close(self) {
        for d in self.all.into_iter() {
            d.close().await;
        }
    }
}

impl futures::Stream for PoolDeliveries {
    type Item = crate::Delivery;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::pin::Pin::new(&mut self.all).poll_next(cx)
    }
}
