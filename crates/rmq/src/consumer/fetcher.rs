//! Phase one: the fetch loop takes due messages into flight.
//!
//! It holds one semaphore permit per delivery it hands out (so a consumer
//! never has more than its limit in flight), picks the ready slots from the
//! schedule, pops them in one pipeline and sleeps, when nothing is ready,
//! until the earliest known due time, a wake-up notice or the next rescan.
//! In serial mode it only visits slots whose lease it holds and that have
//! nothing out, takes one message per slot, and sends the lease's epoch
//! with every pop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::delivery::Delivery;
use super::settler::Settler;
use super::Shared;
use crate::error::ErrorKind;
use crate::group::{Claim, Fence};
use crate::message::Received;
use crate::scripts::pop::PopRequest;
use crate::scripts::ScriptId;
use crate::topic::{Topic, TopicKind, TopicSpec};
use crate::value::{as_int, bytes_at, int_at, items};

pub(crate) struct FetchConfig {
    pub(crate) batch: usize,
    pub(crate) concurrency: usize,
    pub(crate) rescan: Duration,
}

/// How long a busy consumer waits to fill half a batch.
const GATHER: Duration = Duration::from_millis(1);
/// Slots popped per round at most (time-based topics, or serial mode).
const FANOUT: usize = 8;
/// Slots looked at per pipeline in a survey.
const SURVEY_CHUNK: usize = 256;

/// A pop call taking up to `count` messages of `slot` (0: only look).
pub(crate) fn pop_call(
    topic: &Topic,
    slot: u32,
    count: usize,
    fence: Option<&Fence>,
) -> (ScriptId, redis::Cmd) {
    PopRequest {
        keys: &topic.slot_keys(slot),
        topic: &topic.args,
        count,
        channel: &topic.channel_for(slot),
        slot,
        fence: fence.map(|f| (&*f.owner, f.epoch)),
    }
    .call()
}

/// Runs the fetch loop until `fetcher.cancel` fires.
pub(crate) async fn fetch_loop(mut f: Fetcher) {
    // Each round: room for deliveries, then slots with work, then one pop
    // per slot in one round trip, then hand the messages out.
    loop {
        let Some(held) = f.gather().await else { return };
        let Some(slots) = f.wait_for_work().await else {
            return;
        };
        match f.pop(&slots, held.len()).await {
            Ok(out) => f.hand_out(out, held).await,
            Err(e) => {
                tracing::warn!(topic = %f.topic.name(), "taking messages failed, will retry: {e}");
                drop(held);
                if !f.back_off().await {
                    return;
                }
                f.shared.lock().mark_all();
            }
        }
    }
}

/// The fetch loop's state: what it was started with, then its own.
pub(crate) struct Fetcher {
    pub(crate) topic: Topic,
    pub(crate) shared: Arc<Shared>,
    pub(crate) settler: Settler,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) tx: mpsc::Sender<Delivery>,
    pub(crate) cfg: FetchConfig,
    pub(crate) cancel: CancellationToken,
    serial: bool,
    last_rescan: Instant,
    error_backoff: Duration,
}

impl Fetcher {
    pub(crate) fn new(
        topic: Topic,
        shared: Arc<Shared>,
        settler: Settler,
        permits: Arc<Semaphore>,
        tx: mpsc::Sender<Delivery>,
        cfg: FetchConfig,
        cancel: CancellationToken,
    ) -> Fetcher {
        Fetcher {
            serial: shared.ownership.is_some(),
            topic,
            shared,
            settler,
            permits,
            tx,
            cfg,
            cancel,
            last_rescan: Instant::now(),
            error_backoff: Duration::from_millis(50),
        }
    }

    /// Room for deliveries: one permit per delivery to hand out, at least
    /// one, at most a batch. None once cancelled.
    async fn gather(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = tokio::select! {
            p = self.permits.clone().acquire_owned() => p.ok()?,
            _ = self.cancel.cancelled() => return None,
        };
        let mut held = vec![first];
        while held.len() < self.cfg.batch {
            match self.permits.clone().try_acquire_owned() {
                Ok(p) => held.push(p),
                Err(_) => break,
            }
        }
        // Under load (other deliveries still running), wait up to a
        // millisecond for half a batch: fewer, fuller round trips.
        let target = (self.cfg.batch / 2).max(1);
        if !self.serial
            && held.len() < target
            && self.permits.available_permits() + held.len() < self.cfg.concurrency
        {
            let deadline = tokio::time::Instant::now() + GATHER;
            while held.len() < target {
                tokio::select! {
                    p = self.permits.clone().acquire_owned() => held.push(p.ok()?),
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = self.cancel.cancelled() => return None,
                }
            }
        }
        Some(held)
    }

