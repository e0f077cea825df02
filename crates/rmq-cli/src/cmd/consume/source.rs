//! Where `rmq consume` gets its deliveries: one topic's consumer, or for
//! several comma-separated topics one pool over them (`rmq::Pool`), whose
//! per-topic limits are logged at `-v` when they change and summed up at
//! exit.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rmq::{
    CancellationToken, Coordinator, Deliveries, Delivery, Pool, PoolDeliveries, PoolLimits, Share,
    Topic,
};

use super::ConsumeArgs;

pub(super) enum Source {
    One(Deliveries),
    Pool(PoolDeliveries, PoolLimits),
}

impl Source {
    /// `coordinator`: serial mode's membership backend (None: Redis).
    pub(super) fn start(
        a: &ConsumeArgs,
        topics: Vec<Topic>,
        coordinator: Option<Arc<dyn Coordinator>>,
        cancel: CancellationToken,
    ) -> Source {
        let concurrency = usize::from(a.concurrency);
        if let [topic] = topics.as_slice() {
            let mut c = topic.consumer().concurrency(concurrency);
            if a.serial {
                c = c
                    .serial(a.group.clone())
                    .member_timeout(Duration::from_millis(a.member_timeout))
                    .slot_lease(Duration::from_millis(a.slot_lease));
                if let Some(coordinator) = coordinator {
                    c = c.coordinator(coordinator);
                }
            }
            // --max N: never more taken than will be handled.
            if let Some(max) = a.max {
                c = c.max_deliveries(max);
            }
            return Source::One(c.stream(cancel));
        }
        let pool = pool_of(a, &topics, coordinator);
        let limits = pool.limits();
        tokio::spawn(log_limits(limits.clone(), cancel.clone()));
        Source::Pool(pool.stream(cancel), limits)
    }

    pub(super) async fn next(&mut self) -> Option<Delivery> {
        match self {
            Source::One(d) => d.next().await,
            Source::Pool(d, _) => d.next().await,
        }
    }

    /// Stops taking messages (serial mode: gives the slot leases up).
    pub(super) async fn close(self) {
        match self {
            Source::One(d) => d.close().await,
            Source::Pool(d, _) => d.close().await,
        }
    }

    /// A pool's limits now, as one line (None for a single topic).
    pub(super) fn limits(&self) -> Option<String> {
        match self {
            Source::One(_) => None,
            Source::Pool(_, l) => Some(describe(l)),
        }
    }
}

/// One pool over several topics: each topic's share from `--share-*`,
/// serial mode and `--max` as for one topic.
fn pool_of(a: &ConsumeArgs, topics: &[Topic], coordinator: Option<Arc<dyn Coordinator>>) -> Pool {
    let mut pool = Pool::new(topics.iter().cloned())
        .concurrency(usize::from(a.concurrency))
        .adaptive(!a.no_adaptive);
    for t in topics {
        let of = |list: &[(String, usize)]| {
            list.iter()
                .rev()
                .find(|(name, _)| name == t.name())
                .map(|(_, n)| *n)
        };
        let d = Share::default();
        pool = pool.share(
            t.name(),
            Share {
                weight: of(&a.share_weight)
                    .map_or(d.weight, |w| u32::try_from(w).unwrap_or(u32::MAX)),
                min: of(&a.share_min).unwrap_or(d.min),
                max: of(&a.share_max).unwrap_or(d.max),
            },
        );
    }
    if a.serial {
        pool = pool
            .serial(a.group.clone())
            .member_timeout(Duration::from_millis(a.member_timeout))
            .slot_lease(Duration::from_millis(a.slot_lease));
        if let Some(coordinator) = coordinator {
            pool = pool.coordinator(coordinator);
        }
    }
    if let Some(max) = a.max {
        pool = pool.max_deliveries(max);
    }
    pool
}

/// `fast 58 (40 running), slow 6 (6 running)`.
fn describe(limits: &PoolLimits) -> String {
    limits
        .get()
        .iter()
        .map(|l| format!("{} {} ({} running)", l.topic, l.limit, l.running))
        .collect::<Vec<_>>()
        .join(", ")
}

/// At `-v`: the pool's limits each second they changed.
async fn log_limits(limits: PoolLimits, cancel: CancellationToken) {
    let mut last = Vec::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = cancel.cancelled() => return,
        }
        let now: Vec<usize> = limits.get().iter().map(|l| l.limit).collect();
        if now != last {
            tracing::info!("pool limits: {}", describe(&limits));
            last = now;
        }
    }
}
