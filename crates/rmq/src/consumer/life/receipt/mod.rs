//! Receipts: a delivery named by what settles it, apart from the
//! [`Delivery`](crate::Delivery) handle, so that it can be settled later,
//! by another process or another server (HTTP take and settle, `rmq take`
//! then `rmq ack`).
//!
//! A receipt holds the delivery's slot, its delivery id (token, attempt,
//! score and key: what the settle script checks, so a receipt of an
//! earlier delivery of the same message is refused as stale), serial
//! mode's fence (owner and epoch: a settle under a fence that is no longer
//! current is refused) and, on a capped topic, its in-flight permit (freed
//! when the delivery ends). Outside the process it travels sealed by the
//! prefix's [`ReceiptKey`]: bound to its topic, and not forgeable without
//! the key, so a client cannot settle a delivery it was not given by
//! guessing a token.

mod detach;
mod key;
mod settle;

pub use key::ReceiptKey;
pub use settle::Ending;

use crate::error::{Error, ErrorKind, Result};
use crate::group::Fence;
use crate::scripts::pop::DeliveryId;

/// The first byte of an encoded receipt: its format.
const VERSION: u8 = 1;
const HAS_FENCE: u8 = 1;
const HAS_PERMIT: u8 = 2;

/// What settles one delivery, apart from its handle.
#[derive(Clone, PartialEq, Eq)]
pub struct Receipt {
    pub(crate) slot: u32,
    /// The delivery id pop returned (see `Received::id`).
    pub(crate) id: Vec<u8>,
    pub(crate) fence: Option<Fence>,
    /// The in-flight cap permit the delivery holds (capped topics).
    pub(crate) permit: Option<String>,
}

impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipt")
            .field("slot", &self.slot)
            .field("attempt", &self.attempt())
            .field("fence", &self.fence.as_ref().map(|f| f.epoch))
            .finish_non_exhaustive()
    }
}

impl Receipt {
    /// The slot of the delivery.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Which delivery of its message this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        DeliveryId::parse(&self.id).map_or(0, |d| d.attempt)
    }

    /// Serial mode: the group member it was taken by.
    pub fn member(&self) -> Option<&str> {
        self.fence.as_ref().map(|f| &*f.owner)
    }

    /// Serial mode: the slot lease's epoch it was taken under.
    pub fn fence(&self) -> Option<u64> {
        self.fence.as_ref().map(|f| f.epoch)
    }

    /// The receipt as bytes (unsealed: [`ReceiptKey::seal`] makes the text
    /// a client is given).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.id.len());
        out.push(VERSION);
        out.extend_from_slice(&self.slot.to_be_bytes());
        let flags = if self.fence.is_some() { HAS_FENCE } else { 0 }
            | if self.permit.is_some() { HAS_PERMIT } else { 0 };
        out.push(flags);
        if let Some(f) = &self.fence {
            out.extend_from_slice(&f.epoch.to_be_bytes());
            put_short(&mut out, f.owner.as_bytes());
        }
        if let Some(p) = &self.permit {
            put_short(&mut out, p.as_bytes());
        }
        out.extend_from_slice(&self.id);
        out
    }

    /// A receipt from [`Receipt::to_bytes`]: [`ErrorKind::InvalidReceipt`]
    /// when the bytes are not one.
    pub(crate) fn from_bytes(b: &[u8]) -> Result<Receipt> {
        let mut r = Reader(b);
        if r.take(1)? != [VERSION] {
            return Err(invalid("unknown receipt format"));
        }
        let slot = u32::from_be_bytes(r.array()?);
        let flags = r.take(1)?[0];
        let fence = if flags & HAS_FENCE != 0 {
            let epoch = u64::from_be_bytes(r.array()?);
            let owner = std::str::from_utf8(r.short()?).map_err(|_| invalid("bad owner"))?;
            Some(Fence {
                owner: owner.into(),
                epoch,
            })
        } else {
            None
        };
        let permit = if flags & HAS_PERMIT != 0 {
            let p = std::str::from_utf8(r.short()?).map_err(|_| invalid("bad permit"))?;
            Some(p.to_string())
        } else {
            None
        };
        let id = r.0.to_vec();
        if DeliveryId::parse(&id).is_none() {
            return Err(invalid("bad delivery id"));
        }
        Ok(Receipt {
            slot,
            id,
            fence,
            permit,
        })
    }
}

fn put_short(out: &mut Vec<u8>, b: &[u8]) {
    let len = u16::try_from(b.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
}

pub(crate) fn invalid(why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidReceipt,
        format!("not a receipt of this topic: {why}"),
    )
}

/// Reads an encoded receipt front to back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(invalid("too short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn short(&mut self) -> Result<&'a [u8]> {
        let n = u16::from_be_bytes(self.array()?);
        self.take(usize::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(fence: bool, permit: bool) -> Receipt {
        Receipt {
            slot: 7,
            id: b"12,3,1700000000000|order-1".to_vec(),
            fence: fence.then(|| Fence {
                owner: "member-a".into(),
                epoch: 42,
            }),
            permit: permit.then(|| "holder:9".to_string()),
        }
    }

    #[test]
    fn a_receipt_survives_its_bytes() {
        for (fence, permit) in [(false, false), (true, false), (false, true), (true, true)] {
            let r = receipt(fence, permit);
            assert_eq!(Receipt::from_bytes(&r.to_bytes()).ok(), Some(r));
        }
    }

    #[test]
    fn cut_or_foreign_bytes_are_refused() {
        let b = receipt(true, true).to_bytes();
        for n in 0..b.len() - "order-1".len() {
            let e = Receipt::from_bytes(&b[..n]).err().map(|e| e.kind());
            assert_eq!(e, Some(ErrorKind::InvalidReceipt), "cut at {n}");
        }
        let mut other = b.clone();
        other[0] = 9;
        assert!(Receipt::from_bytes(&other).is_err());
    }

    #[test]
    fn it_tells_its_slot_attempt_and_fence() {
        let r = receipt(true, false);
        assert_eq!((r.slot(), r.attempt(), r.fence()), (7, 3, Some(42)));
    }
}
