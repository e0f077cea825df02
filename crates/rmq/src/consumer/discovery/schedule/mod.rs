//! What a consumer knows about each slot: when something there may be
//! ready, and (priority topics) the best pending score. It decides which
//! slots to visit next and how long to sleep when none is ready.
//!
//! Knowledge comes from pop replies (head score, next retry, next lease
//! deadline), from wake-up notifications and from periodic rescans (on a
//! single node, one read of the topic's head index; see `heads.rs`); it may
//! be stale, which costs at most an empty pop, never a wrong delivery: the
//! scripts decide what is due by the server clock.
//!
//! A consumer that waits on the topic's marks (`marks.rs`) keeps only work
//! that is due now or that a mark handed to it: what a pop reply or an
//! index read says of later work was marked for one consumer, and keeping
//! it here too would bring every consumer that heard of it to the slot at
//! once (the herd the marks are there to avoid).
//!
//! A parallel consumer on a cluster serves first the slots its affinity
//! gives it (`affinity.rs`); of the others' slots it keeps only work that
//! is overdue (taken over from a consumer that does not take it): due
//! [`STEAL_AFTER_MS`] ago, or a priority topic's pending head that index
//! reads found unchanged for as long.
//!
//! A priority topic's pending work is ready whatever the time: its `next`
//! is [`READY`], earlier than any server time (not "now" by this clock's
//! estimate, which moves back a little with each reply's round trip).
//!
//! This file keeps the hints and chooses from them (which slots next, how
//! long to sleep); `replies.rs` records what pops and index reads said,
//! `notices.rs` what is heard between them (notices, marks, affinity).

use std::collections::{BTreeSet, HashSet};
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
    /// The earliest time a notice (or a mark) gave since the slot's last
    /// pop was sent: what a reply that may predate it must keep. (Not
    /// `next`, which may still hold what that pop made stale: a consumer
    /// whose own pop marks the slot, and that takes the mark before the
    /// reply, would otherwise pop again and again.)
    noticed_min: Option<i64>,
    /// Priority topics: the best score notices gave since then (likewise).
    noticed_best: Option<i64>,
    /// The index value of a mark this consumer took and has not popped the
    /// slot for since: the mark is gone from Redis, so this consumer alone
    /// knows of that work, and what it learns of the slot otherwise (a
    /// rescan, an index read, a look) must not make it forget. A pop sent
    /// after it was taken ends it (the pop marks what it leaves).
    held: Option<i64>,
    /// The notice generation at which `held` was last taken.
    held_at: u64,
    /// Whether `held`, a priority topic's pending head, ranks the slot by
    /// its score (not when it told of a message a pop took already).
    held_ranks: bool,
    /// Priority topics: the lowest and highest score the slot's last pop
    /// that took something took. A mark of a score between them told of
    /// one of those messages (marks can reach the consumer long after they
    /// were taken from Redis): it wakes the slot, and is held, but does
    /// not rank it. What a pop leaves behind scores lower, and so does a
    /// message of the same priority sent later.
    taken: Option<(i64, i64)>,
    /// Another consumer's by affinity: notices of it are not this
    /// consumer's, and only overdue work in it is kept.
    foreign: bool,
    /// A foreign slot's index value as a read last found it, and when (server
    /// ms) a read first found that value: a priority topic's pending head
    /// that reads find unchanged for [`STEAL_AFTER_MS`] is overdue.
    foreign_seen: Option<(i64, i64)>,
}

/// Whether priority score `score` lies within what a pop took.
fn was_taken(taken: Option<(i64, i64)>, score: i64) -> bool {
    taken.is_some_and(|(low, high)| low <= score && score <= high)
}

/// The `next` of work that is ready whatever the time (a priority topic's
/// pending messages).
const READY: i64 = 0;

