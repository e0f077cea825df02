//! A delivery handed on as a receipt: its handle lets go of it without
//! ending it, and whoever holds the receipt ends it later.

use crate::consumer::life::delivery::{Delivery, LetGo};
use crate::consumer::life::receipt::Receipt;

impl Delivery {
    /// Hands the delivery on as a [`Receipt`] that settles it later
    /// ([`Topic::settle_receipts`](crate::Topic::settle_receipts)), from
    /// this process or another. The handle lets go: no nack when it is
    /// dropped; the lease runs on, and a receipt not settled before it
    /// ends is stale (the message comes back as a failed attempt). An
    /// in-flight permit it holds (capped topics) goes with the receipt.
    pub fn into_receipt(self) -> Receipt {
        let LetGo {
            slot,
            id,
            fence,
            permit,
        } = self.let_go();
        Receipt {
            slot,
            id,
            fence,
            permit,
        }
    }
}
