//! What a consumer knows about each slot: when something there may be
//! ready, and (priority topics) the best pending score. It decides which
//! slots to visit next and how long to sleep when none is ready.
//!
//! Knowledge comes from pop replies (head score, next retry, next lease
//! deadline), from wake-up notifications and from periodic rescans (on a
//! single node, one read of the topic's head index; see `heads.rs`); it may
//! be stale, which costs at most an empty pop, never a wrong delivery: the
//! scripts decide what is due by the server clock.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::topic::TopicKind;

#[derive(Debug, Clone, Copy, Default)]
struct SlotHint {
    /// Server ms at which the slot may have work (None: nothing known).
    next: Option<i64>,
    /// Priority topics: score of the best pending message.
    best: Option<i64>,
    /// Not looked at since the last (re)start or rescan.
    unknown: bool,
    /// Generation of the last notice about this slot.
    noticed: u64,
}

/// Per-slot hints and the estimate of the server clock.
#[derive(Debug)]
pub(crate) struct Schedule {
    kind: TopicKind,
    slots: Vec<SlotHint>,
    /// server ms - local ms, from the last reply.
    offset_ms: i64,
    /// Counts notices, so a reply can tell whether one came in meanwhile.
    generation: u64,
    /// The last index read left entries out: they all sort after this
    /// value (a time; for a priority topic's pending heads, "now"), so the
    /// index is read again before sleeping past it or when nothing is
    /// known.
    index_horizon: Option<i64>,
}