/// What a mark the slot holds says of it, as [`hint_of`] (no score when
/// the mark told of a message a pop took already).
fn held_hint(kind: TopicKind, h: &SlotHint) -> Option<(i64, Option<i64>)> {
    let (next, best) = hint_of(kind, h.held?);
    Some((next, best.filter(|_| h.held_ranks)))
}

/// What an index value (an index entry's, a mark's) says of its slot:
/// when it may have work, and for a priority topic's pending head its
/// score.
fn hint_of(kind: TopicKind, v: i64) -> (i64, Option<i64>) {
    if kind == TopicKind::Priority && v <= 0 {
        (READY, Some(-v))
    } else {
        (v, None)
    }
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
    /// (next, slot) of every slot whose next is known, earliest first:
    /// choosing slots and the time to sleep walk it from the start instead
    /// of every slot (65,536 of them on a large topic, at every wake-up).
    by_next: BTreeSet<(i64, u32)>,
    /// How many slots are unknown.
    unknown_count: usize,
    /// The consumer waits on the marks: later work it did not take a mark
    /// for is not its own (see the module docs).
    marks: bool,
}

/// How long work in another consumer's slot must have been due before
/// this consumer takes it (ms): its owner takes work as it falls due, so
/// work still there this long after is work the owner does not take (it
/// is gone, or has no room).
pub(crate) const STEAL_AFTER_MS: i64 = 1_000;

/// How much earlier another slot's work must be due for a take on settle
/// to leave it to the fetch loop (ms; as `SLACK_MS` in settle_take.lua).
pub(crate) const SLACK_MS: i64 = 100;

pub(crate) fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

mod notices;
mod replies;

impl Schedule {
    #[cfg(test)]
    pub(crate) fn new(kind: TopicKind, slots: u32) -> Self {
        Self::with_marks(kind, slots, false)
    }

    /// A schedule for a consumer that waits on the marks when `marks`.
    pub(crate) fn with_marks(kind: TopicKind, slots: u32, marks: bool) -> Self {
        let mut s = Schedule {
            kind,
            slots: vec![SlotHint::default(); slots as usize],
            offset_ms: 0,
            generation: 0,
            index_horizon: None,
            by_next: BTreeSet::new(),
            unknown_count: 0,
            marks,
        };
        // Unknown at start: every slot is visited once.
        s.mark_all();
        s
    }

    /// Sets a slot's next, keeping `by_next` in step.
    fn set_next(&mut self, slot: usize, next: Option<i64>) {
        let Some(h) = self.slots.get_mut(slot) else {
            return;
        };
        if h.next == next {
            return;
        }
        if let Some(n) = h.next {
            self.by_next.remove(&(n, slot as u32));
        }
        if let Some(n) = next {
            self.by_next.insert((n, slot as u32));
        }
        h.next = next;
    }

