//! Holding a delivery while its work runs: the lease extended beside the
//! work, and in serial mode the work stopped the moment the slot's lease
//! is lost (its ack would be refused; the new owner gets the message).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{Delivery, Op};
use crate::error::Result;

/// Serial mode: the slot's lease was lost while a handler ran (see
/// [`Delivery::while_held`]); the message goes to the slot's new owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseLost;

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the slot's lease was lost: another member owns it now")
    }
}

impl std::error::Error for LeaseLost {}

impl Delivery {
    /// Serial mode: resolves when this consumer loses the slot's lease (the
    /// handler should stop: its ack would be refused). Never resolves in
    /// parallel mode.
    pub async fn lease_lost(&self) {
        match &self.claim {
            Some(c) => c.lost().await,
            None => std::future::pending().await,
        }
    }

    /// Runs `work` while this delivery is held: with `extend`, the lease is
    /// extended to `lease` from now every third of `lease`, *beside* the
    /// work, so that a slow or unreachable Redis never delays noticing a
    /// lost slot lease; in serial mode, the moment the slot's lease is lost
    /// `work` is dropped and [`LeaseLost`] returned (its ack would be
    /// refused, and another member may already be handling the message).
    /// A failed extension is logged; the lease then runs out as usual.
    pub async fn while_held<F: Future>(
        &self,
        work: F,
        lease: Duration,
        extend: bool,
    ) -> std::result::Result<F::Output, LeaseLost> {
        tokio::pin!(work);
        let period = (lease / 3).max(Duration::from_millis(1));
        // On the stack, not an interval's boxed timer: no allocation per
        // message, and not in the timer wheel unless the work waits.
        let tick = tokio::time::sleep(period);
        tokio::pin!(tick);
        let mut extending: Option<Pin<Box<dyn Future<Output = Result<()>> + Send + '_>>> = None;
        loop {
            tokio::select! {
                biased;
                () = self.lease_lost() => return Err(LeaseLost),
                out = &mut work => return Ok(out),
                () = &mut tick, if extend && extending.is_none() => {
                    tick.as_mut().reset(tokio::time::Instant::now() + period);
                    extending = Some(Box::pin(self.extend(lease)));
                }
                r = async {
                    match extending.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if extending.is_some() => {
                    extending = None;
                    if let Err(e) = r {
                        tracing::warn!(topic = %self.msg.topic, slot = self.msg.slot, "could not extend a lease: {e}");
                    }
                }
            }
        }
    }

    /// Extends the lease: it now ends `by` from now (server clock). `by`
    /// is 1 ms to [`MAX_LEASE_MS`](crate::limits::MAX_LEASE_MS) (1 day);
    /// another is refused ([`ErrorKind::InvalidArgument`](crate::ErrorKind)).
    pub async fn extend(&self, by: Duration) -> Result<()> {
        let m = &self.msg;
        let ms = super::lease_ms(by)?;
        self.settler
            .settle(m.slot, m.id.clone(), self.fence(), Op::Extend { ms })
            .await?;
        if let Some(token) = &self.cap {
            self.settler.extend_permit(token, ms).await?;
        }
        crate::observe::lease_extended(&m.topic);
        Ok(())
    }
}
