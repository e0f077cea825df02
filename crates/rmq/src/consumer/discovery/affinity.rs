//! Slot affinity: how parallel consumers on a Redis Cluster avoid the
//! thundering herd without the marks.
//!
//! On one node, idle consumers wait on the topic's marks, which Redis hands
//! to one waiter at a time (`marks.rs`). A cluster has no such wait: a
//! blocking pop cannot span hash slots, so every consumer hears every
//! notice, and each new message brought every idle consumer to its slot.
//! Instead, the topic's parallel consumers announce themselves in a
//! membership hash (heartbeats, as a serial group's members do), and each
//! computes the same split of the slots among the live ones by rendezvous
//! hashing (`group::assign`): a notice of a slot is acted on by its
//! consumer only, the others ignore it.
//!
//! Nothing depends on the split being right or agreed: it only decides who
//! *tries* first, and the scripts decide what is taken. Work is never
//! stranded with a consumer that does not take it:
//! - one that stops, or has waited [`LEAVE_WITHOUT_ROOM`] for room, leaves
//!   the membership at once (it comes back when it has room), and the
//!   others, at their next heartbeat, split its slots among them and read
//!   the head index again;
//! - one that dies still holds its slots until its heartbeat times out
//!   ([`MEMBER_TIMEOUT`]), but every other consumer's rescan takes work
//!   in any slot that has been due for
//!   [`STEAL_AFTER_MS`](crate::consumer::discovery::schedule::STEAL_AFTER_MS) (`schedule/`).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::consumer::Shared;
use crate::group::{assign, Coordinator, Membership, RedisCoordinator};
use crate::topic::Topic;

/// A consumer whose heartbeat is this old is gone: its slots go to the
/// others.
pub(crate) const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a consumer beats (and learns who else is there): with the
/// rescans, an idle consumer stays under 2 calls a second.
const TICK: Duration = Duration::from_secs(3);

/// How long a consumer waits for room before it leaves the membership.
const LEAVE_WITHOUT_ROOM: Duration = Duration::from_secs(1);

/// Keeps this consumer in the topic's parallel membership until `cancel`
/// fires, then leaves it; each time the live members change, gives the
/// schedule this consumer's slots. A consumer that has waited
/// [`LEAVE_WITHOUT_ROOM`] for room leaves, so that the others take its
/// slots at their next heartbeat (not after the member timeout), and
/// comes back once it has room.
pub(crate) async fn keep(
    topic: Topic,
    shared: Arc<Shared>,
    me: Arc<str>,
    cancel: CancellationToken,
) {
    let membership = RedisCoordinator::new(topic.clone()).join(
        &topic.group_ref(crate::keys::PARALLEL_GROUP, MEMBER_TIMEOUT),
        &me,
    );
    let mut waiting = shared.waiting_for_room.subscribe();
    let mut place = Place {
        members: Vec::new(),
        mine: Vec::new(),
        joined: false,
    };
    let mut last_beat: Option<tokio::time::Instant> = None;
    while !cancel.is_cancelled() {
        let no_room = *waiting.borrow_and_update();
        let beat_due = last_beat.is_none_or(|t| t.elapsed() >= TICK);
        if no_room && place.joined {
            place
                .leave_without_room(&topic, &shared, membership.as_ref())
                .await;
        } else if !no_room && (!place.joined || beat_due) {
            last_beat = Some(tokio::time::Instant::now());
            place
                .beat(&topic, &shared, membership.as_ref(), &me, &cancel)
                .await;
        }
        let next_beat = last_beat.map_or(TICK, |t| TICK.saturating_sub(t.elapsed()));
        tokio::select! {
            // (Also after a failed beat: it tries again.)
            _ = tokio::time::sleep(next_beat), if !no_room => {}
            changed = waiting.changed() => {
                if changed.is_err() {
                    break; // the consumer is gone
                }
                if *waiting.borrow() {
                    // Out of room: leave only if it stays so a while.
                    tokio::select! {
                        _ = waiting.wait_for(|w| !*w) => {}
                        _ = tokio::time::sleep(LEAVE_WITHOUT_ROOM) => {}
                        _ = cancel.cancelled() => {}
                    }
                }
            }
            _ = cancel.cancelled() => {}
        }
    }
    if place.joined {
        leave(&topic, membership.as_ref(), "it stops").await;
    }
}

/// A consumer's place in the membership, as it last knew it.
struct Place {
    /// The live members, sorted.
    members: Vec<String>,
    /// `mine[slot]`; empty: all of them (it hears everything until it
    /// knows who else is there).
    mine: Vec<bool>,
    joined: bool,
}

impl Place {
    /// Leaves for want of room: nothing is its own until it is back.
    async fn leave_without_room(
        &mut self,
        topic: &Topic,
        shared: &Shared,
        membership: &dyn Membership,
    ) {
        leave(topic, membership, "it has no room").await;
        self.joined = false;
        self.members.clear();
        let none = vec![false; topic.spec.slots as usize];
        apply(topic, shared, &self.mine, &none, 0);
        self.mine = none;
    }

