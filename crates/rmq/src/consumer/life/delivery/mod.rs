//! A delivery: a received message plus the handle that ends it.
//!
//! End every delivery with exactly one of [`Delivery::ack`],
//! [`Delivery::nack`], [`Delivery::dead`] or [`Delivery::release`];
//! [`Delivery::extend`] may come any number of times before. A delivery
//! dropped without an end is nacked in the background (it counts as a
//! failed attempt and is retried after the backoff), so a handler that
//! panics cannot lose its message nor loop on it forever; in serial mode,
//! one dropped after its slot lease was lost goes back at its place (the
//! attempt counts, no backoff), so the entity's order holds at a handover.

use std::ops::Deref;
use std::time::Duration;

mod ack_take;
mod dropped;
mod hold;
pub(in crate::consumer) mod settler;
pub use hold::LeaseLost;

use crate::consumer::flow::room::Held;
use crate::consumer::flow::Probe;
use crate::error::{Error, ErrorKind, Result};
use crate::group::{Claim, Fence};
use crate::message::Received;
use settler::chain::Taker;
use settler::{Answer, Live, Op, Settled, Settler};

/// A message taken from a topic, in flight until it is ended.
pub struct Delivery {
    msg: Received,
    settler: Settler,
    ended: bool,
    fence: Option<Fence>,
    claim: Option<Claim>,
    _permit: Option<Held>,
    /// The topic's in-flight cap permit this delivery holds (capped topics).
    cap: Option<String>,
    /// In a pool: reports how long the delivery took and how it ended.
    probe: Option<Probe>,
    /// How many takes on settle in a row led to this delivery (0: the
    /// fetch loop took it).
    run: u32,
    /// Counts it in its settler's load until its end starts.
    live: Option<Live>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("topic", &self.msg.topic)
            .field("slot", &self.msg.slot)
            .field("attempt", &self.msg.attempt)
            .field("token", &self.msg.token)
            .finish_non_exhaustive()
    }
}

/// What names a delivery once its handle let go of it without ending it
/// ([`Delivery::let_go`]).
pub(crate) struct LetGo {
    pub(crate) slot: u32,
    /// The delivery id pop returned (see `Received::id`).
    pub(crate) id: Vec<u8>,
    pub(crate) fence: Option<Fence>,
    /// The in-flight cap permit it holds (capped topics).
    pub(crate) permit: Option<String>,
}

impl Delivery {
    /// Lets go of the delivery without ending it: no nack when the handle
    /// is dropped, its lease runs on, and whoever holds what names it
    /// (a receipt) ends it later; its in-flight permit goes with it.
    pub(crate) fn let_go(mut self) -> LetGo {
        self.ended = true;
        self.live = None;
        if let Some(p) = self.probe.take() {
            p.end(None);
        }
        LetGo {
            slot: self.msg.slot,
            id: std::mem::take(&mut self.msg.id),
            fence: self.fence.clone(),
            permit: self.cap.take(),
        }
    }

    pub(crate) fn new(
        msg: Received,
        settler: Settler,
        mut permit: Option<Held>,
        claim: Option<Claim>,
    ) -> Self {
        if let Some(p) = permit.as_mut() {
            p.spend();
        }
        let fence = claim.as_ref().map(|c| c.fence().clone());
        let mut msg = msg;
        if let Some(f) = &fence {
            msg.fence = Some(f.epoch);
        }
        Delivery {
            live: Some(settler.live()),
            msg,
            settler,
            ended: false,
            fence,
            claim,
            _permit: permit,
            cap: None,
            probe: None,
            run: 0,
        }
    }

    /// It was taken by the end of another delivery, the `run`th take on
    /// settle in a row (see `chain.rs`).
    pub(crate) fn taken_on_settle(mut self, run: u32) -> Self {
        self.run = run;
        self
    }

    /// In a pool: the delivery reports its end to its topic's gate.
    pub(crate) fn with_probe(mut self, probe: Option<Probe>) -> Self {
        self.probe = probe;
        self
    }

    /// The delivery holds this in-flight cap permit: extended with its
    /// lease, freed once its end is recorded (or, dropped unended, after
    /// the nack that ends it).
    pub(crate) fn with_cap_permit(mut self, token: Option<String>) -> Self {
        self.cap = token;
        self
    }