pub(crate) fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Schedule {
    pub(crate) fn new(kind: TopicKind, slots: u32) -> Self {
        Schedule {
            kind,
            // Unknown at start: every slot is visited once.
            slots: vec![
                SlotHint {
                    next: Some(0),
                    best: None,
                    unknown: true,
                    noticed: 0
                };
                slots as usize
            ],
            offset_ms: 0,
            generation: 0,
            index_horizon: None,
        }
    }

    /// The server clock as estimated from the last reply.
    pub(crate) fn server_now(&self) -> i64 {
        local_ms() + self.offset_ms
    }

    pub(crate) fn observe_server_time(&mut self, server_ms: i64) {
        self.offset_ms = server_ms - local_ms();
    }

    /// Marks every slot to be looked at now (start, reconnect, rescan).
    pub(crate) fn mark_all(&mut self) {
        for s in &mut self.slots {
            s.next = Some(0);
            s.unknown = true;
        }
    }

    /// Takes in a read of the head index (sent at notice generation
    /// `since`; `entries` are (slot, value), smallest first, `more` when
    /// some were left out): every slot becomes known, a slot without an
    /// entry as holding nothing. What a notice said after the read was
    /// sent is kept, since the read may predate it.
    pub(crate) fn apply_index(&mut self, entries: &[(u32, i64)], more: bool, since: u64) {
        let now = self.server_now();
        for h in &mut self.slots {
            h.unknown = false;
            if h.noticed <= since {
                h.next = None;
                h.best = None;
            }
        }
        let priority = self.kind == TopicKind::Priority;
        for &(slot, v) in entries {
            let Some(h) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let (next, best) = if priority && v <= 0 {
                (now, Some(-v))
            } else {
                (v, None)
            };
            h.next = Some(h.next.map_or(next, |n| n.min(next)));
            h.best = h.best.max(best);
        }
        self.index_horizon = match entries.last() {
            Some(&(_, v)) if more => Some(if priority && v <= 0 { now } else { v }),
            _ => None,
        };
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
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, h)| h.unknown)
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Records what a pop reply said about a slot.
    /// The current notice generation: pass it to [`Schedule::after_pop`]
    /// for a call sent now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Records what a pop (sent at notice generation `since`) said about a
    /// slot. A notice that arrived after the pop was sent is kept, since the
    /// reply may predate it.
    pub(crate) fn after_pop(
        &mut self,
        slot: u32,
        since: u64,
        head: Option<i64>,
        retry: Option<i64>,
        lease: Option<i64>,
        now: i64,
    ) {
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let head_ready = match self.kind {
            TopicKind::Priority => head.map(|_| now),
            _ => head,
        };
        let next = [head_ready, retry, lease].into_iter().flatten().min();
        let best = if self.kind == TopicKind::Priority {
            head
        } else {
            None
        };
        if h.noticed > since {
            h.next = [h.next, next].into_iter().flatten().min();
            h.best = h.best.max(best);
        } else {
            h.next = next;
            h.best = best;
        }
        h.unknown = false;
    }

    /// Records a wake-up notification: slot's new head has this score.
    pub(crate) fn notify(&mut self, slot: u32, score: i64) {
        let now = self.server_now();
        self.generation += 1;
        let generation = self.generation;
        let Some(h) = self.slots.get_mut(slot as usize) else {
            return;
        };
        let at = if self.kind == TopicKind::Priority {
            now
        } else {
            score
        };
        h.next = Some(h.next.map_or(at, |n| n.min(at)));
        h.noticed = generation;
        if self.kind == TopicKind::Priority {
            h.best = Some(h.best.map_or(score, |b| b.max(score)));
        }
    }

    /// Records that something in the slot becomes ready at server time `ms`.
    pub(crate) fn wake_at(&mut self, slot: u32, ms: i64) {
        self.generation += 1;
        let generation = self.generation;
        if let Some(h) = self.slots.get_mut(slot as usize) {
            h.next = Some(h.next.map_or(ms, |n| n.min(ms)));
            h.noticed = generation;
        }
    }

    /// Up to `limit` slots with work now, best first: highest known
    /// priority, or earliest due time.
    /// Only slots in `allowed` count when it is given (serial mode).
    pub(crate) fn ready(
        &self,
        limit: usize,
        allowed: Option<&std::collections::HashSet<u32>>,
    ) -> Vec<u32> {
        let now = self.server_now();
        let mut r: Vec<(u32, SlotHint)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, h)| {
                h.next.is_some_and(|n| n <= now) && allowed.is_none_or(|a| a.contains(&(*i as u32)))
            })
            .map(|(i, h)| (i as u32, *h))
            .collect();
        match self.kind {
            TopicKind::Priority => r.sort_by(|a, b| b.1.best.cmp(&a.1.best).then(a.0.cmp(&b.0))),
            _ => r.sort_by(|a, b| a.1.next.cmp(&b.1.next).then(a.0.cmp(&b.0))),
        }
        r.truncate(limit);
        r.into_iter().map(|(i, _)| i).collect()
    }

    /// Milliseconds until the earliest known event (None: nothing known).
    /// Only slots in `allowed` count when it is given (serial mode: busy and
    /// foreign slots wake the fetcher by other means).
    pub(crate) fn ms_until_next(
        &self,
        allowed: Option<&std::collections::HashSet<u32>>,
    ) -> Option<i64> {
        let now = self.server_now();
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, _)| allowed.is_none_or(|a| a.contains(&(*i as u32))))
            .filter_map(|(_, h)| h.next)
            .min()
            .map(|n| (n - now).max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_slots_are_visited_best_first() {
        let mut s = Schedule::new(TopicKind::Priority, 4);
        let now = s.server_now();
        s.after_pop(0, 0, Some(5 << 32), None, None, now);
        s.after_pop(1, 0, Some(9 << 32), None, None, now);
        s.after_pop(2, 0, None, None, None, now);
        s.after_pop(3, 0, None, Some(now + 60_000), None, now);
        assert_eq!(s.ready(10, None), vec![1, 0]);
        assert!(s.ms_until_next(None) == Some(0));
    }

    #[test]
    fn a_look_makes_a_slot_known() {
        let mut s = Schedule::new(TopicKind::FixedTime, 2);
        assert_eq!(s.unknown(), vec![0, 1]);
        let now = s.server_now();
        s.after_pop(0, 0, None, None, None, now);
        assert_eq!(s.unknown(), vec![1]);
        s.mark_all();
        assert_eq!(s.unknown(), vec![0, 1]);
    }

    #[test]
    fn an_index_read_makes_every_slot_known_and_keeps_later_notices() {
        let mut s = Schedule::new(TopicKind::Priority, 4);
        let since = s.generation();
        s.notify(3, 7 << 32); // a notice after the read was sent
        let now = s.server_now();
        s.apply_index(&[(1, -(9 << 32)), (2, now + 60_000)], false, since);
        assert!(s.unknown().is_empty());
        assert_eq!(s.ready(10, None), vec![1, 3], "best first; 0 holds nothing");
        assert!(!s.index_exhausted(None));
        // Entries left out: read again before sleeping past the last one.
        s.apply_index(&[(2, now + 60_000)], true, s.generation());
        assert!(!s.index_exhausted(Some(1_000)));
        assert!(s.index_exhausted(Some(120_000)));
    }

    #[test]
    fn time_slots_sleep_until_the_earliest_due() {
        let mut s = Schedule::new(TopicKind::FixedTime, 2);
        let now = s.server_now();
        s.after_pop(0, 0, Some(now + 5_000), None, None, now);
        s.after_pop(1, 0, None, None, Some(now + 2_000), now);
        assert!(s.ready(10, None).is_empty());
        let ms = s.ms_until_next(None).unwrap();
        assert!((1_900..=2_000).contains(&ms), "{ms}");
        s.notify(0, now - 1);
        assert_eq!(s.ready(10, None), vec![0]);
    }
}
