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

pub(crate) use fetcher::{parse_pop, pop_call};
pub(crate) use settler::Settler;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use delivery::{Delivery, LeaseLost};
pub use settler::Settled;

use crate::error::Result;
use crate::group::{
    keep_leases, validate_group, Coordinator, Ownership, RedisCoordinator, SerialConfig,
};
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
    pub(crate) notify: Notify,
    /// Serial mode: the slots this consumer owns.
    pub(crate) ownership: Option<Mutex<Ownership>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn schedule(&self) -> MutexGuard<'_, Schedule> {
        self.lock()
    }

    pub(crate) fn own<'a>(&self, o: &'a Mutex<Ownership>) -> MutexGuard<'a, Ownership> {
        o.lock().unwrap_or_else(|p| p.into_inner())
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
    serial: Option<SerialConfig>,
    coordinator: Option<Arc<dyn Coordinator>>,
}

impl std::fmt::Debug for dyn Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Coordinator")
    }
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
            serial: None,
            coordinator: None,
        }
    }
}

impl Topic {
    /// Takes up to `max` due messages right now, without waiting, slot by
    /// slot from slot 0 (no cross-slot priority order). For tools, scripts
    /// and tests; a long-running consumer should use [`Topic::consumer`].
    pub async fn take(&self, max: usize) -> Result<Vec<Delivery>> {
        let settler = settler::Settler::spawn(self.clone());
        let mut out: Vec<Delivery> = Vec::new();
        for slot in 0..self.spec().slots {
            // Per call at most 1000 (the pop script's own limit).
            loop {
                let want = (max - out.len()).min(1_000);
                if want == 0 {
                    break;
                }
                let (id, cmd) = fetcher::pop_call(self, slot, want, None);
                let v = match self.redis().run_one(id, cmd).await {
                    Ok(v) => v,
                    Err(e) => {
                        for d in out {
                            let _ = d.release().await;
                        }
                        return Err(e);
                    }
                };
                let popped = fetcher::parse_pop(self.spec(), slot, crate::value::items(v));
                let got = popped.messages.len();
                out.extend(
                    popped
                        .messages
                        .into_iter()
                        .map(|m| Delivery::new(m, settler.clone(), None, None)),
                );
                if got < want {
                    break;
                }
            }
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

    /// Serial mode in consumer group `group`: every slot is owned by one
    /// member of the group at a time (a lease with a fencing epoch), and
    /// each member handles its slots' messages one at a time per slot, so
    /// all messages of one slot basis are handled strictly one after the
    /// other across all processes. Members share the slots by rendezvous
    /// hashing. See the crate docs for the guarantee and its limits.
    pub fn serial(mut self, group: impl Into<String>) -> Self {
        let cfg = self.serial.take().unwrap_or(SerialConfig {
            group: String::new(),
            member_timeout: Duration::from_secs(6),
            lease_ttl: Duration::from_secs(6),
        });
        self.serial = Some(SerialConfig {
            group: group.into(),
            ..cfg
        });
        self
    }
    /// Serial mode: a member silent this long is gone (default 6 s).
    pub fn member_timeout(mut self, d: Duration) -> Self {
        if let Some(c) = self.serial.as_mut() {
            c.member_timeout = d.max(Duration::from_millis(50));
        }
        self
    }
    /// Serial mode: how long a slot lease lasts unless renewed (default 6 s);
    /// it bounds the handover time after a crash.
    pub fn slot_lease(mut self, d: Duration) -> Self {
        if let Some(c) = self.serial.as_mut() {
            c.lease_ttl = d.max(Duration::from_millis(50));
        }
        self
    }
    /// Serial mode: another membership backend than Redis (fencing stays in Redis).
    pub fn coordinator(mut self, c: Arc<dyn Coordinator>) -> Self {
        self.coordinator = Some(c);
        self
    }

    /// Deliveries as a stream, until `cancel` fires; then the stream yields
    /// what was already taken and ends. End each delivery (see [`Delivery`]).
    ///
    /// Serial mode: the group name is checked when the stream starts; an
    /// invalid one ends the stream at once (use [`ConsumerBuilder::run`] to
    /// get the error).
    pub fn stream(self, cancel: CancellationToken) -> Deliveries {
        let spec = self.topic.spec();
        let member: Arc<str> = format!("{:016x}", rand::random::<u64>()).into();
        let shared = Arc::new(Shared {
            schedule: Mutex::new(Schedule::new(spec.kind, spec.slots)),
            notify: Notify::new(),
            ownership: self
                .serial
                .as_ref()
                .map(|_| Mutex::new(Ownership::new(member.clone()))),
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
            shared.clone(),
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
        let invalid = self
            .serial
            .as_ref()
            .is_some_and(|c| validate_group(&c.group).is_err());
        let keeper = self.serial.filter(|_| !invalid).map(|cfg| {
            let coordinator = self.coordinator.clone().unwrap_or_else(|| {
                Arc::new(RedisCoordinator::new(
                    self.topic.clone(),
                    &cfg.group,
                    cfg.member_timeout,
                ))
            });
            let keeper_stop = CancellationToken::new();
            let handle = tokio::spawn(keep_leases(
                self.topic.clone(),
                shared.clone(),
                coordinator,
                cfg,
                keeper_stop.clone(),
            ));
            (keeper_stop, handle)
        });
        if invalid {
            stop.cancel();
        }
        Deliveries {
            rx,
            stop: stop.clone(),
            _stop: stop.drop_guard(),
            keeper,
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
        if let Some(c) = &self.serial {
            validate_group(&c.group)?;
        }
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
        deliveries.close().await;
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
    stop: CancellationToken,
    _stop: tokio_util::sync::DropGuard,
    keeper: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl Deliveries {
    /// Stops taking messages and, in serial mode, releases the slot leases
    /// and leaves the group, so that other members take over at once.
    /// Deliveries still held can no longer be settled after this.
    pub async fn close(mut self) {
        self.stop.cancel();
        // Taken but never handed out: give back untouched (no attempt counted).
        self.rx.close();
        while let Ok(d) = self.rx.try_recv() {
            let _ = d.release().await;
        }
        if let Some((stop, handle)) = self.keeper.take() {
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
        }
    }
}

impl Drop for Deliveries {
    fn drop(&mut self) {
        self.stop.cancel();
        self.rx.close();
        while let Ok(d) = self.rx.try_recv() {
            d.release_detached();
        }
        if let Some((stop, _)) = &self.keeper {
            stop.cancel();
        }
    }
}

impl Stream for Deliveries {
    type Item = Delivery;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.rx.poll_recv(cx)
    }
}