    /// Marks a slot known (looked at).
    fn set_known(&mut self, slot: usize) {
        if let Some(h) = self.slots.get_mut(slot) {
            if h.unknown {
                h.unknown = false;
                self.unknown_count -= 1;
            }
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
        self.unknown_count = self.slots.len();
        self.rebuild_by_next();
    }

    /// Builds `by_next` again from the hints in one pass (after a change
    /// to most slots: one by one would cost a tree operation each).
    fn rebuild_by_next(&mut self) {
        self.by_next = (0u32..)
            .zip(&self.slots)
            .filter_map(|(i, h)| h.next.map(|n| (n, i)))
            .collect();
    }

    /// Records what a pop reply said about a slot.
    /// The current notice generation: pass it to [`Schedule::after_pop`]
    /// for a call sent now.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Up to `limit` slots with work now, best first: highest known
    /// priority, or earliest due time.
    /// Only slots in `allowed` count when it is given (serial mode).
    pub(crate) fn ready(&self, limit: usize, allowed: Option<&HashSet<u32>>) -> Vec<u32> {
        let now = self.server_now();
        let due = self
            .by_next
            .range(..=(now, u32::MAX))
            .map(|&(_, slot)| slot)
            .filter(|slot| allowed.is_none_or(|a| a.contains(slot)));
        match self.kind {
            TopicKind::Priority => {
                let mut r: Vec<(u32, Option<i64>)> = due
                    .map(|slot| (slot, self.slots[slot as usize].best))
                    .collect();
                r.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                r.truncate(limit);
                r.into_iter().map(|(slot, _)| slot).collect()
            }
            // Earliest due first: the order `by_next` keeps.
            _ => due.take(limit).collect(),
        }
    }

    /// Whether fewer than `fanout` other slots with work now (of
    /// `allowed`, when given) come before `slot`: a higher known priority
    /// class, or due more than [`SLACK_MS`] earlier. Taking a slot's next
    /// message as its delivery ends (`life/delivery/settler/chain.rs`) then keeps the order the
    /// fetch loop keeps between priorities, and due times within
    /// [`SLACK_MS`], instead of draining one slot while better work waits.
    pub(crate) fn ranks_among_next(
        &self,
        slot: u32,
        fanout: usize,
        allowed: Option<&HashSet<u32>>,
    ) -> bool {
        let now = self.server_now();
        let Some(mine) = self.slots.get(slot as usize) else {
            return false;
        };
        let other = |s: u32| s != slot && allowed.is_none_or(|a| a.contains(&s));
        let due = self.by_next.range(..=(now, u32::MAX));
        let before = match self.kind {
            // Equal priorities of two slots have no order between them
            // (each slot's FIFO part counts its own sends).
            TopicKind::Priority => {
                let class = |best: Option<i64>| best.map(|b| b >> 32);
                let mine = class(mine.best);
                due.filter(|&&(_, s)| other(s) && class(self.slots[s as usize].best) > mine)
                    .take(fanout)
                    .count()
            }
            // `by_next` is in due-time order: those due SLACK_MS or more
            // before its own next.
            _ => {
                let own = mine.next.map_or(i64::MAX, |n| n.saturating_sub(SLACK_MS));
                due.take_while(|&&(n, _)| n < own)
                    .filter(|&&(_, s)| other(s))
                    .take(fanout)
                    .count()
            }
        };
        before < fanout
    }

    /// Milliseconds until the earliest known event (None: nothing known).
    /// Only slots in `allowed` count when it is given (serial mode: busy and
    /// foreign slots wake the fetcher by other means).
    pub(crate) fn ms_until_next(&self, allowed: Option<&HashSet<u32>>) -> Option<i64> {
        let now = self.server_now();
        self.earliest(allowed).map(|n| (n - now).max(0))
    }

    /// The earliest known next of the slots in `allowed` (all when None).
    fn earliest(&self, allowed: Option<&HashSet<u32>>) -> Option<i64> {
        self.by_next
            .iter()
            .find(|(_, slot)| allowed.is_none_or(|a| a.contains(slot)))
            .map(|&(n, _)| n)
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
    fn another_consumers_slot_is_not_heard_and_keeps_only_overdue_work() {
        let mut s = Schedule::new(TopicKind::FixedTime, 4);
        s.set_affinity(&[true, false, false, true]);
        assert!(s.hears(0) && !s.hears(1) && !s.hears(2) && s.hears(3));
        let now = s.server_now();
        let entries = [
            (1, now - STEAL_AFTER_MS - 100), // the owner left it: overdue
            (2, now - 10),                   // just due: its owner takes it
            (0, now + 500),                  // this one's, later
            (3, now + 60_000),
        ];
        s.apply_index(&entries, false, s.generation());
        assert_eq!(s.ready(4, None), vec![1]);
        // A pop of a foreign slot keeps only what is due now: its later
        // work is its owner's.
        s.after_pop_taking(1, s.generation(), Some(now + 200), None, None, now, None);
        assert!(s.ready(4, None).is_empty());
        let wait = s.ms_until_next(None).unwrap();
        assert!((400..=500).contains(&wait), "slot 0 is next: {wait}");
        // All its own again (it left the membership's view): the next read
        // keeps everything.
        s.set_affinity(&[]);
        assert!(s.hears(1));
        s.apply_index(&entries, false, s.generation());
        assert_eq!(s.ready(4, None), vec![1, 2]);
    }

    #[test]
    fn a_slot_that_becomes_foreign_keeps_only_its_overdue_work() {
        let mut s = Schedule::new(TopicKind::FixedTime, 3);
        let now = s.server_now();
        let entries = [(0, now - STEAL_AFTER_MS - 100), (1, now + 500), (2, now)];
        s.apply_index(&entries, false, s.generation());
        s.set_affinity(&[false, false, false]);
        assert_eq!(s.ready(3, None), vec![0]);
        s.after_pop_taking(0, s.generation(), None, None, None, now, None);
        assert_eq!(s.ms_until_next(None), None, "nothing later is kept");
        let mut s = Schedule::new(TopicKind::FixedTime, 2);
        s.set_affinity(&[false, true]);
        assert_eq!(s.unknown(), vec![0, 1], "slots not looked at yet stay so");
    }

    #[test]
    fn a_pending_head_in_another_consumers_slot_is_taken_once_reads_find_it_for_a_while() {
        let mut s = Schedule::new(TopicKind::Priority, 2);
        s.set_affinity(&[true, false]);
        let head = -(5 << 32);
        s.apply_index(&[(1, head)], false, s.generation());
        assert!(s.ready(2, None).is_empty(), "its owner takes it");
        // Another message is the head now: seen for the first time.
        let later = s.server_now() + STEAL_AFTER_MS / 2;
        s.observe_server_time(later);
        s.apply_index(&[(1, head - 1)], false, s.generation());
        assert!(s.ready(2, None).is_empty());
        // The same head, a while later: its owner does not take it.
        s.observe_server_time(later + STEAL_AFTER_MS);
        s.apply_index(&[(1, head - 1)], false, s.generation());
        assert_eq!(s.ready(2, None), vec![1]);
        // A notice of a new head starts its clock: the first read a while
        // after it takes it over.
        let mut s = Schedule::new(TopicKind::Priority, 2);
        s.set_affinity(&[true, false]);
        s.apply_index(&[], false, s.generation());
        s.foreign_noticed(1, 7 << 32);
        assert!(s.ready(2, None).is_empty(), "not heard: its owner's");
        let now = s.server_now();
        s.observe_server_time(now + STEAL_AFTER_MS);
        s.apply_index(&[(1, -(7 << 32))], false, s.generation());
        assert_eq!(s.ready(2, None), vec![1]);
    }

    #[test]
    fn a_mark_of_the_message_a_pop_took_does_not_rank_its_slot() {
        // Slot 0's send marked its best (7); the consumer takes that mark
        // after its pop was sent, and the pop took that very message.
        let mut s = Schedule::with_marks(TopicKind::Priority, 2, true);
        let now = s.server_now();
        s.after_pop(1, 0, Some(6 << 32), None, None, now);
        let since = s.generation();
        s.sending(&[0]);
        s.marked(0, -(7 << 32)); // taken from Redis before the pop ran
        let took = Some((7 << 32, 7 << 32));
        s.after_pop_taking(0, since, Some(5 << 32), None, None, now, took);
        assert_eq!(s.ready(1, None), vec![1], "6 before 5: the 7 is gone");
        // A better message that came after the pop is news.
        let since = s.generation();
        s.sending(&[0]);
        s.marked(0, -(8 << 32));
        let took = Some((5 << 32, 5 << 32));
        s.after_pop_taking(0, since, Some(5 << 32), None, None, now, took);
        assert_eq!(s.ready(1, None), vec![0]);
    }

    #[test]
    fn a_mark_that_comes_after_the_pop_that_took_its_message_wakes_but_does_not_rank() {
        let mut s = Schedule::with_marks(TopicKind::Priority, 2, true);
        let now = s.server_now();
        s.after_pop(1, 0, Some(6 << 32), None, None, now);
        let since = s.generation();
        s.sending(&[0]);
        // The pop took the 7 and left nothing it reports (another
        // consumer's pop may have taken the rest meanwhile).
        let took = Some((7 << 32, 7 << 32));
        s.after_pop_taking(0, since, None, None, None, now, took);
        assert_eq!(s.ready(2, None), vec![1]);
        s.marked(0, -(7 << 32)); // the send's mark, taken before the pop ran
        assert_eq!(s.ready(2, None), vec![1, 0], "woken, ranked after the 6");
        // What the pop left behind scores lower than what it took: news.
        s.marked(0, -(5 << 32));
        assert_eq!(s.ready(2, None), vec![1, 0]);
        assert_eq!(
            s.take_due(None),
            vec![(0, -(5 << 32))],
            "held, to hand back"
        );
        s.marked(0, -(9 << 32)); // a better message sent since
        assert_eq!(s.ready(1, None), vec![0]);
    }

    #[test]
    fn a_later_mark_replaces_the_held_one_so_a_leased_slot_is_not_popped_again_and_again() {
        let mut s = Schedule::with_marks(TopicKind::Priority, 1, true);
        let now = s.server_now();
        let until = now + 2_500;
        // The send's mark comes in while the first pop is on its way...
        let since = s.generation();
        s.sending(&[0]);
        s.marked(0, -(1 << 32));
        s.after_pop_taking(0, since, None, None, Some(until), now, None);
        // ...which found the slot leased by a serial owner and marked the
        // lease's end: that mark comes in while the next pop is on its way.
        let since = s.generation();
        s.sending(&[0]);
        s.marked(0, until);
        s.after_pop_taking(0, since, None, None, Some(until), now, None);
        assert!(
            s.ready(1, None).is_empty(),
            "nothing to pop before the lease ends"
        );
        assert!(s.ms_until_next(None).is_some_and(|ms| ms > 2_000));
    }

    #[test]
    fn a_held_mark_outlives_rescans_and_looks_and_ends_with_a_pop() {
        let mut s = Schedule::with_marks(TopicKind::FixedTime, 4, true);
        let now = s.server_now();
        s.marked(2, now + 5_000);
        s.mark_all();
        s.apply_index(&[], false, s.generation());
        assert!(s.ms_until_next(None).is_some_and(|ms| ms > 4_000));
        s.after_pop(2, s.generation(), None, None, None, now); // a look
        assert!(s.ms_until_next(None).is_some_and(|ms| ms > 4_000));
        // A pop sent before the mark was taken does not end it...
        let since = s.generation();
        s.sending(&[2]);
        s.marked(2, now + 4_000);
        s.after_pop_taking(2, since, None, None, None, now, None);
        assert!(s.ms_until_next(None).is_some_and(|ms| ms > 3_000));
        // ...one sent after it does: it marked what it left.
        let since = s.generation();
        s.sending(&[2]);
        s.after_pop_taking(2, since, None, None, None, now, None);
        assert_eq!(s.ms_until_next(None), None);
        assert!(s.take_due(None).is_empty());
    }

    #[test]
    fn a_consumer_on_the_marks_keeps_only_work_due_now() {
        let mut s = Schedule::with_marks(TopicKind::FixedTime, 3, true);
        let now = s.server_now();
        s.apply_index(&[(0, now - 5), (1, now + 60_000)], false, s.generation());
        assert_eq!(s.ready(8, None), vec![0]);
        assert_eq!(s.ms_until_next(None), Some(0));
        // A pop leaves a later head and a lease: a mark holds the one,
        // the settle ends the other.
        s.after_pop(
            0,
            s.generation(),
            Some(now + 5_000),
            None,
            Some(now + 30_000),
            now,
        );
        assert_eq!(s.ms_until_next(None), None);
        // A mark it takes is its own, due or not; a consumer with no room
        // hands back what is due.
        s.marked(2, now + 5_000);
        s.marked(1, now - 10);
        assert_eq!(s.take_due(Some(now)), vec![(1, now - 10)]);
        assert_eq!(s.take_due(None), vec![(2, now + 5_000)]);
        assert_eq!(s.earliest_held(), None);
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

    /// What `ready` and `earliest` must answer, by looking at every slot
    /// (what they did before `by_next`).
    fn by_every_slot(
        s: &Schedule,
        limit: usize,
        allowed: Option<&HashSet<u32>>,
    ) -> (Vec<u32>, Option<i64>) {
        let now = s.server_now();
        let counts = |i: &u32| allowed.is_none_or(|a| a.contains(i));
        let mut r: Vec<(u32, SlotHint)> = (0u32..)
            .zip(s.slots.iter().copied())
            .filter(|(i, h)| h.next.is_some_and(|n| n <= now) && counts(i))
            .collect();
        match s.kind {
            TopicKind::Priority => r.sort_by(|a, b| b.1.best.cmp(&a.1.best).then(a.0.cmp(&b.0))),
            _ => r.sort_by(|a, b| a.1.next.cmp(&b.1.next).then(a.0.cmp(&b.0))),
        }
        r.truncate(limit);
        let earliest = (0u32..)
            .zip(&s.slots)
            .filter(|(i, _)| counts(i))
            .filter_map(|(_, h)| h.next)
            .min();
        (r.into_iter().map(|(i, _)| i).collect(), earliest)
    }

    #[test]
    fn the_ordered_set_answers_as_a_look_at_every_slot_would() {
        let odd: HashSet<u32> = (0..40).filter(|i| i % 2 == 1).collect();
        for kind in [TopicKind::Priority, TopicKind::FixedTime] {
            let mut s = Schedule::new(kind, 40);
            let now = s.server_now();
            for step in 0..3_000u64 {
                let slot = rand::random::<u32>() % 44; // a few out of range
                                                       // Ten seconds or more from now, past or future: which is
                                                       // ready stays the same while the test runs.
                let r = (rand::random::<i64>() % 2_000).abs();
                let t = if rand::random::<bool>() {
                    now - 10_000 - r
                } else {
                    now + 10_000 + r
                };
                match step % 9 {
                    0 => s.notify(slot, t),
                    1 => s.wake_at(slot, t),
                    2 => {
                        let g = s.generation();
                        let head = rand::random::<bool>().then_some(t);
                        s.after_pop(slot, g, head, None, Some(t + 500), now);
                    }
                    // Nothing there but a lease in the future.
                    3 => s.after_pop(slot, 0, None, None, Some(now + 20_000 + r), now),
                    4 if step % 50 == 4 => s.mark_all(),
                    5 if step % 30 == 5 => {
                        let g = s.generation();
                        s.apply_index(&[(slot, t), (slot / 2, -t)], false, g);
                    }
                    6 => s.after_pop(slot, 0, None, None, None, now),
                    7 => s.marked(slot, if kind == TopicKind::Priority { -t } else { t }),
                    8 => {
                        let _ = s.take_due(Some(now));
                    }
                    _ => s.notify(slot, t),
                }
                for allowed in [None, Some(&odd)] {
                    let (ready, earliest) = by_every_slot(&s, 8, allowed);
                    assert_eq!(s.ready(8, allowed), ready, "{kind:?} step {step}");
                    assert_eq!(s.earliest(allowed), earliest, "{kind:?} step {step}");
                }
                let unknown = s.slots.iter().filter(|h| h.unknown).count();
                assert_eq!(s.unknown_count, unknown, "{kind:?} step {step}");
                assert!(
                    s.slots.iter().all(|h| h.held.is_none() || h.next.is_some()),
                    "{kind:?} step {step}: a held mark is known work"
                );
            }
        }
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
