//! Consuming: a [`Stream`] of [`Delivery`]s ([`ConsumerBuilder::stream`]) or
//! a handler run with a chosen concurrency ([`ConsumerBuilder::run`]).
//!
//! The wing has three parts, each deciding one thing, and imports go one
//! way only: `life` uses `flow` and `discovery`, `flow` and `discovery`
//! use neither (`tests/layering.rs` fails on a circle at any level):
//! - `discovery/`: **where work is** and when to look again: the schedule
//!   of slots, the head index, the wake-up notices, the marks (Redis hands
//!   each new head to one waiting consumer, not to all) or slot affinity
//!   on a cluster, and the pop call whose reply tells a slot's new head;
//! - `flow/`: **how much to take**: the consumer's own room, a pool's gate
//!   and its adaptive limiter, a lifetime budget, the topic's rate limit
//!   and in-flight cap;
//! - `life/`: **a delivery from pop to settle**: the fetch loop (phase
//!   one), the [`Delivery`] and its settler (phase two, batched, whose
//!   calls may take the next messages), the handler API (`run`), and
//!   taking by hand (a tool's `take`, receipts, HTTP's on-demand engine,
//!   a remote serial member).
//!
//! This file configures a consumer and `wiring.rs` starts its parts;
//! `pool.rs` runs one consumer per topic behind a shared pool. Serial
//! mode's ownership, leases and claims live in `crate::group`, which
//! knows nothing of this module. Idle, a consumer sleeps until the
//! earliest due time it knows of, a notice of a new message, or a rescan
//! (every 5 s by default): a handful of Redis calls a second at most.
//!
//! Shutdown takes two steps: cancel the token and the consumer stops taking
//! messages; `run` then waits up to the grace period for running handlers
//! and releases (gives back, uncounted) whatever did not start or finish.

mod discovery;
mod flow;
mod life;
mod pool;
mod wiring;

pub(crate) use discovery::Shared;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use flow::{PoolLimits, Share, TopicLimit};
pub use life::{Delivery, LeaseLost};
pub use life::{Ending, Receipt, ReceiptKey};
pub use life::{OnDemand, SerialMember};
pub use life::{Outcome, RunReport};
pub use pool::{Pool, PoolDeliveries};

use crate::group::{validate_group, Coordinator, SerialConfig};
use crate::topic::Topic;

/// How long closing a stream waits at most for the settles and permit
/// frees still on their way (Redis unreachable: they are lost, and the
/// permits run out at their deadline).
const CLOSE_SETTLES_LIMIT: Duration = Duration::from_secs(5);

