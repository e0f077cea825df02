//! Phase two, batched: acks, nacks, dead-letterings, extensions and
//! releases from all deliveries of a consumer go through one task that
//! drains whatever has queued up, groups it by slot and sends one script
//! call per slot, all in one pipeline. Under load this turns many settles
//! into one round trip; when idle it adds no delay.
//!
//! The same task frees in-flight cap permits (see `inflight.rs`), after the
//! settles queued before them: a permit is given back only once its
//! delivery's end is recorded. On a bounded topic it also gives back one
//! unit of room per message that ended (acked, dead, superseded by its
//! duplicate, cancelled), in the same round trip as the frees.

use std::collections::BTreeMap;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::inflight::{Permits, MARGIN_MS};

use crate::error::{Error, ErrorKind, Result};
use crate::group::Fence;
use crate::keys;
use crate::scripts::settle::{self, SettleRequest};
use crate::scripts::{inflight, room};
use crate::topic::Topic;

/// Settles drained per pipeline at most.
const MAX_DRAIN: usize = 4_096;
/// Scheduler turns to wait for more settles when the batch is small.
const GATHER_TURNS: usize = 3;
/// A batch this big is sent at once.
const FULL_ENOUGH: usize = 64;
/// Operations per script call at most.
const PER_CALL: usize = 500;

/// Owner and epoch of a serial-mode settle, as a grouping key.
type FenceKey = (std::sync::Arc<str>, u64);

pub(crate) use crate::outcome::Settled;

pub(crate) use crate::scripts::settle::Op;

pub(crate) struct Request {
    pub(crate) slot: u32,
    /// The delivery id (see `Received::id`).
    pub(crate) id: Vec<u8>,
    pub(crate) fence: Option<Fence>,
    pub(crate) op: Op,
    pub(crate) reply: Option<oneshot::Sender<Result<Settled>>>,
}

/// What the settling task is asked to do.
enum Job {
    Settle(Request),
    /// Free these in-flight cap permits (after the settles before them).
    Free(Vec<String>),
}

/// Handle to the settling task; clone it into every delivery.
#[derive(Clone)]
pub(crate) struct Settler {
    tx: mpsc::UnboundedSender<Job>,
    topic: Topic,
    permits: Arc<Permits>,
}

impl Settler {
    pub(crate) fn spawn(topic: Topic, permits: Arc<Permits>) -> Settler {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(topic.clone(), permits.clone(), rx));
        Settler { tx, topic, permits }
    }

    /// This consumer's in-flight cap permits.
    pub(crate) fn permits(&self) -> &Arc<Permits> {
        &self.permits
    }

    /// Frees in-flight cap permits once the settles queued before them
    /// are recorded (in the background).
    pub(crate) fn free_permits(&self, tokens: Vec<String>) {
        if !tokens.is_empty() {
            let _ = self.tx.send(Job::Free(tokens));
        }
    }

    /// Pushes a permit's deadline to `lease_ms` (plus the margin) from now,
    /// after its delivery's lease was extended by as much.
    pub(crate) async fn extend_permit(&self, token: &str, lease_ms: u64) -> Result<()> {
        let (id, cmd) = inflight::extend(self.permits.keys(), lease_ms + MARGIN_MS, &[token]);
        self.topic.redis().run_one(id, cmd).await.map(|_| ())
    }

    /// Settles and waits for the outcome.
    pub(crate) async fn settle(
        &self,
        slot: u32,
        id: Vec<u8>,
        fence: Option<Fence>,
        op: Op,
    ) -> Result<Settled> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Settle(Request {
                slot,
                id,
                fence,
                op,
                reply: Some(reply),
            }))
            .map_err(|_| Error::new(ErrorKind::Shutdown, "the consumer has stopped"))?;
        rx.await
            .map_err(|_| Error::new(ErrorKind::Shutdown, "the consumer has stopped"))?
    }

    /// Settles without waiting (used on drop, where nothing can be awaited).
    pub(crate) fn settle_detached(&self, slot: u32, id: Vec<u8>, fence: Option<Fence>, op: Op) {
        let _ = self.tx.send(Job::Settle(Request {
            slot,
            id,
            fence,
            op,
            reply: None,
        }));
    }
}

