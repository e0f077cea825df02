//! A delivery dropped without being ended (its handler panicked, its
//! future was dropped, a stream was closed with it in hand) is ended from
//! `Drop`: nacked at once, or, in serial mode when its slot lease was lost,
//! given back at its place with its attempt counted (a nack's backoff
//! would let the entity's later messages go first; if the slot's new
//! owner holds the lease in Redis, the give-back is refused and the new
//! owner rolls the message back there once its message lease ends).

use super::{Delivery, Op};
use crate::error::Result;
use crate::outcome::Settled;

impl Delivery {
    /// Low-level serial-mode primitive, for tools and tests: ends the
    /// delivery as a serial delivery dropped after its slot lease was lost
    /// does (`Drop`, detached), but waits for the answer: back at once at
    /// its place, ahead of the entity's later messages, the attempt
    /// counted (dead after the last). Refused ([`crate::ErrorKind::Fenced`]) once
    /// another owner holds the slot: its message lease brings it back there.
    #[doc(hidden)]
    pub async fn give_back_lost(self) -> Result<Settled> {
        self.end(lost()).await
    }
}

/// A serial delivery given back after its slot lease was lost: back at
/// its place, the attempt counted.
fn lost() -> Op {
    Op::Lost {
        error: "slot lease lost while handling".into(),
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if !self.ended {
            let m = &self.msg;
            // A serial delivery whose slot lease was lost goes back at its
            // place (if the lease is still ours in Redis; else the next
            // owner rolls it back there once its message lease ends): a
            // nack's backoff would let the entity's later messages go first.
            let lease_lost = self.claim.as_ref().is_some_and(|c| !c.is_current());
            let op = if lease_lost {
                lost()
            } else {
                Op::Nack {
                    delay_ms: -1,
                    error: "delivery dropped without being ended".into(),
                }
            };
            self.settler
                .settle_detached(m.slot, m.id.clone(), self.fence(), op);
        }
        if let Some(p) = self.probe.take() {
            p.end(if self.ended { None } else { Some(false) });
        }
        // Queued after the end (or the nack above): freed once it is recorded.
        if let Some(token) = self.cap.take() {
            self.settler.free_permits(vec![token]);
        }
    }
}
