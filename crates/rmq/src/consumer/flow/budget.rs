//! A consumer's lifetime budget ([`ConsumerBuilder::max_deliveries`]): it
//! takes at most N deliveries over its whole life, so that a run that
//! wants N messages (`rmq consume --max N`) never takes one more than it
//! will handle (a message taken and given back untouched was still moved
//! and its slot touched).
//!
//! The budget is a semaphore of N permits. The fetch loop takes one with
//! the room for each delivery it may make; a permit is spent (forgotten
//! for good) only when a delivery is made with it, and goes back when the
//! round made fewer. Once all N are spent the semaphore closes, which ends
//! the fetch loop like a stop does. Taking on settle is off under a
//! budget (its takes reuse an ending delivery's room, outside the count).
//!
//! [`ConsumerBuilder::max_deliveries`]: crate::consumer::ConsumerBuilder::max_deliveries

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub(crate) struct Budget {
    permits: Arc<Semaphore>,
    left: AtomicU64,
}

impl Budget {
    pub(crate) fn new(n: u64) -> Arc<Budget> {
        let permits = usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let b = Budget {
            permits: Arc::new(Semaphore::new(permits)),
            left: AtomicU64::new(permits as u64),
        };
        if permits == 0 {
            b.permits.close();
        }
        Arc::new(b)
    }

    /// One permit, once one is free; None once the budget is spent.
    pub(crate) async fn acquire(self: &Arc<Self>) -> Option<Spendable> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        Some(Spendable {
            permit,
            budget: self.clone(),
        })
    }

    /// One permit if one is free now.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<Spendable> {
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(Spendable {
            permit,
            budget: self.clone(),
        })
    }
}

/// A budget permit held with a delivery's room: back to the budget when
/// dropped, unless spent.
pub(crate) struct Spendable {
    permit: OwnedSemaphorePermit,
    budget: Arc<Budget>,
}

impl Spendable {
    /// A delivery was made with it: gone for good (the last one closes the
    /// budget).
    pub(crate) fn spend(self) {
        self.permit.forget();
        if self.budget.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.budget.permits.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_spent_permits_count_and_the_last_closes_the_budget() {
        let b = Budget::new(2);
        let (one, two) = (b.try_acquire(), b.try_acquire());
        assert!(b.try_acquire().is_none(), "two at most at once");
        drop(two); // not spent: back
        one.expect("a first permit").spend();
        let again = b.acquire().await;
        again.expect("one left").spend();
        assert!(b.acquire().await.is_none(), "spent: closed, no wait");
        assert!(Budget::new(0).try_acquire().is_none());
    }
}