    /// Beats (joining if it is out) and, when the live members changed,
    /// takes its new share of the slots. Redis unreachable: the split
    /// stays as it was.
    async fn beat(
        &mut self,
        topic: &Topic,
        shared: &Shared,
        membership: &dyn Membership,
        me: &Arc<str>,
        cancel: &CancellationToken,
    ) {
        let Some(mut live) = beat(topic, membership, cancel).await else {
            return;
        };
        self.joined = true;
        live.sort_unstable();
        if live != self.members {
            self.members = live;
            let split = mine(self.members.clone(), topic.spec.slots, me.clone()).await;
            apply(topic, shared, &self.mine, &split, self.members.len());
            self.mine = split;
        }
    }
}

/// One heartbeat: the live members, or None when Redis did not answer
/// within a beat (or the consumer stops meanwhile).
async fn beat(
    topic: &Topic,
    membership: &dyn Membership,
    cancel: &CancellationToken,
) -> Option<Vec<String>> {
    tokio::select! {
        r = tokio::time::timeout(TICK, membership.heartbeat(false)) => match r {
            Ok(Ok(live)) => Some(live),
            Ok(Err(e)) => {
                tracing::debug!(topic = %topic.name(), "affinity heartbeat failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!(topic = %topic.name(), "affinity heartbeat timed out");
                None
            }
        },
        _ = cancel.cancelled() => None,
    }
}

/// What the split divides: slot `s` goes with bucket `s % buckets`, so a
/// split costs O(buckets × members) hashes, not O(slots × members) (a
/// fleet of 130 consumers of a 65,536-slot topic would hash 8.5 million
/// times at each join). A consumer's share of buckets is its share of
/// the slots.
const BUCKETS: u32 = 4_096;

/// Which of `slots` are `me`'s among `members` (`mine[slot]`; empty, for
/// all of them, when it is not among them: it hears everything until it
/// is). Off the async threads: up to a few million hashes.
async fn mine(members: Vec<String>, slots: u32, me: Arc<str>) -> Vec<bool> {
    let split = tokio::task::spawn_blocking(move || split(&members, slots, &me));
    split.await.unwrap_or_default()
}

fn split(members: &[String], slots: u32, me: &str) -> Vec<bool> {
    if !members.iter().any(|m| m == me) {
        return Vec::new();
    }
    let buckets = slots.clamp(1, BUCKETS);
    let mut ours = vec![false; buckets as usize];
    for bucket in assign(members, buckets, me) {
        if let Some(b) = ours.get_mut(bucket as usize) {
            *b = true;
        }
    }
    (0..slots)
        .map(|slot| ours.get((slot % buckets) as usize) == Some(&true))
        .collect()
}

/// Gives the schedule the consumer's slots, `mine` instead of `before`.
/// When a slot became its own, every slot is looked at again through the
/// index, since work in that slot was left to another consumer until now
/// (a consumer that only lost slots, as when another joins, needs no
/// read).
fn apply(topic: &Topic, shared: &Shared, before: &[bool], mine: &[bool], members: usize) {
    let has = |split: &[bool], slot: usize| split.is_empty() || split.get(slot) == Some(&true);
    let gained = (0..topic.spec.slots as usize).any(|s| has(mine, s) && !has(before, s));
    tracing::debug!(topic = %topic.name(), members, gained, "slot affinity changed");
    let mut s = shared.lock();
    s.set_affinity(mine);
    if gained {
        s.mark_all();
        // A read of the index on its way now may be older than what
        // this consumer ignored of those slots until now: the fetch loop
        // looks again after it.
        shared
            .affinity_gains
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    drop(s);
    shared.notify.notify_one();
}

/// Leaves the membership (`why`: for the log), so that the others take
/// this consumer's slots at their next heartbeat rather than after
/// [`MEMBER_TIMEOUT`].
async fn leave(topic: &Topic, membership: &dyn Membership, why: &str) {
    let left = tokio::time::timeout(TICK, membership.heartbeat(true)).await;
    if !matches!(left, Ok(Ok(_))) {
        tracing::debug!(topic = %topic.name(), "leaving the affinity membership as {why} failed; it times out");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:016x}")).collect()
    }

    #[test]
    fn every_slot_has_one_consumer_and_each_a_fair_share() {
        for (slots, n) in [(1, 3), (16, 2), (1_024, 20), (65_536, 12)] {
            let all = members(n);
            let splits: Vec<Vec<bool>> = all.iter().map(|m| split(&all, slots, m)).collect();
            for slot in 0..slots as usize {
                let owners = splits.iter().filter(|s| s[slot]).count();
                assert_eq!(owners, 1, "{slots} slots, {n} consumers: slot {slot}");
            }
            let fair = f64::from(slots) / n as f64;
            for s in &splits {
                let share = s.iter().filter(|&&m| m).count() as f64;
                assert!(
                    slots < 16 || (share > fair / 4.0 && share < fair * 3.0),
                    "{slots} slots, {n} consumers: {share} against {fair}"
                );
            }
        }
    }

    #[test]
    fn a_consumer_not_among_the_members_hears_every_slot() {
        assert!(split(&members(3), 16, "someone else").is_empty());
    }
}