    /// Waits for slots with work: surveys slots it knows nothing of, then
    /// sleeps until the earliest known due time, a notice or the next
    /// rescan. None once cancelled.
    async fn wait_for_work(&mut self) -> Option<Vec<u32>> {
        loop {
            if self.cancel.is_cancelled() {
                return None;
            }
            if self.last_rescan.elapsed() >= self.cfg.rescan {
                self.shared.lock().mark_all();
                self.last_rescan = Instant::now();
            }
            let unknown = self.shared.lock().unknown();
            if !unknown.is_empty() && !survey(&self.topic, &self.shared, &unknown).await {
                if !self.back_off().await {
                    return None;
                }
                continue;
            }
            let fanout = if self.topic.kind() == TopicKind::Priority && !self.serial {
                1
            } else {
                FANOUT
            };
            let allowed = self
                .shared
                .ownership
                .as_ref()
                .map(|o| self.shared.own(o).takeable());
            let (ready, wait) = {
                let s = self.shared.lock();
                (
                    s.ready(fanout, allowed.as_ref()),
                    s.ms_until_next(allowed.as_ref()),
                )
            };
            if !ready.is_empty() {
                return Some(ready);
            }
            let until_rescan = self.cfg.rescan.saturating_sub(self.last_rescan.elapsed());
            let sleep = wait
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
                .unwrap_or(until_rescan)
                .min(until_rescan);
            tokio::select! {
                _ = self.shared.notify.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = self.cancel.cancelled() => return None,
            }
        }
    }

