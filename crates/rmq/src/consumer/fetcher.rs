//! Phase one: the fetch loop takes due messages into flight.
//!
//! It holds one semaphore permit per delivery it hands out (so a consumer
//! never has more than its limit in flight), picks the ready slots from the
//! schedule, pops them in one pipeline and sleeps, when nothing is ready,
//! until the earliest known due time, a wake-up notice or the next rescan.
//! In serial mode it only visits slots whose lease it holds and that have
//! nothing out, takes one message per slot, and sends the lease's epoch
//! with every pop. A topic with an in-flight cap or a rate limit trims each
//! round to the permits and tokens Redis grants (`inflight.rs`, `rate.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::delivery::Delivery;
use super::heads::{self, Looked, SWEEP, SWEEP_WITH_AFFINITY};
use super::inflight::Taken;
use super::pool::Probe;
use super::pop::{parse_pop, pop_call, survey, Surveyed};
use super::rate;
use super::room::{Held, Room};
use super::settler::Settler;
use super::Shared;
use crate::error::ErrorKind;
use crate::group::{Claim, Fence};
use crate::message::Received;
use crate::scripts::rate::Granted;
use crate::topic::index::Reach;
use crate::topic::Topic;

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
/// hands back the marks the consumer still holds: `marks.rs`).
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
    /// The next slot the sweep looks at (see `heads.rs`).
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

    /// The next few slots the sweep looks at, in turn (serial mode: of
    /// those it may take from; with slot affinity, of its own).
    fn sweep(&mut self, allowed: Option<&std::collections::HashSet<u32>>) -> Vec<u32> {
        let slots = self.topic.spec.slots.max(1);
        let size = if self.shared.affinity {
            SWEEP_WITH_AFFINITY
        } else {
            SWEEP
        };
        let mut out = Vec::with_capacity(size);
        let schedule = self.shared.lock();
        for i in 0..slots {
            let slot = (self.sweep_from + i) % slots;
            if allowed.is_none_or(|a| a.contains(&slot)) && schedule.hears(slot) {
                out.push(slot);
                if out.len() == size {
                    self.sweep_from = (slot + 1) % slots;
                    return out;
                }
            }
        }
        self.sweep_from = 0;
        out
    }

    /// Looks at the slots it knows nothing of: through the head index when
    /// the connection keeps one and it is complete, else one look per slot
    /// (after which a parallel consumer whose look at every slot got every
    /// answer marks the index complete). False when Redis could not be
    /// reached.
    ///
    /// Serial mode: `allowed` are the slots it may take from now, `owned`
    /// all it owns (a read of the index reaches those), both taken after
    /// notice generation `since`.
    async fn look(
        &mut self,
        unknown: &[u32],
        allowed: Option<&std::collections::HashSet<u32>>,
        owned: Option<&std::collections::HashSet<u32>>,
        since: u64,
    ) -> bool {
        if self.topic.redis().head_index {
            let sweep = self.sweep(allowed);
            let reach = owned.map_or(Reach::Every, Reach::Slots);
            let gains = self.shared.affinity_gains.load(Ordering::Acquire);
            let looked = heads::look(&self.topic, &self.shared, reach, &sweep, since).await;
            if self.shared.affinity_gains.load(Ordering::Acquire) != gains {
                self.shared.lock().mark_all(); // slots became its own meanwhile
            }
            match looked {
                Looked::Done => return true,
                Looked::Failed => return false,
                Looked::Incomplete => {}
            }
        }
        // A survey of many slots takes many round trips: a consumer told to
        // stop must not go on looking.
        let surveyed = tokio::select! {
            s = survey(&self.topic, &self.shared, unknown) => s,
            () = self.cancel.cancelled() => return false,
        };
        let everything = unknown.len() == self.topic.spec.slots as usize;
        match surveyed {
            Surveyed::Unreachable => false,
            Surveyed::All if self.topic.redis().head_index && !self.serial && everything => {
                heads::mark_complete(&self.topic).await;
                true
            }
            _ => true,
        }
    }

    /// A capped topic's round is trimmed to the in-flight permits granted
    /// now (one token each); when none are, the loop waits for a `room`
    /// notice (a permit freed anywhere) or, should that notice be lost, for
    /// the first permit's deadline or a second, and the round is empty.
    /// None once cancelled. Topics without a cap pass untouched, with no
    /// call and no tokens.
    async fn capped(&mut self, mut held: Vec<Held>) -> Option<(Vec<Held>, Vec<String>)> {
        let lease = self.topic.cached().spec.lease_ms;
        let wait_ms = match self
            .settler
            .permits()
            .take(&self.topic, held.len(), lease)
            .await
        {
            Ok(Taken::Uncapped) => return Some((held, Vec::new())),
            Ok(Taken::Granted(tokens)) => {
                held.truncate(tokens.len());
                return Some((held, tokens));
            }
            Ok(Taken::Refused { wait_ms }) => wait_ms.min(1_000),
            Err(e) => {
                tracing::warn!(topic = %self.topic.name(), "taking in-flight permits failed, will retry: {e}");
                drop(held);
                return self.back_off().await.then(|| (Vec::new(), Vec::new()));
            }
        };
        drop(held);
        self.take_no_marks();
        tokio::select! {
            () = self.shared.room.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            () = self.cancel.cancelled() => return None,
        }
        Some((Vec::new(), Vec::new()))
    }

    /// Frees the in-flight permits beyond the first `keep` (a round that
    /// was trimmed, or slots that had fewer messages than permits).
    fn free_beyond(&self, tokens: &mut Vec<String>, keep: usize) {
        if tokens.len() > keep {
            self.settler.free_permits(tokens.split_off(keep));
        }
    }

    /// A rate-limited topic's round is trimmed to the tokens its bucket
    /// grants now; when it grants none, the loop sleeps until the next
    /// token is due (no polling) and the round is empty. None once
    /// cancelled. Topics without a limit pass untouched, with no call.
    async fn rate_limited(&self, mut held: Vec<Held>) -> Option<Vec<Held>> {
        let granted = match rate::take(&self.topic, held.len()).await {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(topic = %self.topic.name(), "taking rate tokens failed, will retry: {e}");
                Granted {
                    tokens: 0,
                    wait_ms: 1_000,
                }
            }
        };
        if granted.tokens == 0 {
            drop(held);
            self.take_no_marks();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(granted.wait_ms)) => {}
                () = self.cancel.cancelled() => return None,
            }
            return Some(Vec::new());
        }
        held.truncate(granted.tokens);
        Some(held)
    }

    /// Room for deliveries: one permit per delivery to hand out, at least
    /// one, at most a batch. None once cancelled.
    async fn gather(&self) -> Option<Vec<Held>> {
        let first = match self.room.try_acquire() {
            Some(p) => p,
            None => self.wait_for_room().await?,
        };
        let mut held = vec![first];
        while held.len() < self.cfg.batch {
            match self.room.try_acquire() {
                Some(p) => held.push(p),
                None => break,
            }
        }
        // Under load (other deliveries still running), wait up to a
        // millisecond for half a batch: fewer, fuller round trips.
        // In a pool, the topic's share now (not its maximum) is how many
        // may be out at once.
        let limit = self
            .room
            .gate
            .as_ref()
            .map_or(self.cfg.concurrency, |g| g.size());
        let target = (self.cfg.batch.min(limit) / 2).max(1);
        if !self.serial
            && held.len() < target
            && self.room.topic.available_permits() + held.len() < limit
        {
            let deadline = tokio::time::Instant::now() + GATHER;
            while held.len() < target {
                tokio::select! {
                    p = self.room.acquire() => held.push(p?),
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = self.cancel.cancelled() => return None,
                }
            }
        }
        if self.shared.marks {
            // It takes marks for the room it has, until it has none (a
            // priority round pops one slot: one mark at a time, so that
            // a consumer does not hold the marks of slots it will not pop
            // before others could).
            let room = held.len().min(self.fanout());
            self.shared.want_marks.send_if_modified(|w| {
                let changed = *w != room;
                *w = room;
                changed
            });
        }
        Some(held)
    }

    /// Waits for room for one delivery, with none now: the consumer takes
    /// no more marks meanwhile, and due work it took marks for goes back
    /// to the others once it has waited a while. None once cancelled.
    async fn wait_for_room(&self) -> Option<Held> {
        self.take_no_marks();
        let since = self.shared.lock().server_now();
        let _waiting = self
            .shared
            .affinity
            .then(|| WaitingForRoom::new(&self.shared));
        loop {
            let hand_back_in = self
                .shared
                .marks
                .then(|| self.until_hand_back(since))
                .flatten();
            tokio::select! {
                p = self.room.acquire() => return p,
                () = tokio::time::sleep(hand_back_in.unwrap_or_default()), if hand_back_in.is_some() => {
                    let due = {
                        let mut s = self.shared.lock();
                        let until = s.server_now() - super::marks::HAND_BACK_AFTER.as_millis() as i64;
                        s.take_due(Some(until))
                    };
                    super::marks::hand_back(&self.topic, &due).await;
                }
                _ = self.cancel.cancelled() => return None,
            }
        }
    }

    /// The consumer can serve no more for now (no room, no in-flight
    /// permit, no rate token): it takes no more marks, and those its waiter
    /// gets meanwhile go back at once. Under the schedule's lock, which
    /// the waiter holds to check this and record what it took: a mark it
    /// recorded is in the schedule (and handed back from there if due), one
    /// it has not goes back.
    fn take_no_marks(&self) {
        if self.shared.marks {
            let _s = self.shared.lock();
            self.shared.want_marks.send_replace(0);
        }
    }

    /// How long until the earliest work it holds a mark for has waited
    /// [`HAND_BACK_AFTER`](super::marks::HAND_BACK_AFTER) past its time, or
    /// past `since` (server ms: when the wait for room began), whichever
    /// is later (None: no work known).
    fn until_hand_back(&self, since: i64) -> Option<Duration> {
        let s = self.shared.lock();
        let earliest = s.earliest_held()?.max(since);
        let at = earliest + super::marks::HAND_BACK_AFTER.as_millis() as i64;
        Some(Duration::from_millis(
            u64::try_from(at - s.server_now()).unwrap_or(0),
        ))
    }

    /// Slots popped per round at most: one for a parallel consumer of a
    /// priority topic (the best slot first), else [`FANOUT`].
    fn fanout(&self) -> usize {
        super::chain::fanout_of(self.topic.kind(), self.serial, FANOUT)
    }

    /// Waits for slots with work: surveys slots it knows nothing of, then
    /// sleeps until the earliest known due time, a notice (or a mark) or
    /// the next rescan. None once cancelled.
    async fn wait_for_work(&mut self) -> Option<Vec<u32>> {
        loop {
            if self.cancel.is_cancelled() || self.topic_deleted().await {
                return None;
            }
            if self.last_rescan.elapsed() >= self.cfg.rescan {
                self.shared.lock().mark_all();
                self.last_rescan = Instant::now();
            }
            // Read before the slots it may take from: a wake-up that comes
            // after (a slot acquired, or one whose delivery ended) is newer
            // than the look, which keeps it.
            let since = self.shared.lock().generation();
            // Serial mode: only the slots this member may take from. The
            // others' owners look at theirs; a slot acquired later is woken
            // then (`slot_may_have_work`). A read of the index reaches every
            // slot it owns, busy or leaving ones too, so that a slot that
            // becomes takeable again without a wake-up keeps what the
            // index said of it.
            let allowed = self
                .shared
                .ownership
                .as_ref()
                .map(|o| self.shared.own(o).takeable());
            let mut unknown = self.shared.lock().unknown();
            if let Some(a) = &allowed {
                unknown.retain(|slot| a.contains(slot));
            }
            // (Only for a look: most rounds have nothing unknown.)
            let owned = || {
                self.shared
                    .ownership
                    .as_ref()
                    .map(|o| self.shared.own(o).owned())
            };
            if !unknown.is_empty()
                && !self
                    .look(&unknown, allowed.as_ref(), owned().as_ref(), since)
                    .await
            {
                if !self.back_off().await {
                    return None;
                }
                continue;
            }
            let fanout = self.fanout();
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
            // The last index read left entries out, and they may come
            // before the sleep ends: read it again (not too often).
            if self.shared.lock().index_exhausted(wait)
                && self.last_index_read.elapsed() >= INDEX_REREAD
            {
                self.last_index_read = Instant::now();
                self.shared.lock().mark_all();
                continue;
            }
            let until_rescan = self.cfg.rescan.saturating_sub(self.last_rescan.elapsed());
            let mut sleep = wait
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
                .unwrap_or(until_rescan)
                .min(until_rescan);
            if self.shared.lock().index_exhausted(wait) {
                sleep = sleep.min(INDEX_REREAD);
            }
            tokio::select! {
                _ = self.shared.notify.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = self.cancel.cancelled() => return None,
            }
        }
    }

    /// Whether the topic was deleted (its definition is read again at most
    /// every 2 s, on waking): then the consumer stops, saying why.
    async fn topic_deleted(&self) -> bool {
        match self.topic.settings().await {
            Err(e) if e.kind() == ErrorKind::UnknownTopic => {
                tracing::error!(topic = %self.topic.name(), "the consumer stops: {e}");
                self.shared.stop_with(e);
                self.cancel.cancel();
                true
            }
            _ => false,
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

/// Says, while it lives, that the fetch loop waits for room (for slot
/// affinity: a consumer that waits long leaves the split).
struct WaitingForRoom<'a>(&'a Shared);

impl<'a> WaitingForRoom<'a> {
    fn new(shared: &'a Shared) -> Self {
        shared.waiting_for_room.send_replace(true);
        WaitingForRoom(shared)
    }
}

impl Drop for WaitingForRoom<'_> {
    fn drop(&mut self) {
        self.0.waiting_for_room.send_replace(false);
    }
}
