//! A serial member's slot leases as it holds them, and each round's plan:
//! which leases to acquire, renew or release (`plan`), and what the
//! answers make of them (`apply`). No I/O here: the keeper (`lease.rs`)
//! sends the plan as calls (`calls.rs`) and applies the answers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Fence;
use crate::scripts::lease::LeaseAnswer;

/// One owned slot.
#[derive(Debug)]
pub(crate) struct Owned {
    pub(crate) epoch: u64,
    /// Cancelled when the lease is lost: handlers of the slot stop.
    pub(crate) lost: CancellationToken,
    /// A delivery of this slot is out (serial: at most one).
    pub(crate) busy: bool,
    /// Local deadline, safely before the lease expires in Redis.
    valid_until: Instant,
    /// No longer assigned here: take nothing more, release when idle.
    leaving: bool,
}

/// The slots a serial consumer owns.
#[derive(Debug)]
pub(crate) struct Ownership {
    pub(crate) member: Arc<str>,
    pub(crate) slots: HashMap<u32, Owned>,
}

impl Ownership {
    pub(crate) fn new(member: Arc<str>) -> Self {
        Ownership {
            member,
            slots: HashMap::new(),
        }
    }

    /// The fence to use for a slot this consumer owns.
    pub(crate) fn fence(&self, slot: u32) -> Option<Fence> {
        self.slots.get(&slot).map(|o| Fence {
            owner: self.member.clone(),
            epoch: o.epoch,
        })
    }

    /// Whether this consumer may take more of `slot` at `epoch` once its
    /// delivery out ends: owned at that epoch, still valid, not leaving
    /// (a slot to hand over is released once idle, never fed).
    pub(crate) fn keeps(&self, slot: u32, epoch: u64) -> bool {
        self.slots
            .get(&slot)
            .is_some_and(|o| o.epoch == epoch && !o.leaving && o.valid_until > Instant::now())
    }

    /// Every slot owned, busy, leaving or not.
    pub(crate) fn owned(&self) -> HashSet<u32> {
        self.slots.keys().copied().collect()
    }

    /// Owned slots with nothing out, still valid.
    pub(crate) fn takeable(&self) -> HashSet<u32> {
        let now = Instant::now();
        self.slots
            .iter()
            .filter(|(_, o)| !o.busy && !o.leaving && o.valid_until > now)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Gives up every lease whose local validity ran out.
    pub(super) fn expire(&mut self, topic: &str) {
        let now = Instant::now();
        let expired: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| s.valid_until <= now)
            .map(|(k, _)| *k)
            .collect();
        for s in expired {
            tracing::warn!(
                topic,
                slot = s,
                "slot lease not renewed in time: giving it up"
            );
            self.lose(s);
        }
    }

    /// Forgets a slot if it is still held at `epoch` (a newer lease stays).
    pub(crate) fn lose_epoch(&mut self, slot: u32, epoch: u64) {
        if self.slots.get(&slot).is_some_and(|o| o.epoch == epoch) {
            self.lose(slot);
        }
    }

    /// Forgets a slot and stops its handlers.
    pub(crate) fn lose(&mut self, slot: u32) {
        if let Some(o) = self.slots.remove(&slot) {
            o.lost.cancel();
        }
    }
}

/// What to do with one slot's lease this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    Acquire,
    Renew(u64),
    Release(u64),
}

/// Decides this round's lease calls. `desired`: the slots this member
/// should own (None: membership is unknown this round, so keep what is
/// owned and take nothing new); `leaving`: the consumer is shutting down.
/// A slot no longer desired is released, but renewed while one of its
/// deliveries is out (a handover never overlaps two handlers) unless the
/// consumer is leaving. Marks those slots as leaving (nothing more is
/// taken from them).
pub(super) fn plan(
    o: &mut Ownership,
    desired: Option<&HashSet<u32>>,
    leaving: bool,
) -> Vec<(u32, Plan)> {
    let mut plans = Vec::new();
    for (&slot, s) in o.slots.iter_mut() {
        s.leaving = desired.is_some_and(|d| !d.contains(&slot));
        if !s.leaving || (s.busy && !leaving) {
            plans.push((slot, Plan::Renew(s.epoch)));
        } else {
            plans.push((slot, Plan::Release(s.epoch)));
        }
    }
    for &slot in desired.into_iter().flatten() {
        if !o.slots.contains_key(&slot) {
            plans.push((slot, Plan::Acquire));
        }
    }
    plans.sort_by_key(|(slot, _)| *slot);
    plans
}