    /// Sleeps the error backoff (doubling up to 2 s). False once cancelled.
    async fn back_off(&mut self) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(self.error_backoff) => {}
            _ = self.cancel.cancelled() => return false,
        }
        self.error_backoff = (self.error_backoff * 2).min(Duration::from_secs(2));
        true
    }

    /// Pops the chosen slots in one round trip, sharing `cap` deliveries
    /// among them, best first (serial: one each, fenced), and records what
    /// each reply says of its slot. Err: the round trip failed.
    async fn pop(
        &mut self,
        slots: &[u32],
        cap: usize,
    ) -> crate::error::Result<Vec<(Received, Option<Fence>)>> {
        let n = slots.len().min(cap);
        let mut fences = Vec::with_capacity(n);
        let mut calls = Vec::with_capacity(n);
        let mut chosen = Vec::with_capacity(n);
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
            calls.push(pop_call(&self.topic, slot, count, fence.as_ref()));
            fences.push(fence);
        }
        let since = self.shared.lock().generation();
        let replies = self.topic.redis().run(calls).await?;
        self.error_backoff = Duration::from_millis(50);
        let mut out = Vec::new();
        for ((&slot, reply), fence) in chosen.iter().zip(replies).zip(fences) {
            let a = match reply {
                Ok(v) => items(v),
                Err(e) => {
                    self.pop_failed(slot, since, fence.as_ref(), &e);
                    continue;
                }
            };
            let popped = parse_pop(self.topic.spec(), slot, a);
            {
                let mut s = self.shared.lock();
                s.observe_server_time(popped.now);
                s.after_pop(
                    slot,
                    since,
                    popped.head,
                    popped.retry,
                    popped.lease,
                    popped.now,
                );
            }
            for msg in popped.messages {
                out.push((msg, fence.clone()));
            }
        }
        Ok(out)
    }

    /// One slot's pop was refused: a lost lease (serial) gives the slot up;
    /// anything else makes the slot wait a second.
    fn pop_failed(&self, slot: u32, since: u64, fence: Option<&Fence>, e: &crate::error::Error) {
        let topic = self.topic.name();
        if e.kind() == ErrorKind::Fenced {
            tracing::info!(topic, slot, "slot lease lost: {e}");
            if let (Some(o), Some(f)) = (self.shared.ownership.as_ref(), fence) {
                self.shared.own(o).lose_epoch(slot, f.epoch);
            }
        } else {
            tracing::error!(topic, slot, "taking messages failed: {e}");
            let mut s = self.shared.lock();
            let now = s.server_now();
            s.after_pop(slot, since, None, None, Some(now + 1_000), now);
        }
    }

    /// Hands each message out as a delivery holding one permit (serial:
    /// and a claim on its slot). A message whose slot lease was given up
    /// while the pop was on its way goes back under its fence.
    async fn hand_out(
        &self,
        out: Vec<(Received, Option<Fence>)>,
        mut held: Vec<OwnedSemaphorePermit>,
    ) {
        for (msg, fence) in out {
            let permit = held.pop();
            let slot = msg.slot;
            let d = match fence {
                None => Delivery::new(msg, self.settler.clone(), permit, None),
                Some(f) => match self
                    .shared
                    .ownership
                    .as_ref()
                    .and_then(|own| Claim::take(own, self.shared.clone(), slot, f.clone()))
                {
                    Some(claim) => Delivery::new(msg, self.settler.clone(), permit, Some(claim)),
                    None => {
                        let _ = Delivery::new(msg, self.settler.clone(), None, None)
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

/// Looks at slots without taking (count 0): reclaims expired leases and
/// learns each slot's head. False when Redis could not be reached.
async fn survey(topic: &Topic, shared: &Shared, slots: &[u32]) -> bool {
    for chunk in slots.chunks(SURVEY_CHUNK) {
        let calls = chunk
            .iter()
            .map(|&slot| pop_call(topic, slot, 0, None))
            .collect();
        let since = shared.lock().generation();
        let replies = match topic.redis().run(calls).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(topic = %topic.name(), "looking at slots failed, will retry: {e}");
                return false;
            }
        };
        for (&slot, r) in chunk.iter().zip(replies) {
            let mut s = shared.lock();
            match r {
                Ok(v) => {
                    let p = parse_pop(topic.spec(), slot, items(v));
                    s.observe_server_time(p.now);
                    s.after_pop(slot, since, p.head, p.retry, p.lease, p.now);
                }
                Err(e) => {
                    tracing::error!(topic = %topic.name(), slot, "looking at a slot failed: {e}");
                    let now = s.server_now();
                    s.after_pop(slot, since, None, None, Some(now + 1_000), now);
                }
            }
        }
    }
    true
}

/// A pop reply, decoded.
pub(crate) struct Popped {
    pub(crate) now: i64,
    pub(crate) head: Option<i64>,
    pub(crate) retry: Option<i64>,
    pub(crate) lease: Option<i64>,
    pub(crate) messages: Vec<Received>,
}

pub(crate) fn parse_pop(spec: &TopicSpec, slot: u32, a: Vec<redis::Value>) -> Popped {
    let now = int_at(&a, 0).unwrap_or(0);
    let opt = |i: usize| a.get(i).and_then(as_int);
    let mut messages = Vec::new();
    let mut i = 5;
    while i + 1 < a.len() {
        let id = bytes_at(&a, i).unwrap_or_default();
        let payload = bytes_at(&a, i + 1).unwrap_or_default();
        i += 2;
        let Some(d) = DeliveryId::parse(&id) else {
            tracing::error!(topic = %spec.name, slot, "pop returned a malformed delivery id");
            continue;
        };
        let (priority, due_ms) = Received::score_fields(spec.kind, d.score);
        messages.push(Received {
            topic: spec.name.clone(),
            kind: spec.kind,
            key: d.key.to_vec(),
            payload,
            slot,
            attempt: d.attempt,
            priority,
            due_ms,
            token: d.token,
            taken_ms: now,
            fence: None,
            id,
        });
    }
    Popped {
        now,
        head: opt(1),
        retry: opt(2),
        lease: opt(3),
        messages,
    }
}

/// The parts of a delivery id, `<token>,<attempt>,<score>|<key>` (pop.lua).
#[derive(Debug, PartialEq)]
pub(crate) struct DeliveryId<'a> {
    pub(crate) token: u64,
    pub(crate) attempt: u32,
    pub(crate) score: i64,
    pub(crate) key: &'a [u8],
}

impl<'a> DeliveryId<'a> {
    pub(crate) fn parse(id: &'a [u8]) -> Option<DeliveryId<'a>> {
        let bar = id.iter().position(|&b| b == b'|')?;
        let head = std::str::from_utf8(&id[..bar]).ok()?;
        let mut parts = head.splitn(3, ',');
        let token = parts.next()?.parse().ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let score_s = parts.next()?;
        // Scores are whole numbers; Redis may print a large one as a float.
        let score = score_s
            .parse::<i64>()
            .ok()
            .or_else(|| score_s.parse::<f64>().ok().map(|f| f as i64))?;
        Some(DeliveryId {
            token,
            attempt,
            score,
            key: &id[bar + 1..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::DeliveryId;

    #[test]
    fn a_delivery_id_names_token_attempt_score_and_key() {
        let d = DeliveryId::parse(b"17,2,9007199254740991|a|b,c").unwrap();
        assert_eq!(
            d,
            DeliveryId {
                token: 17,
                attempt: 2,
                score: 9_007_199_254_740_991,
                key: b"a|b,c",
            }
        );
        assert_eq!(DeliveryId::parse(b"1,1,-5|").unwrap().score, -5);
        assert_eq!(DeliveryId::parse(b"1,1,1e3|k").unwrap().score, 1000);
        for bad in [&b"k"[..], b"1,1|k", b"x,1,2|k", b"1,1,2", b"1,-1,2|k"] {
            assert_eq!(DeliveryId::parse(bad), None, "{bad:?}");
        }
    }
}
