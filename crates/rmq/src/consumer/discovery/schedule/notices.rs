//! What the consumer hears between replies: wake-up notices of new heads and retries, the
//! marks it took (work handed to it alone), and which slots are its own by affinity; and the
//! marks it holds, handed back when it cannot serve them soon.

use super::*;

impl Schedule {
    /// Whether notices of `slot` are this consumer's: not when the slot is
    /// another consumer's by affinity.
    pub(crate) fn hears(&self, slot: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(|h| !h.foreign)
    }

    /// Notes a notice of another consumer's slot by affinity, which is not
    /// this one's to act on: a priority topic's new pending head is there
    /// since now (see `SlotHint::foreign_seen`).
    pub(crate) fn foreign_noticed(&mut self, slot: u32, score: i64) {
        if self.kind != TopicKind::Priority {
            return;
        }
        let now = self.server_now();
        if let Some(h) = self.slots.get_mut(slot as usize) {
            if h.foreign_seen.is_none_or(|(v, _)| v != -score) {
                h.foreign_seen = Some((-score, now));
            }
        }
    }

    /// Sets which slots are this consumer's by affinity (`mine[slot]`;
    /// all of them when empty). Of a foreign slot it keeps only work that
    /// is overdue, as a read of the index would (a slot not looked at yet
    /// stays to be looked at).
    pub(crate) fn set_affinity(&mut self, mine: &[bool]) {
        let overdue = self.server_now() - STEAL_AFTER_MS;
        for (slot, h) in self.slots.iter_mut().enumerate() {
            h.foreign = !mine.is_empty() && !mine.get(slot).copied().unwrap_or(false);
            if !h.foreign {
                h.foreign_seen = None;
            } else if h.next.is_some_and(|n| n > overdue) || (h.next == Some(READY) && !h.unknown) {
                h.next = None;
                h.best = None;
            }
        }
        self.rebuild_by_next();
    }

    /// Records a wake-up notification: slot's new head has this score.
    pub(crate) fn notify(&mut self, slot: u32, score: i64) {
        self.generation += 1;
        let generation = self.generation;
        let priority = self.kind == TopicKind::Priority;
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let at = if priority { READY } else { score };
        h.noticed = generation;
        h.noticed_min = Some(h.noticed_min.map_or(at, |n| n.min(at)));
        if priority {
            h.best = Some(h.best.map_or(score, |b| b.max(score)));
            h.noticed_best = Some(h.noticed_best.map_or(score, |b| b.max(score)));
        }
        let next = Some(h.next.map_or(at, |n| n.min(at)));
        self.set_next(slot as usize, next);
    }

    /// Records that something in the slot becomes ready at server time `ms`.
    pub(crate) fn wake_at(&mut self, slot: u32, ms: i64) {
        self.generation += 1;
        let generation = self.generation;
        if let Some(h) = self.slots.get_mut(slot as usize) {
            h.noticed = generation;
            h.noticed_min = Some(h.noticed_min.map_or(ms, |n| n.min(ms)));
            let next = Some(h.next.map_or(ms, |n| n.min(ms)));
            self.set_next(slot as usize, next);
        }
    }

    /// The slots' pops are being sent: what notices said before is in
    /// what the pops will find.
    pub(crate) fn sending(&mut self, slots: &[u32]) {
        for &slot in slots {
            if let Some(h) = self.slots.get_mut(slot as usize) {
                h.noticed_min = None;
                h.noticed_best = None;
            }
        }
    }

    /// Records a mark this consumer took: the slot has work at index value
    /// `v` (a priority topic's pending head: minus its score; else a time).
    pub(crate) fn marked(&mut self, slot: u32, v: i64) {
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let pending = self.kind == TopicKind::Priority && v <= 0;
        let ranks = !(pending && was_taken(h.taken, -v));
        // One mark per slot, the last taken: Redis keeps one per slot, so
        // the later one was written after what the earlier one told of (a
        // pop that found the slot leased marks the lease's end; keeping an
        // older mark of its pending head instead would pop it again and
        // again).
        h.held = Some(v);
        h.held_ranks = ranks;
        if pending && ranks {
            self.notify(slot, -v);
        } else if pending {
            self.wake_at(slot, READY); // no news of the best: see `taken`
        } else {
            self.wake_at(slot, v);
        }
        let generation = self.generation;
        if let Some(h) = self.slots.get_mut(slot as usize) {
            h.held_at = generation;
        }
    }

    /// A slot whose pop failed is tried again at server time `at`, not
    /// before.
    pub(crate) fn retry_later(&mut self, slot: u32, at: i64) {
        self.set_next(slot as usize, Some(at));
        self.set_known(slot as usize);
    }

    /// Takes out the marks it holds for work due by server time `until`
    /// (all of them when None), (slot, index value), to hand back: what a
    /// consumer that cannot serve it soon gives to the others. (Work it
    /// learned of otherwise, the others can learn of too.)
    pub(crate) fn take_due(&mut self, until: Option<i64>) -> Vec<(u32, i64)> {
        let due: Vec<u32> = self
            .by_next
            .iter()
            .take_while(|&&(n, _)| until.is_none_or(|u| n <= u))
            .map(|&(_, slot)| slot)
            .filter(|&slot| {
                self.slots
                    .get(slot as usize)
                    .is_some_and(|h| h.held.is_some())
            })
            .collect();
        let mut out = Vec::with_capacity(due.len());
        for slot in due {
            let Some(h) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Some(v) = h.held.take() else {
                continue;
            };
            h.best = None;
            out.push((slot, v));
            self.set_next(slot as usize, None);
        }
        out
    }

    /// When the earliest work it holds a mark for may be done (server ms;
    /// [`READY`] for work ready whatever the time), if it holds any.
    pub(crate) fn earliest_held(&self) -> Option<i64> {
        self.by_next
            .iter()
            .find(|&&(_, slot)| {
                self.slots
                    .get(slot as usize)
                    .is_some_and(|h| h.held.is_some())
            })
            .map(|&(n, _)| n)
    }
}