async fn run(topic: Topic, permits: Arc<Permits>, mut rx: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        // Drain what is queued; while the batch is small, let the tasks that
        // are about to settle run first (no timer: a few scheduler turns).
        for turn in 0..=GATHER_TURNS {
            while batch.len() < MAX_DRAIN {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            if turn == GATHER_TURNS || batch.len() >= FULL_ENOUGH {
                break;
            }
            tokio::task::yield_now().await;
        }
        let mut settles = Vec::with_capacity(batch.len());
        let mut tokens = Vec::new();
        for job in batch {
            match job {
                Job::Settle(r) => settles.push(r),
                Job::Free(t) => tokens.extend(t),
            }
        }
        let mut ended = 0;
        if !settles.is_empty() {
            ended = flush(&topic, settles).await;
        }
        free(&topic, &permits, tokens, ended).await;
    }
}

/// Frees permits and gives back room in one round trip (both keys live on
/// slot 0's hash tag). A lost free only holds the permits until their
/// deadline, a lost give-back keeps the room until the next recount: each
/// lowers a bound for a while, never raises it.
async fn free(topic: &Topic, permits: &Permits, tokens: Vec<String>, ended: u64) {
    let mut calls = Vec::new();
    if !tokens.is_empty() {
        calls.push(inflight::free(
            permits.keys(),
            &topic.channel_for(0),
            &tokens,
        ));
    }
    if ended > 0 && topic.cached().spec.max_pending > 0 {
        calls.push(room::give(
            &keys::room_keys(topic.prefix(), topic.name()),
            ended,
        ));
    }
    if calls.is_empty() {
        return;
    }
    let failed = match topic.redis().run(calls).await {
        Ok(replies) => replies.into_iter().find_map(Result::err),
        Err(e) => Some(e),
    };
    if let Some(e) = failed {
        tracing::debug!(topic = %topic.name(), "freeing in-flight permits or room failed (permits run out at their deadline): {e}");
    }
}

/// Whether a settle's outcome ended its message (and so gives back a unit
/// of a bounded topic's room): an ack that took, a dead letter, a message
/// superseded by its duplicate, or one cancelled in flight. A nack that
/// retries, an extension and a plain release keep the message.
fn ends_message(op: &Op, outcome: &Result<Settled>) -> bool {
    match outcome {
        Ok(Settled::Done) => matches!(op, Op::Ack),
        Ok(Settled::Dead | Settled::Superseded | Settled::Cancelled) => true,
        Err(_) => false,
    }
}

/// Sends the settles, one call per slot and fence, all in one pipeline;
/// returns how many messages they ended.
async fn flush(topic: &Topic, batch: Vec<Request>) -> u64 {
    // One call per slot and fence (serial deliveries carry their lease epoch).
    let mut by_slot: BTreeMap<(u32, Option<FenceKey>), Vec<Request>> = BTreeMap::new();
    for r in batch {
        let f = r.fence.as_ref().map(|f| (f.owner.clone(), f.epoch));
        by_slot.entry((r.slot, f)).or_default().push(r);
    }
    let mut calls = Vec::new();
    let mut groups: Vec<Vec<Request>> = Vec::new();
    for ((slot, fence), reqs) in by_slot {
        let keys = topic.slot_keys(slot);
        let channel = topic.channel_for(slot);
        let settings = topic.cached();
        let mut reqs = reqs;
        while !reqs.is_empty() {
            let rest = reqs.split_off(reqs.len().min(PER_CALL));
            let chunk = std::mem::replace(&mut reqs, rest);
            calls.push(
                SettleRequest {
                    keys: &keys,
                    topic: &settings.args,
                    channel: &channel,
                    slot,
                    fence: fence.as_ref().map(|(owner, epoch)| (&**owner, *epoch)),
                    ops: chunk.iter().map(|r| (r.id.as_slice(), &r.op)).collect(),
                }
                .call(),
            );
            groups.push(chunk);
        }
    }
    let span = crate::observe::settle_span(topic.name(), groups.iter().map(Vec::len).sum());
    let replies = {
        use tracing::Instrument;
        topic.redis().run(calls).instrument(span).await
    };
    let mut ended = 0;
    match replies {
        Ok(replies) => {
            for (reply, group) in replies.into_iter().zip(groups) {
                match reply {
                    Ok(v) => {
                        let outcomes = settle::outcomes(v, group.len());
                        for (r, res) in group.into_iter().zip(outcomes) {
                            ended += u64::from(ends_message(&r.op, &res));
                            if let Some(tx) = r.reply {
                                let _ = tx.send(res);
                            }
                        }
                    }
                    Err(e) => reply_all(group, &e),
                }
            }
        }
        Err(e) => {
            tracing::warn!("settling failed: {e}");
            for g in groups {
                reply_all(g, &e);
            }
        }
    }
    ended
}

fn reply_all(group: Vec<Request>, e: &Error) {
    for r in group {
        if let Some(tx) = r.reply {
            let _ = tx.send(Err(e.duplicate()));
        }
    }
}