/// Applies this round's answers (None: that call failed) to the ownership;
/// a granted lease counts locally until `valid_until`. Returns the slots
/// newly acquired. A refused renewal or a release loses the slot (its
/// handlers are stopped); a release refused while a delivery is in flight
/// keeps it.
pub(super) fn apply(
    o: &mut Ownership,
    plans: Vec<(u32, Plan)>,
    answers: impl IntoIterator<Item = Option<LeaseAnswer>>,
    valid_until: Instant,
) -> Vec<u32> {
    let mut acquired = Vec::new();
    for ((slot, plan), answer) in plans.into_iter().zip(answers) {
        let code = answer.as_ref().and_then(|a| a.code);
        let granted = code == Some(1);
        match (plan, granted, answer.and_then(|a| a.epoch)) {
            (Plan::Acquire, true, Some(epoch)) => {
                acquired.push(slot);
                o.slots.insert(
                    slot,
                    Owned {
                        epoch,
                        lost: CancellationToken::new(),
                        busy: false,
                        valid_until,
                        leaving: false,
                    },
                );
            }
            (Plan::Renew(_), true, _) => {
                if let Some(s) = o.slots.get_mut(&slot) {
                    s.valid_until = valid_until;
                }
            }
            // Release refused while a delivery of the slot is in flight: keep it.
            (Plan::Release(_), false, _) if code == Some(2) => {}
            (Plan::Renew(_), false, _) | (Plan::Release(_), _, _) => o.lose(slot),
            _ => {}
        }
    }
    acquired
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn owning(slots: &[(u32, u64, bool)]) -> Ownership {
        let mut o = Ownership::new("me".into());
        for &(slot, epoch, busy) in slots {
            o.slots.insert(
                slot,
                Owned {
                    epoch,
                    lost: CancellationToken::new(),
                    busy,
                    valid_until: Instant::now() + Duration::from_secs(5),
                    leaving: false,
                },
            );
        }
        o
    }

    fn granted(epoch: u64) -> Option<LeaseAnswer> {
        Some(LeaseAnswer {
            owner: None,
            code: Some(1),
            epoch: Some(epoch),
        })
    }

    #[test]
    fn a_round_renews_what_stays_acquires_what_is_new_and_releases_the_rest_once_idle() {
        // Owns 0 (idle), 1 (busy), 2 (idle); should own 0 and 3.
        let mut o = owning(&[(0, 5, false), (1, 6, true), (2, 7, false)]);
        let desired = HashSet::from([0, 3]);
        let plans = plan(&mut o, Some(&desired), false);
        assert_eq!(
            plans,
            vec![
                (0, Plan::Renew(5)),
                (1, Plan::Renew(6)), // busy: kept until its delivery ends
                (2, Plan::Release(7)),
                (3, Plan::Acquire),
            ]
        );
        assert!(o.slots[&1].leaving && o.slots[&2].leaving && !o.slots[&0].leaving);
        // Leaving: everything is released, busy or not; nothing acquired.
        let mut o = owning(&[(1, 6, true)]);
        assert_eq!(
            plan(&mut o, Some(&HashSet::new()), true),
            vec![(1, Plan::Release(6))]
        );
        // Membership unknown this round: keep what is owned, take nothing.
        let mut o = owning(&[(0, 5, false)]);
        assert_eq!(plan(&mut o, None, false), vec![(0, Plan::Renew(5))]);
        assert!(!o.slots[&0].leaving);
    }

    #[test]
    fn answers_grant_extend_keep_or_lose_leases() {
        let mut o = owning(&[(0, 5, false), (1, 6, false), (2, 7, true), (3, 8, false)]);
        let lost1 = o.slots[&1].lost.clone();
        let later = Instant::now() + Duration::from_secs(60);
        let plans = vec![
            (0, Plan::Renew(5)),
            (1, Plan::Renew(6)),
            (2, Plan::Release(7)),
            (3, Plan::Release(8)),
            (4, Plan::Acquire),
            (5, Plan::Acquire),
        ];
        let answers = vec![
            granted(5),
            Some(LeaseAnswer {
                code: Some(0),
                epoch: None,
                owner: Some("other".into()),
            }), // renewal refused
            Some(LeaseAnswer {
                code: Some(2),
                epoch: Some(7),
                owner: None,
            }), // still in flight
            granted(8),
            granted(9),
            None, // the call failed
        ];
        let acquired = apply(&mut o, plans, answers, later);
        assert_eq!(acquired, vec![4]);
        assert_eq!(o.slots[&0].valid_until, later, "renewed");
        assert!(
            !o.slots.contains_key(&1) && lost1.is_cancelled(),
            "lost: handlers stop"
        );
        assert!(
            o.slots.contains_key(&2),
            "release refused while in flight: kept"
        );
        assert!(!o.slots.contains_key(&3), "released");
        assert_eq!(o.slots[&4].epoch, 9, "acquired at its epoch");
        assert!(!o.slots.contains_key(&5), "a failed acquire takes nothing");
    }
}
