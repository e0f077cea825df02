//! Phase one: the fetch loop takes due messages into flight.
//!
//! It holds one semaphore permit per delivery it hands out (so a consumer
//! never has more than its limit in flight), picks the ready slots from the
//! schedule, pops them in one pipeline and sleeps, when nothing is ready,
//! until the earliest known due time, a wake-up notice or the next rescan.
//! In serial mode it only visits slots whose lease it holds and that have
//! nothing out, takes one message per slot, and sends the lease's epoch
//! with every pop. A topic with an in-flight cap or a rate limit trims each
//! round to the permits and tokens Redis grants (`flow/inflight.rs`, `flow/rate.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::consumer::discovery::heads::{self, Looked, SWEEP, SWEEP_WITH_AFFINITY};
use crate::consumer::discovery::pop::{parse_pop, pop_call, survey, Surveyed};
use crate::consumer::flow::inflight::Taken;
use crate::consumer::flow::rate;
use crate::consumer::flow::room::{Held, Room};
use crate::consumer::flow::Probe;
use crate::consumer::life::delivery::settler::Settler;
use crate::consumer::life::delivery::Delivery;
use crate::consumer::Shared;
use crate::error::ErrorKind;
use crate::group::{Claim, Fence};
use crate::message::Received;
use crate::scripts::rate::Granted;
use crate::topic::index::Reach;
use crate::topic::Topic;

mod gather;
mod wait;

pub(crate) struct FetchConfig {
    pub(crate) batch: usize,
    pub(crate) concurrency: usize,
    pub(crate) rescan: Duration,
}

/// How long a busy consumer waits to fill half a batch.
const GATHER: Duration = Duration::from_millis(1);
/// Slots popped per round at most (time-based topics, or serial mode).
pub(crate) const FANOUT: usize = 8;

/// Runs the fetch loop until `fetcher.cancel` fires (the marks waiter then
/// hands back the marks the consumer still holds: `discovery/marks.rs`).
pub(crate) async fn fetch_loop(mut f: Fetcher) {
    // However the loop ends, the consumer's other duties end with it (a
    // marks waiter left running would take marks nobody serves).
    let _stop = f.cancel.clone().drop_guard();
    // Each round: room for deliveries, then slots with work, then the
    // topic's in-flight permits and rate tokens, then one pop per slot in
    // one round trip, then hand the messages out.
    loop {
        let Some(held) = f.gather().await else { return };
        let Some(slots) = f.wait_for_work().await else {
            return;
        };
        let Some((held, mut tokens)) = f.capped(held).await else {
            return;
        };
        if held.is_empty() {
            continue; // waited for an in-flight permit: look again
        }
        let Some(held) = f.rate_limited(held).await else {
            f.settler.free_permits(tokens);
            return;
        };
        f.free_beyond(&mut tokens, held.len());
        if held.is_empty() {
            continue; // waited for the rate limit: look again
        }
        let granted = held.len();
        match f.pop(&slots, granted).await {
            Ok(out) => {
                rate::give_back(&f.topic, granted.saturating_sub(out.len()));
                f.free_beyond(&mut tokens, out.len());
                f.hand_out(out, held, tokens).await
            }
            Err(e) if e.kind() == ErrorKind::UnknownTopic => {
                f.settler.free_permits(tokens);
                f.topic_deleted().await;
                return;
            }
            Err(e) => {
                tracing::warn!(topic = %f.topic.name(), "taking messages failed, will retry: {e}");
                f.settler.free_permits(tokens);
                drop(held);
                if !f.back_off().await {
                    return;
                }
                f.shared.lock().mark_all();
            }
        }
    }
}

/// One round of pops: the slots chosen, a call each, and in serial mode
/// each slot's fence.
struct PopRound {
    chosen: Vec<u32>,
    calls: Vec<(crate::scripts::ScriptId, redis::Cmd)>,
    fences: Vec<Option<Fence>>,
}

/// The fetch loop's state: what it was started with, then its own.
pub(crate) struct Fetcher {
    pub(crate) topic: Topic,
    pub(crate) shared: Arc<Shared>,
    pub(crate) settler: Settler,
    pub(crate) room: Room,
    pub(crate) tx: mpsc::Sender<Delivery>,
    pub(crate) cfg: FetchConfig,
    pub(crate) cancel: CancellationToken,
    serial: bool,
    last_rescan: Instant,
    error_backoff: Duration,
    /// When the head index was last read because entries had been left out.
    last_index_read: Instant,
    /// The next slot the sweep looks at (see `discovery/heads.rs`).
    sweep_from: u32,
}

/// The shortest time between two reads of the head index made because
/// the last one left entries out.
const INDEX_REREAD: Duration = Duration::from_millis(100);

impl Fetcher {
    pub(crate) fn new(
        topic: Topic,
        shared: Arc<Shared>,
        settler: Settler,
        room: Room,
        tx: mpsc::Sender<Delivery>,
        cfg: FetchConfig,
        cancel: CancellationToken,
    ) -> Fetcher {
        Fetcher {
            serial: shared.ownership.is_some(),
            topic,
            shared,
            settler,
            room,
            tx,
            cfg,
            cancel,
            last_rescan: Instant::now(),
            error_backoff: Duration::from_millis(50),
            last_index_read: Instant::now(),
            sweep_from: 0,
        }
    }

