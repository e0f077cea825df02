//! Settling by receipt: the ends a [`Delivery`](crate::Delivery) has,
//! for a delivery named only by its [`Receipt`].
//!
//! Receipts settled in one call go out together: one script call per
//! slot, all in one pipeline (the consumer's settler). Each answers on its
//! own, as a delivery's end does: a receipt whose lease ran out (the
//! message was rolled back, or taken again) is refused as stale, one whose
//! serial fence is no longer current as fenced, and nothing changes for
//! either. An ending frees the in-flight permit the receipt holds; an
//! extension extends it with the lease.

use std::time::Duration;

use futures::future::join_all;

use super::Receipt;
use crate::consumer::flow::inflight::Permits;
use crate::consumer::life::delivery::settler::Settler;
use crate::error::Result;
use crate::outcome::Settled;
use crate::scripts::settle::Op;
use crate::topic::Topic;

/// How to end (or extend) a delivery named by its receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Done: the message is removed.
    Ack,
    /// Failed: retried after `delay` (the topic's backoff when `None`);
    /// dead after the last attempt, with `error`.
    Nack {
        /// The retry delay (None: the topic's backoff).
        delay: Option<Duration>,
        /// Why it failed (kept with a dead letter).
        error: String,
    },
    /// Failed for good: straight to the dead letters.
    Dead {
        /// Why it failed.
        error: String,
    },
    /// The lease now ends this long from now: 1 ms to
    /// [`MAX_LEASE_MS`](crate::limits::MAX_LEASE_MS) (1 day), else the
    /// receipt's answer is [`ErrorKind::InvalidArgument`](crate::ErrorKind)
    /// and nothing changes.
    Extend(Duration),
    /// Given back untouched (the attempt is not counted).
    Release,
}

impl Ending {
    /// One word for how a settle of this ending came out, as the HTTP API
    /// and the CLI say it: `acked`, `retrying`, `dead`, `extended`,
    /// `released`, `superseded`, `cancelled`, `stale` (not the current
    /// delivery: its lease ran out, or it was settled already), `fenced`
    /// (serial mode: the slot moved on), `invalid` (an extension out of
    /// range: nothing changed), or `unknown` (the call failed).
    pub fn outcome_word(&self, outcome: &Result<Settled>) -> &'static str {
        match (outcome, self) {
            (Ok(Settled::Done), Ending::Ack) => "acked",
            (Ok(Settled::Done), Ending::Nack { .. }) => "retrying",
            (Ok(Settled::Done), Ending::Extend(_)) => "extended",
            (Ok(Settled::Done), Ending::Release) => "released",
            (Ok(Settled::Done), Ending::Dead { .. }) | (Ok(Settled::Dead), _) => "dead",
            (Ok(Settled::Superseded), _) => "superseded",
            (Ok(Settled::Cancelled), _) => "cancelled",
            (Err(e), _) if e.kind() == crate::ErrorKind::StaleDelivery => "stale",
            (Err(e), _) if e.kind() == crate::ErrorKind::Fenced => "fenced",
            (Err(e), _) if e.kind() == crate::ErrorKind::InvalidArgument => "invalid",
            (Err(_), _) => "unknown",
        }
    }

    /// The settle operation; an extension outside 1 ms to 1 day is refused.
    fn op(&self) -> Result<Op> {
        Ok(match self {
            Ending::Ack => Op::Ack,
            Ending::Nack { delay, error } => crate::consumer::life::delivery::nack(*delay, error),
            Ending::Dead { error } => Op::Dead {
                error: error.clone(),
            },
            Ending::Extend(by) => Op::Extend {
                ms: crate::consumer::life::delivery::lease_ms(*by)?,
            },
            Ending::Release => Op::Release,
        })
    }
}

/// Whether the settle found the delivery ended already (or no longer its
/// caller's): its permit has nothing left to cover.
fn is_gone(outcome: &Result<Settled>) -> bool {
    outcome.as_ref().is_err_and(|e| {
        matches!(
            e.kind(),
            crate::ErrorKind::StaleDelivery | crate::ErrorKind::Fenced
        )
    })
}

impl Topic {
    /// Settles deliveries named by their receipts, all in one round trip
    /// where they allow it; one answer per receipt, in order. A receipt
    /// of another topic is refused as stale (its delivery id is not in
    /// flight here); open sealed receipts with [`crate::ReceiptKey::open`],
    /// which checks the topic.
    pub async fn settle_receipts(&self, batch: Vec<(Receipt, Ending)>) -> Vec<Result<Settled>> {
        if batch.is_empty() {
            return Vec::new();
        }
        let settler = Settler::spawn(self.clone(), Permits::new(self));
        let calls = batch.iter().map(|(r, e)| {
            let settler = &settler;
            async move {
                let op = e.op()?;
                let outcome = settler
                    .settle(r.slot, r.id.clone(), r.fence.clone(), op.clone())
                    .await;
                if let Some(permit) = &r.permit {
                    match &op {
                        Op::Extend { ms } if outcome.is_ok() => {
                            settler.extend_permit(permit, *ms).await?;
                        }
                        Op::Extend { .. } => {}
                        // Ended, or found ended (stale, fenced): queued
                        // after the settle, freed once it is recorded. A
                        // failed call leaves it to run out with the lease.
                        _ if outcome.is_ok() || is_gone(&outcome) => {
                            settler.free_permits(vec![permit.clone()]);
                        }
                        _ => {}
                    }
                }
                outcome
            }
        });
        let out = join_all(calls).await;
        // The permit frees queued above run before the settler stops.
        settler.load().drained(Duration::from_secs(5)).await;
        out
    }
}