    pub(crate) fn new_detached(msg: Received, settler: Settler) -> Self {
        Delivery::new(msg, settler, None, None)
    }

    pub(crate) fn with_fence(mut self, fence: Fence) -> Self {
        self.msg.fence = Some(fence.epoch);
        self.fence = Some(fence);
        self
    }

    fn fence(&self) -> Option<Fence> {
        self.fence.clone()
    }

    /// The message.
    pub fn message(&self) -> &Received {
        &self.msg
    }

    /// Ends the delivery, retrying while Redis is unreachable (for a few
    /// seconds; the lease covers the rest). A retry that finds the delivery
    /// gone after a lost reply cannot tell whether the earlier try ran or
    /// the lease ran out meanwhile: [`ErrorKind::OutcomeUnknown`].
    async fn end(self, op: Op) -> Result<Settled> {
        self.end_taking(op, false).await.0
    }

    /// Ends the delivery as [`Delivery::end`] does, and returns the
    /// delivery its call took for it, if it took one (see `chain.rs`): the
    /// handler API handles that one next in the same task, with no hand-off
    /// to the consumer's stream and a new task.
    pub(crate) async fn end_and_next(self, op: Op) -> (Result<Settled>, Option<Delivery>) {
        self.end_taking(op, true).await
    }

    async fn end_taking(mut self, op: Op, back: bool) -> (Result<Settled>, Option<Delivery>) {
        self.ended = true;
        self.live = None;
        self.report_end(&op);
        // Its room (and claim) may take the slot's next message in the
        // same call: on the first try only (a retry takes nothing).
        let mut take = self.taker(&op, back);
        let mut next = None;
        let mut wait = Duration::from_millis(50);
        let mut retried = false;
        loop {
            let m = &self.msg;
            let Answer {
                outcome,
                taker,
                next: taken,
            } = self
                .settler
                .settle_taking(
                    m.slot,
                    m.id.clone(),
                    self.fence(),
                    op.clone(),
                    take.take(),
                    self.cap.is_none(),
                )
                .await;
            next = next.or(taken.take());
            // The call failed: the delivery keeps its room and claim while
            // it tries again.
            if let Some(t) = taker {
                self._permit = Some(t.held);
                self.claim = t.claim;
            }
            match outcome {
                Err(e) if e.is_retryable() && wait < Duration::from_secs(4) => {
                    retried = true;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                outcome => return (self.judged(outcome, retried), next),
            }
        }
    }

    /// Tells a pool's gate how the handling went, as the delivery ends.
    fn report_end(&mut self, op: &Op) {
        if let Some(p) = self.probe.take() {
            p.end(match op {
                Op::Ack => Some(true),
                Op::Nack { .. } | Op::Dead { .. } | Op::Lost { .. } => Some(false),
                Op::Release | Op::Extend { .. } => None,
            });
        }
    }

    /// An end's last outcome as its caller sees it: a retry that found the
    /// delivery gone cannot tell whether the first try ran.
    fn judged(&self, outcome: Result<Settled>, retried: bool) -> Result<Settled> {
        let m = &self.msg;
        match outcome {
            Err(e) if retried && e.kind() == ErrorKind::StaleDelivery => Err(Error::new(
                ErrorKind::OutcomeUnknown,
                format!(
                    "the connection broke while ending the delivery of {:?} (slot {}, attempt {}), \
                     and a retry found it already ended: either the first try ran, or the \
                     lease ran out meanwhile and the message was rolled back",
                    String::from_utf8_lossy(&m.key),
                    m.slot,
                    m.attempt
                ),
            )),
            Err(e) if e.kind() == ErrorKind::Fenced => {
                crate::observe::fenced(&m.topic);
                Err(e)
            }
            r => r,
        }
    }

    /// The message for a handler of the handler API: the payload moves out
    /// (this delivery only ends it, which needs the rest), so nothing of
    /// the size of the payload is copied.
    pub(crate) fn hand_to_handler(&mut self) -> Received {
        let m = &mut self.msg;
        Received {
            topic: m.topic.clone(),
            kind: m.kind,
            key: m.key.clone(),
            payload: std::mem::take(&mut m.payload),
            slot: m.slot,
            attempt: m.attempt,
            priority: m.priority,
            due_ms: m.due_ms,
            token: m.token,
            origin: m.origin,
            taken_ms: m.taken_ms,
            fence: m.fence,
            id: Vec::new(),
        }
    }

    /// What this delivery hands to its end's settle so that the call takes
    /// the slot's next message (`chain.rs`): its room and, in serial mode,
    /// its claim on the slot. None for an extension or a release (the
    /// consumer is stopping, or the message was not handled), for a
    /// delivery taken by hand, at the end of a run of [`MAX_RUN`] takes, and
    /// where the consumer's ends may not take.
    ///
    /// [`MAX_RUN`]: settler::chain::MAX_RUN
    fn taker(&mut self, op: &Op, back: bool) -> Option<Taker> {
        let ends = matches!(op, Op::Ack | Op::Nack { .. } | Op::Dead { .. });
        // A serial delivery takes under its claim, or not at all.
        let claimed = self.fence.is_none() || self.claim.is_some();
        let run_over = self.run >= settler::chain::MAX_RUN;
        if !ends || !claimed || run_over || self._permit.is_none() || !self.settler.may_take() {
            return None;
        }
        Some(Taker {
            held: self._permit.take()?,
            claim: self.claim.take(),
            run: self.run,
            back,
        })
    }

    /// Done: the message is removed. A duplicate that arrived meanwhile is
    /// pending now.
    pub async fn ack(self) -> Result<()> {
        self.end(Op::Ack).await.map(|_| ())
    }

    /// Failed: retried after `delay` (the topic's backoff when `None`),
    /// keeping its priority or time semantics; after the last attempt it
    /// goes to the dead letters with `error`. A message cancelled while in
    /// flight ends instead ([`Settled::Cancelled`]).
    pub async fn nack(self, delay: Option<Duration>, error: &str) -> Result<Settled> {
        self.end(nack(delay, error)).await
    }

    /// Failed for good: straight to the dead letters with `error`
    /// ([`Settled::Dead`]), or, for a message cancelled in flight, ended
    /// there ([`Settled::Cancelled`]).
    pub async fn dead(self, error: &str) -> Result<Settled> {
        self.end(Op::Dead {
            error: error.to_string(),
        })
        .await
    }

    /// Gives the message back untouched (the attempt is not counted),
    /// e.g. at shutdown before the handler started.
    pub async fn release(self) -> Result<()> {
        self.end(Op::Release).await.map(|_| ())
    }

    /// Gives the message back without waiting (used where nothing can be awaited).
    pub(crate) fn release_detached(mut self) {
        self.ended = true;
        self.live = None;
        let m = &self.msg;
        self.settler
            .settle_detached(m.slot, m.id.clone(), self.fence(), Op::Release);
    }
}

/// A failed attempt, retried after `delay` (the topic's backoff when
/// `None`), capped at [`MAX_RETRY_DELAY_MS`](crate::limits::MAX_RETRY_DELAY_MS).
pub(crate) fn nack(delay: Option<Duration>, error: &str) -> Op {
    let delay_ms = delay.map_or(-1, |d| {
        let cap = u128::from(crate::limits::MAX_RETRY_DELAY_MS);
        i64::try_from(d.as_millis().min(cap)).unwrap_or(0)
    });
    Op::Nack {
        delay_ms,
        error: error.to_string(),
    }
}

impl Deref for Delivery {
    type Target = Received;
    fn deref(&self) -> &Received {
        &self.msg
    }
}

/// A lease (of a take, or an extension) in ms: 1 ms to
/// [`MAX_LEASE_MS`](crate::limits::MAX_LEASE_MS), else refused.
pub(crate) fn lease_ms(lease: Duration) -> Result<u64> {
    let max = crate::limits::MAX_LEASE_MS;
    match u64::try_from(lease.as_millis()) {
        Ok(ms) if (1..=max).contains(&ms) => Ok(ms),
        _ => Err(crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            format!(
                "a lease must be 1 ms to 24 h ({max} ms), not {} ms; nothing was changed",
                lease.as_millis()
            ),
        )),
    }
}
