//! A delivery handed on as a receipt (`receipt/`): its handle lets go of
//! it without ending it, and whoever holds the receipt ends it later.

use super::Delivery;
use crate::consumer::receipt::Receipt;

impl Delivery {
    /// Hands the delivery on as a [`Receipt`] that settles it later
    /// ([`Topic::settle_receipts`](crate::Topic::settle_receipts)), from
    /// this process or another. The handle lets go: no nack when it is
    /// dropped; the lease runs on, and a receipt not settled before it
    /// ends is stale (the message comes back as a failed attempt). An
    /// in-flight permit it holds (capped topics) goes with the receipt.
    pub fn into_receipt(mut self) -> Receipt {
        self.ended = true;
        self.live = None;
        if let Some(p) = self.probe.take() {
            p.end(None);
        }
        Receipt {
            slot: self.msg.slot,
            id: std::mem::take(&mut self.msg.id),
            fence: self.fence.clone(),
            permit: self.cap.take(),
        }
    }
}