    /// One pop call per chosen slot (at most `cap` slots), the batch
    /// shared among them; serial mode takes one per slot, and only from a
    /// slot whose lease is still held (with its fence).
    fn pop_calls(&self, slots: &[u32], cap: usize, args: &crate::scripts::TopicArgs) -> PopRound {
        let n = slots.len().min(cap);
        let (mut chosen, mut calls, mut fences) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (i, &slot) in slots.iter().take(n).enumerate() {
            let fence = self
                .shared
                .ownership
                .as_ref()
                .and_then(|o| self.shared.own(o).fence(slot));
            if self.serial && fence.is_none() {
                continue; // lost since it was chosen: never pop it unfenced
            }
            let count = if self.serial {
                1
            } else {
                cap / n + usize::from(i < cap % n)
            };
            chosen.push(slot);
            calls.push(pop_call(&self.topic, args, slot, count, fence.as_ref()));
            fences.push(fence);
        }
        PopRound {
            chosen,
            calls,
            fences,
        }
    }

    /// Pops the chosen slots in one round trip, sharing `cap` deliveries
    /// among them, best first (serial: one each, fenced), and records what
    /// each reply says of its slot. Err: the round trip failed.
    async fn pop(
        &mut self,
        slots: &[u32],
        cap: usize,
    ) -> crate::error::Result<Vec<(Received, Option<Fence>)>> {
        let settings = self.topic.settings().await?;
        let PopRound {
            chosen,
            calls,
            fences,
        } = self.pop_calls(slots, cap, &settings.args);
        let since = {
            let mut s = self.shared.lock();
            s.sending(&chosen);
            s.generation()
        };
        let span = crate::observe::receive_span(self.topic.name());
        let replies = {
            use tracing::Instrument;
            self.topic
                .redis()
                .run(calls)
                .instrument(span.clone())
                .await?
        };
        self.error_backoff = Duration::from_millis(50);
        let mut out = Vec::new();
        for ((&slot, reply), fence) in chosen.iter().zip(replies).zip(fences) {
            let a = match reply {
                Ok(v) => v,
                Err(e) => {
                    self.pop_failed(slot, since, fence.as_ref(), &e);
                    continue;
                }
            };
            let popped = parse_pop(&self.topic.spec, slot, a);
            crate::observe::popped(self.topic.name(), !popped.messages.is_empty());
            self.topic.give_back_room_later(popped.ended);
            {
                let mut s = self.shared.lock();
                s.observe_server_time(popped.now);
                s.after_pop_taking(
                    slot,
                    since,
                    popped.head,
                    popped.retry,
                    popped.lease,
                    popped.now,
                    popped.taken,
                );
            }
            for msg in popped.messages {
                out.push((msg, fence.clone()));
            }
        }
        span.record("messaging.batch.message_count", out.len());
        Ok(out)
    }

    /// One slot's pop was refused: a lost lease (serial) gives the slot up;
    /// anything else makes the slot wait a second.
    fn pop_failed(&self, slot: u32, since: u64, fence: Option<&Fence>, e: &crate::error::Error) {
        let topic = self.topic.name();
        if e.kind() == ErrorKind::Fenced {
            crate::observe::fenced(topic);
            tracing::info!(topic, slot, "slot lease lost: {e}");
            if let (Some(o), Some(f)) = (self.shared.ownership.as_ref(), fence) {
                self.shared.own(o).lose_epoch(slot, f.epoch);
            }
        } else {
            tracing::error!(topic, slot, "taking messages failed: {e}");
            let mut s = self.shared.lock();
            let now = s.server_now();
            if self.shared.marks || !s.hears(slot) {
                s.retry_later(slot, now + 1_000);
            } else {
                s.after_pop(slot, since, None, None, Some(now + 1_000), now);
            }
        }
    }

    /// Hands each message out as a delivery holding one permit (serial:
    /// and a claim on its slot). A message whose slot lease was given up
    /// while the pop was on its way goes back under its fence.
    async fn hand_out(
        &self,
        out: Vec<(Received, Option<Fence>)>,
        mut held: Vec<Held>,
        mut tokens: Vec<String>,
    ) {
        for (msg, fence) in out {
            crate::observe::delivered(&msg);
            let permit = held.pop();
            let token = tokens.pop();
            let probe = self.room.gate.clone().map(Probe::start);
            let slot = msg.slot;
            let d = match fence {
                None => Delivery::new(msg, self.settler.clone(), permit, None)
                    .with_cap_permit(token)
                    .with_probe(probe),
                Some(f) => match self
                    .shared
                    .ownership
                    .as_ref()
                    .and_then(|own| Claim::take(own, self.shared.clone(), slot, f.clone()))
                {
                    Some(claim) => Delivery::new(msg, self.settler.clone(), permit, Some(claim))
                        .with_cap_permit(token)
                        .with_probe(probe),
                    None => {
                        let _ = Delivery::new(msg, self.settler.clone(), None, None)
                            .with_cap_permit(token)
                            .with_fence(f)
                            .release()
                            .await;
                        continue;
                    }
                },
            };
            if let Err(mpsc::error::SendError(d)) = self.tx.send(d).await {
                let _ = d.release().await;
            }
        }
    }
}
