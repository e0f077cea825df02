//! Room for deliveries: what a fetch loop must hold before it takes a
//! message (a permit of its own semaphore, in a pool one of the pool's,
//! and under a lifetime budget one of the budget's), and what each
//! delivery holds until it ends.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::consumer::flow::{Budget, Spendable};

/// Where a fetch loop gets room for deliveries: its own semaphore (its
/// concurrency, or in a pool its topic's share) and, in a pool, the pool's
/// slots and the gate its deliveries report to.
pub(crate) struct Room {
    pub(crate) topic: Arc<Semaphore>,
    pub(crate) pool: Option<Arc<Semaphore>>,
    pub(crate) gate: Option<Arc<crate::consumer::flow::Gate>>,
    /// The consumer's lifetime budget, if it has one (`budget.rs`).
    pub(crate) budget: Option<Arc<Budget>>,
}

/// Room for one delivery: a permit of the topic's semaphore and, in a
/// pool, one of the pool's; the delivery holds them until it is dropped.
/// Under a budget, also a budget permit, spent when a delivery is made.
pub(crate) struct Held {
    _topic: OwnedSemaphorePermit,
    _pool: Option<OwnedSemaphorePermit>,
    /// Boxed: only a consumer with a budget pays for it (a settle's
    /// request carries a Held).
    budget: Option<Box<Spendable>>,
}

impl Held {
    /// A delivery is made with this room: its budget permit is spent.
    pub(crate) fn spend(&mut self) {
        if let Some(b) = self.budget.take() {
            b.spend();
        }
    }
}

impl Room {
    /// Waits for room for one delivery. None once the semaphores close
    /// (or the budget is spent).
    pub(crate) async fn acquire(&self) -> Option<Held> {
        let topic = self.topic.clone().acquire_owned().await.ok()?;
        let pool = match &self.pool {
            Some(p) => Some(p.clone().acquire_owned().await.ok()?),
            None => None,
        };
        let budget = match &self.budget {
            Some(b) => Some(Box::new(b.acquire().await?)),
            None => None,
        };
        Some(Held {
            _topic: topic,
            _pool: pool,
            budget,
        })
    }

    /// Room for one delivery if there is some now.
    pub(crate) fn try_acquire(&self) -> Option<Held> {
        let topic = self.topic.clone().try_acquire_owned().ok()?;
        let pool = match &self.pool {
            Some(p) => Some(p.clone().try_acquire_owned().ok()?),
            None => None,
        };
        let budget = match &self.budget {
            Some(b) => Some(Box::new(b.try_acquire()?)),
            None => None,
        };
        Some(Held {
            _topic: topic,
            _pool: pool,
            budget,
        })
    }
}
