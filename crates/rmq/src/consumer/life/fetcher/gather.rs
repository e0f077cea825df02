//! How much a round may take: room in the consumer's own limit (a
//! semaphore permit per delivery), then the topic's in-flight cap (permits
//! Redis grants) and rate limit (tokens), each round trimmed to what was
//! granted and the rest given back.

use super::*;

impl Fetcher {
    /// A capped topic's round is trimmed to the in-flight permits granted
    /// now (one token each); when none are, the loop waits for a `room`
    /// notice (a permit freed anywhere) or, should that notice be lost, for
    /// the first permit's deadline or a second, and the round is empty.
    /// None once cancelled. Topics without a cap pass untouched, with no
    /// call and no tokens.
    pub(super) async fn capped(&mut self, mut held: Vec<Held>) -> Option<(Vec<Held>, Vec<String>)> {
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
    pub(super) fn free_beyond(&self, tokens: &mut Vec<String>, keep: usize) {
        if tokens.len() > keep {
            self.settler.free_permits(tokens.split_off(keep));
        }
    }

    /// A rate-limited topic's round is trimmed to the tokens its bucket
    /// grants now; when it grants none, the loop sleeps until the next
    /// token is due (no polling) and the round is empty. None once
    /// cancelled. Topics without a limit pass untouched, with no call.
    pub(super) async fn rate_limited(&self, mut held: Vec<Held>) -> Option<Vec<Held>> {
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
    pub(super) async fn gather(&self) -> Option<Vec<Held>> {
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
    pub(super) async fn wait_for_room(&self) -> Option<Held> {
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
                        let until = s.server_now() - crate::consumer::discovery::marks::HAND_BACK_AFTER.as_millis() as i64;
                        s.take_due(Some(until))
                    };
                    crate::consumer::discovery::marks::hand_back(&self.topic, &due).await;
                }
                _ = self.cancel.cancelled() => return None,
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