/// Configures a consumer; get one from [`Topic::consumer`].
#[derive(Debug, Clone)]
pub struct ConsumerBuilder {
    topic: Topic,
    concurrency: usize,
    batch: usize,
    rescan: Duration,
    auto_extend: bool,
    /// `run`: how long a handler may run (None: the topic's setting).
    handler_timeout: Option<Duration>,
    grace: Duration,
    serial: Option<SerialConfig>,
    coordinator: Option<Arc<dyn Coordinator>>,
    take_on_settle: bool,
    /// In a [`Pool`]: the topic's gate (its share of the pool).
    gate: Option<Arc<flow::Gate>>,
    /// In a [`Pool`]: the pool's slots, shared by its topics.
    pool: Option<Arc<Semaphore>>,
    /// [`ConsumerBuilder::max_deliveries`] (in a pool: shared by its topics).
    budget: Option<Arc<flow::Budget>>,
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
            handler_timeout: None,
            grace: Duration::from_secs(30),
            serial: None,
            coordinator: None,
            take_on_settle: true,
            gate: None,
            pool: None,
            budget: None,
        }
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
    /// How often the consumer looks again even without a notice (the
    /// safety net); default 5 s. On one Redis that is one read of the
    /// topic's head index and a look at four slots in turn; on a cluster, a
    /// look at every slot. On one Redis it also bounds how late a parallel
    /// consumer takes work whose mark went to a consumer that died, and a
    /// delivery whose lease ran out (both are taken at the first rescan
    /// that finds them overdue).
    pub fn rescan(mut self, every: Duration) -> Self {
        self.rescan = every.max(Duration::from_millis(10));
        self
    }
    /// `run`: extend the lease of a handler that runs long (default on).
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }
    /// `run`: how long a handler may run on one delivery before its future
    /// is dropped and the message retried with the error `timed out after
    /// …` (default: the topic's [`handler_timeout_ms`](crate::TopicSpec::handler_timeout_ms),
    /// none when that is 0; `Duration::ZERO` here turns it off for this
    /// consumer). A hung handler would otherwise hold its message forever,
    /// its lease extended while it runs.
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.handler_timeout = Some(limit);
        self
    }
    /// Takes at most `n` deliveries over the consumer's whole life, then
    /// ends (the stream ends once they are handed out; `run` returns once
    /// they are handled): never one more than that, so a run that wants
    /// `n` messages moves no other. Taking on settle is off under it.
    pub fn max_deliveries(mut self, n: u64) -> Self {
        self.budget = Some(flow::Budget::new(n));
        self
    }

    /// Whether a delivery that ends (ack, nack, dead letter) takes its
    /// slot's next due message in the same call (default on): a consumer
    /// at concurrency 1 makes one round trip per message, not two. It
    /// takes only where the fetch loop would: not on a topic with a rate
    /// limit or an in-flight cap, and only from a slot that ranks among
    /// the next the consumer would pop (best priority, or earliest due).
    /// Off: every message is taken by the fetch loop, as before.
    pub fn take_on_settle(mut self, on: bool) -> Self {
        self.take_on_settle = on;
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
    /// Serial mode: another membership backend than Redis, e.g. ZooKeeper
    /// with the `rmq-zk` crate (fencing stays in Redis, so safety never
    /// depends on it).
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
        let finding = wiring::Finding::of(&self);
        let shared = Arc::new(Shared::new(
            spec.kind,
            spec.slots,
            self.serial.as_ref().map(|_| member.clone()),
            finding.marks,
            finding.affinity,
        ));
        let permits = match &self.gate {
            Some(g) => g.sem.clone(),
            None => Arc::new(Semaphore::new(self.concurrency)),
        };
        let (tx, rx) = mpsc::channel(self.concurrency);
        let stop = cancel.child_token();
        let chain = self.chain(&shared, &tx, &stop);
        let settler =
            life::Settler::spawn_with(self.topic.clone(), flow::Permits::new(&self.topic), chain);
        let settles = settler.load();
        let affinity = finding.spawn(&self.topic, &shared, &member, &stop);
        self.spawn_fetcher(&shared, settler, permits, tx, &stop);
        let invalid = self
            .serial
            .as_ref()
            .is_some_and(|c| validate_group(&c.group).is_err());
        let keeper = match invalid {
            true => None,
            false => self.keeper(&shared, &member),
        };
        if invalid {
            stop.cancel();
        }
        Deliveries {
            rx,
            stop: stop.clone(),
            _stop: stop.drop_guard(),
            keeper,
            affinity,
            shared,
            settles,
        }
    }
}

/// A stream of deliveries; see [`ConsumerBuilder::stream`]. Dropping it
/// stops the consumer.
pub struct Deliveries {
    rx: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    _stop: tokio_util::sync::DropGuard,
    keeper: Option<(CancellationToken, Option<tokio::task::JoinHandle<()>>)>,
    /// Slot affinity's membership task: it leaves as the stream stops.
    affinity: Option<tokio::task::JoinHandle<()>>,
    shared: Arc<Shared>,
    /// The settling task's work in hand, waited for on close.
    settles: Arc<life::Load>,
}

impl Deliveries {
    /// Why the stream ended by itself, if it did: its topic was deleted
    /// ([`ErrorKind::UnknownTopic`](crate::ErrorKind::UnknownTopic)).
    pub fn stopped_by(&self) -> Option<crate::Error> {
        self.shared.stopped()
    }

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
        // The last deliveries' settles and permit frees may still be on
        // their way to Redis (a dropped delivery's free is sent, not
        // awaited): done before this returns, and before a serial member
        // gives its slots up.
        self.settles.drained(CLOSE_SETTLES_LIMIT).await;
        // Out of the split before this returns (a leave is one call, with
        // a time limit), so that the others take its slots at once and a
        // topic deleted meanwhile keeps no membership.
        if let Some(handle) = self.affinity.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
        }
        if let Some((stop, handle)) = self.keeper.take() {
            stop.cancel();
            if let Some(handle) = handle {
                let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
            }
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
