//! Serial mode: a delivery's claim on its slot. While a claim lives the
//! slot is busy (nothing else of it is taken by this consumer, and its
//! lease is not released); when the slot's lease is lost, the claim says so
//! (the handler must stop); dropping it frees the slot and tells the
//! consumer to look at the slot again.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{Fence, Ownership, SlotEvents};

pub(crate) struct Claim {
    own: Arc<Mutex<Ownership>>,
    events: Arc<dyn SlotEvents>,
    slot: u32,
    fence: Fence,
    lost: CancellationToken,
}

impl Claim {
    /// Marks the slot busy; None when the slot is not owned at this epoch.
    pub(crate) fn take(
        own: &Arc<Mutex<Ownership>>,
        events: Arc<dyn SlotEvents>,
        slot: u32,
        fence: Fence,
    ) -> Option<Claim> {
        let mut o = own.lock().unwrap_or_else(|p| p.into_inner());
        let s = o.slots.get_mut(&slot).filter(|s| s.epoch == fence.epoch)?;
        s.busy = true;
        let lost = s.lost.clone();
        drop(o);
        Some(Claim {
            own: own.clone(),
            events,
            slot,
            fence,
            lost,
        })
    }

    /// The owner and epoch the delivery settles with.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Whether the slot is still owned at the claim's epoch (its lease not
    /// lost).
    pub(crate) fn is_current(&self) -> bool {
        let o = self.own.lock().unwrap_or_else(|p| p.into_inner());
        !self.lost.is_cancelled()
            && o.slots
                .get(&self.slot)
                .is_some_and(|s| s.epoch == self.fence.epoch)
    }

    /// Resolves when the slot's lease is lost.
    pub(crate) async fn lost(&self) {
        self.lost.cancelled().await
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        {
            let mut o = self.own.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = o.slots.get_mut(&self.slot) {
                if s.epoch == self.fence.epoch {
                    s.busy = false;
                }
            }
        }
        // The slot may have more work now that its delivery ended.
        self.events.slot_may_have_work(self.slot);
    }
}
