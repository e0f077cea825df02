//! What [`ConsumerBuilder::stream`] starts: the fetch loop, how the
//! consumer finds work (wake-up notices, and the marks on a single node or
//! slot affinity on a cluster), the chain that lets a settle take the next
//! messages, and a serial member's lease keeper.

use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::discovery::{affinity, marks, wake};
use super::flow::room;
use super::life::delivery::settler::{chain, Settler};
use super::life::fetcher;
use super::{ConsumerBuilder, Delivery, Shared};
use crate::group::{keep_leases, RedisCoordinator};
use crate::topic::Topic;

/// How a consumer learns of work besides its rescans.
pub(super) struct Finding {
    /// A parallel consumer on a single node waits on the marks: one
    /// consumer per new head, no thundering herd.
    pub(super) marks: bool,
    /// A parallel consumer on a cluster, where a wait cannot span hash
    /// slots: the consumers split the slots and each acts on its own
    /// slots' notices.
    pub(super) affinity: bool,
}

impl Finding {
    /// Both need the head index (to take over work that waits); serial
    /// members own their slots and need neither.
    pub(super) fn of(b: &ConsumerBuilder) -> Finding {
        let redis = b.topic.redis();
        let parallel = b.serial.is_none() && redis.head_index;
        Finding {
            marks: parallel && !redis.is_cluster(),
            affinity: parallel && redis.is_cluster(),
        }
    }

    /// Starts the listener of wake-up notices, and the marks' waiter or
    /// the affinity keeper; returns the keeper's task.
    pub(super) fn spawn(
        &self,
        topic: &Topic,
        shared: &Arc<Shared>,
        member: &Arc<str>,
        stop: &CancellationToken,
    ) -> Option<JoinHandle<()>> {
        tokio::spawn(wake::listen(topic.clone(), shared.clone(), stop.clone()));
        if self.marks {
            tokio::spawn(marks::wait(topic.clone(), shared.clone(), stop.clone()));
        }
        self.affinity.then(|| {
            tokio::spawn(affinity::keep(
                topic.clone(),
                shared.clone(),
                member.clone(),
                stop.clone(),
            ))
        })
    }
}

impl ConsumerBuilder {
    /// The chain that lets a settle take the slot's next messages (none
    /// when turned off, or under a delivery budget, which counts each
    /// delivery before it is taken).
    pub(super) fn chain(
        &self,
        shared: &Arc<Shared>,
        tx: &mpsc::Sender<Delivery>,
        stop: &CancellationToken,
    ) -> Option<Arc<chain::Chain>> {
        (self.take_on_settle && self.budget.is_none()).then(|| {
            let kind = self.topic.spec().kind;
            Arc::new(chain::Chain {
                shared: shared.clone(),
                tx: tx.downgrade(),
                gate: self.gate.clone(),
                stop: stop.clone(),
                fanout: chain::fanout_of(kind, self.serial.is_some(), fetcher::FANOUT)
                    .min(self.concurrency),
                rescan: self.rescan,
                last_turn: std::sync::Mutex::new(std::time::Instant::now()),
            })
        })
    }

    /// Starts the fetch loop (phase one), which hands its deliveries to
    /// `tx` and their ends to `settler`.
    pub(super) fn spawn_fetcher(
        &self,
        shared: &Arc<Shared>,
        settler: Settler,
        permits: Arc<Semaphore>,
        tx: mpsc::Sender<Delivery>,
        stop: &CancellationToken,
    ) {
        let room = room::Room {
            topic: permits,
            pool: self.pool.clone(),
            gate: self.gate.clone(),
            budget: self.budget.clone(),
        };
        let config = fetcher::FetchConfig {
            batch: self.batch.min(self.concurrency),
            concurrency: self.concurrency,
            rescan: self.rescan,
        };
        let f = fetcher::Fetcher::new(
            self.topic.clone(),
            shared.clone(),
            settler,
            room,
            tx,
            config,
            stop.clone(),
        );
        tokio::spawn(fetcher::fetch_loop(f));
    }

    /// A serial member's membership and lease keeper, with the token that
    /// stops the keeper (None in parallel mode).
    pub(super) fn keeper(
        &self,
        shared: &Arc<Shared>,
        member: &Arc<str>,
    ) -> Option<(CancellationToken, Option<JoinHandle<()>>)> {
        let cfg = self.serial.clone()?;
        let coordinator = self
            .coordinator
            .clone()
            .unwrap_or_else(|| Arc::new(RedisCoordinator::new(self.topic.clone())));
        let membership = coordinator.join(
            &self.topic.group_ref(&cfg.group, cfg.member_timeout),
            member,
        );
        let keeper_stop = CancellationToken::new();
        let handle = shared.ownership.clone().map(|own| {
            tokio::spawn(keep_leases(
                self.topic.clone(),
                own,
                shared.clone(),
                membership,
                cfg,
                keeper_stop.clone(),
            ))
        });
        Some((keeper_stop, handle))
    }
}
