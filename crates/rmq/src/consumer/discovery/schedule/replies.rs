//! What Redis told of the slots: each pop's reply (a slot's head, next retry and first lease
//! deadline, and what the pop took) and each read of the head index (which slots have work
//! and when), recorded as of the notice generation the caller read before it asked.

use super::*;

impl Schedule {
    /// Takes in a read of the head index (sent at notice generation
    /// `since`; `entries` are (slot, value), smallest first, `more` when
    /// some were left out): every slot becomes known, a slot without an
    /// entry as holding nothing. What a notice said after the read was
    /// sent is kept, since the read may predate it.
    pub(crate) fn apply_index(&mut self, entries: &[(u32, i64)], more: bool, since: u64) {
        let now = self.server_now();
        self.unknown_count = 0;
        for h in &mut self.slots {
            h.unknown = false;
            if h.noticed <= since {
                h.next = None;
                h.best = None;
            }
        }
        let priority = self.kind == TopicKind::Priority;
        let kind = self.kind;
        for h in &mut self.slots {
            if let Some((next, best)) = held_hint(kind, h) {
                h.next = Some(h.next.map_or(next, |n| n.min(next)));
                h.best = h.best.max(best);
            }
        }
        for &(slot, v) in entries {
            let Some(h) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let (next, best) = hint_of(kind, v);
            if self.marks && next > now {
                continue; // later work: a mark holds it
            }
            if h.foreign {
                let first_seen = match h.foreign_seen {
                    Some((seen, at)) if seen == v => at,
                    _ => now,
                };
                h.foreign_seen = Some((v, first_seen));
                let overdue = if priority && v <= 0 {
                    first_seen <= now - STEAL_AFTER_MS
                } else {
                    next <= now - STEAL_AFTER_MS
                };
                if !overdue {
                    continue; // its owner takes it
                }
            }
            h.next = Some(h.next.map_or(next, |n| n.min(next)));
            h.best = h.best.max(best);
        }
        self.rebuild_by_next();
        self.index_horizon = match entries.last() {
            Some(&(_, v)) if more => Some(if priority && v <= 0 { now } else { v }),
            _ => None,
        }
        .filter(|&h| !self.marks || h <= now);
    }

    /// Whether the index must be read again before the fetch loop sleeps
    /// `wait_ms` (None: nothing known): the last read left entries out and
    /// they may come before that.
    pub(crate) fn index_exhausted(&self, wait_ms: Option<i64>) -> bool {
        match (self.index_horizon, wait_ms) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(h), Some(w)) => self.server_now() + w > h,
        }
    }

    /// Slots to survey (look at without taking) before choosing.
    pub(crate) fn unknown(&self) -> Vec<u32> {
        if self.unknown_count == 0 {
            return Vec::new();
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, h)| h.unknown)
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Records what a look at a slot (a pop that takes nothing, sent at
    /// notice generation `since`) said about it. A notice that arrived
    /// after the look was sent is kept, since the reply may predate it; so
    /// is a mark it holds (a look marks nothing).
    pub(crate) fn after_pop(
        &mut self,
        slot: u32,
        since: u64,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
    ) {
        self.record_reply(slot, since, head, retry, lease, now, None);
    }

    /// [`after_pop`](Self::after_pop) of a pop that may take (the fetch
    /// loop's), which took messages scored `taken` (lowest, highest) if
    /// any: it ends the marks the consumer took before it was sent, since
    /// it marked what it left; and a notice or mark within `taken` told of
    /// a message it took, so it no longer ranks the slot.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn after_pop_taking(
        &mut self,
        slot: u32,
        since: u64,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
        taken: Option<(i64, i64)>,
    ) {
        self.record_reply(slot, since, head, retry, lease, now, Some(taken));
    }

    /// [`after_pop_taking`](Self::after_pop_taking) of a take made inside
    /// a settle call (`life/delivery/settler/chain.rs`), which may run beside a pop of the same
    /// slot. It is sent without [`sending`](Self::sending) and keeps the
    /// notices it did not judge, so the other call's reply still sees
    /// them; and where a notice came after it was sent, it only ever moves
    /// the slot earlier (the other reply may have used that notice up). At
    /// worst a notice counts twice: one more pop.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn after_take_on_settle(
        &mut self,
        slot: u32,
        since: u64,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
        taken: Option<(i64, i64)>,
    ) {
        let Some(h) = self.slots.get(slot as usize) else {
            return;
        };
        let (noticed_min, noticed_best) = (h.noticed_min, h.noticed_best);
        let later_notice = (h.noticed > since).then_some((h.next, h.best));
        self.record_reply(slot, since, head, retry, lease, now, Some(taken));
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        h.noticed_min = noticed_min;
        h.noticed_best = noticed_best;
        if let Some((next_before, best_before)) = later_notice {
            h.best = h.best.max(best_before);
            let next = [h.next, next_before].into_iter().flatten().min();
            self.set_next(slot as usize, next);
        }
    }

    /// What [`after_pop`](Self::after_pop) and
    /// [`after_pop_taking`](Self::after_pop_taking) do: `popped` is None
    /// for a look.
    #[allow(clippy::too_many_arguments)]
    fn record_reply(
        &mut self,
        slot: u32,
        since: u64,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
        popped: Option<Option<(i64, i64)>>,
    ) {
        let taken = popped.flatten();
        let next = self.next_of_reply(slot, head, retry, lease, now);
        let best = if self.kind == TopicKind::Priority {
            head
        } else {
            None
        };
        let kind = self.kind;
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let next = if h.noticed > since {
            let news = h.noticed_best.filter(|&b| !was_taken(taken, b));
            h.best = news.max(best);
            [h.noticed_min, next].into_iter().flatten().min()
        } else {
            h.best = best;
            next
        };
        if popped.is_some() {
            if h.held_at <= since {
                h.held = None; // taken before this pop, which marked what it left
            } else if let Some((_, Some(score))) = h.held.map(|v| hint_of(kind, v)) {
                h.held_ranks &= !was_taken(taken, score);
            }
            if taken.is_some() {
                h.taken = taken;
            }
        }
        let next = match held_hint(kind, h) {
            Some((held_next, held_best)) => {
                h.best = h.best.max(held_best);
                Some(next.map_or(held_next, |n| n.min(held_next)))
            }
            None => next,
        };
        h.noticed_min = None;
        h.noticed_best = None;
        self.set_next(slot as usize, next);
        self.set_known(slot as usize);
    }

    /// When a slot has work again, from what a pop or a look replied: its
    /// head (ready at once on a priority topic), its next retry and its
    /// first lease deadline. A consumer that waits on the marks, or a slot
    /// another consumer owns by affinity, keeps only work due now: later
    /// work was marked for one consumer (or is the owner's), and a lease
    /// ends with its settle (one that runs out is found by a rescan).
    fn next_of_reply(
        &self,
        slot: u32,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
    ) -> Option<i64> {
        let head_ready = match self.kind {
            TopicKind::Priority => head.map(|_| READY),
            _ => head,
        };
        let foreign = self.slots.get(slot as usize).is_some_and(|h| h.foreign);
        if self.marks || foreign {
            [head_ready, retry]
                .into_iter()
                .flatten()
                .filter(|&n| n <= now)
                .min()
        } else {
            [head_ready, retry, lease].into_iter().flatten().min()
        }
    }
}
