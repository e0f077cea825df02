//! Keeping slot leases: one background duty per serial consumer.
//!
//! Every tick it sends a heartbeat, computes the slots this member should
//! own, and in one pipeline acquires the missing ones, renews the owned
//! ones and releases the ones it should give up (only once nothing of the
//! slot is in flight here, so a handover never overlaps two handlers); on
//! a cluster, renewals that found their lease on another master than the
//! layout said go again in a second pipeline, one call per slot.
//! A lease that could not be renewed in time is dropped locally before it
//! expires in Redis, and the handlers of that slot are cancelled; the new
//! owner can take the slot only after the old lease has expired (or was
//! released) and the slot has nothing in flight.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use redis::{Cmd, Value};

use super::calls::{Answers, LeaseCalls, Sharing};
use super::{assign, Fence, Membership, SerialConfig, SlotEvents};
use crate::conn::ClusterLayout;
use crate::scripts::lease::LeaseAnswer;
use crate::scripts::ScriptId;
use crate::topic::Topic;

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
    fn expire(&mut self, topic: &str) {
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
fn plan(o: &mut Ownership, desired: Option<&HashSet<u32>>, leaving: bool) -> Vec<(u32, Plan)> {
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
fn apply(
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

/// Gives up, between keeper rounds too, every lease whose local validity
/// ran out (the keeper may be stuck waiting for Redis).
async fn watchdog(
    topic: Topic,
    own: Arc<Mutex<Ownership>>,
    events: Arc<dyn SlotEvents>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every.max(Duration::from_millis(5))) => {}
            _ = stop.cancelled() => return,
        }
        own.lock()
            .unwrap_or_else(|p| p.into_inner())
            .expire(topic.name());
        events.ownership_changed();
    }
}

/// This round's heartbeat: the live members, or None when it failed or
/// took longer than `limit` (then this round acquires nothing). A backend
/// that stays down is reported once when it fails and once when it is
/// back, not at every tick.
async fn heartbeat(
    topic: &Topic,
    membership: &dyn Membership,
    leaving: bool,
    limit: Duration,
    failing_since: &Mutex<Option<Instant>>,
) -> Option<Vec<String>> {
    let failure = match tokio::time::timeout(limit, membership.heartbeat(leaving)).await {
        Ok(Ok(m)) => {
            let since = failing_since
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(since) = since {
                tracing::warn!(topic = %topic.name(),
                    "group heartbeat works again after {:.1} s", since.elapsed().as_secs_f64());
            }
            return Some(m);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {limit:?}"),
    };
    let mut since = failing_since.lock().unwrap_or_else(|p| p.into_inner());
    if since.is_none() {
        *since = Some(Instant::now());
        tracing::warn!(topic = %topic.name(),
            "group heartbeat failed: {failure}; keeping the slots whose leases are held, \
             taking no new one until it works again");
    } else {
        tracing::debug!(topic = %topic.name(), "group heartbeat failed: {failure}");
    }
    None
}

/// Runs until `stop` fires, then releases every lease and leaves the group.
/// A round runs every tick, and at once when the membership backend says
/// the members changed.
pub(crate) async fn keep_leases(
    topic: Topic,
    own: Arc<Mutex<Ownership>>,
    events: Arc<dyn SlotEvents>,
    membership: Arc<dyn Membership>,
    cfg: SerialConfig,
    stop: CancellationToken,
) {
    tokio::spawn(watchdog(
        topic.clone(),
        own.clone(),
        events.clone(),
        cfg.lease_ttl / 10,
        stop.clone(),
    ));
    let member = own.lock().unwrap_or_else(|p| p.into_inner()).member.clone();
    let keeper = Keeper {
        own,
        membership,
        member,
        failing_since: Mutex::new(None),
        batch_renewals: AtomicBool::new(!topic.redis().is_cluster()),
        topic,
        cfg,
    };
    let tick = keeper.cfg.tick();
    let mut retry = RETRY_FIRST;
    loop {
        let leaving = stop.is_cancelled();
        let round = keeper.round(leaving).await;
        // Look at newly owned slots at once, whatever was known of them.
        for &slot in &round.acquired {
            tracing::debug!(topic = %keeper.topic.name(), slot, "slot acquired");
            events.slot_may_have_work(slot);
        }
        events.ownership_changed();
        if leaving {
            return;
        }
        // A slot this member should own is still held by its previous
        // owner, who gives it up at its own next round (or when its lease
        // runs out): ask again soon rather than a whole tick later.
        let pause = if round.refused > 0 {
            let pause = retry.min(tick);
            retry = (retry * 2).min(tick);
            pause
        } else {
            retry = RETRY_FIRST;
            tick
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = keeper.membership.changed() => {
                tracing::debug!(topic = %keeper.topic.name(), "group members changed");
            }
            _ = stop.cancelled() => {}
        }
    }
}

/// The first pause before asking again for a slot whose acquire was
/// refused; it doubles up to the tick while refusals go on.
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// What a round did.
struct Round {
    /// Slots newly acquired.
    acquired: Vec<u32>,
    /// Slots this member should own whose acquire was refused or failed.
    refused: usize,
}

/// What one round of lease keeping works with.
struct Keeper {
    topic: Topic,
    own: Arc<Mutex<Ownership>>,
    membership: Arc<dyn Membership>,
    member: Arc<str>,
    cfg: SerialConfig,
    /// Since when heartbeats fail (None: they work).
    failing_since: Mutex<Option<Instant>>,
    /// Renewals share calls on a single node (until one such call failed).
    batch_renewals: AtomicBool,
}

impl Keeper {
    /// One heartbeat, then one pipeline of lease calls as `plan` decides
    /// (and on a cluster, a second one for renewals found elsewhere) and
    /// `apply` records. (`leaving`: give every slot up and leave the
    /// group.)
    async fn round(&self, leaving: bool) -> Round {
        let (topic, lease_ttl) = (&self.topic, self.cfg.lease_ttl);
        // A lease counts here for half its time after the renewal was sent;
        // renewals come every quarter and each call may take a quarter at
        // most, so a slow or cut-off Redis makes this consumer give the slot
        // up (and stop its handlers) well before the lease can expire in Redis.
        let (margin, call_limit) = (lease_ttl / 2, lease_ttl / 4);
        // The heartbeat gets a smaller share, so that a backend that hangs
        // (connected but silent) still leaves time for the renewals before
        // the leases' local validity runs out.
        let heartbeat_limit = (lease_ttl / 8)
            .max(Duration::from_millis(100))
            .min(call_limit);
        let ttl_ms = u64::try_from(lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let members = heartbeat(
            topic,
            &*self.membership,
            leaving,
            heartbeat_limit,
            &self.failing_since,
        )
        .await;
        let plans = {
            let mut o = self.own.lock().unwrap_or_else(|p| p.into_inner());
            o.expire(topic.name());
            let desired: Option<HashSet<u32>> = match (&members, leaving) {
                (_, true) => Some(HashSet::new()),
                (Some(m), false) => Some(
                    assign(m, topic.spec().slots, &self.member)
                        .into_iter()
                        .collect(),
                ),
                (None, false) => None,
            };
            plan(&mut o, desired.as_ref(), leaving)
        };
        let wanted = plans.iter().filter(|(_, p)| *p == Plan::Acquire).count();
        let failed = Round {
            acquired: Vec::new(),
            refused: wanted,
        };
        // (Read before the clock starts: the calls keep their whole share.)
        let layout = self.layout(heartbeat_limit).await;
        let sent_at = Instant::now();
        let deadline = sent_at + call_limit;
        let (lease_calls, replies) = loop {
            let sharing = match (&layout, self.batch_renewals.load(Ordering::Relaxed)) {
                (Some(layout), _) => Sharing::PerMaster(layout),
                (None, true) => Sharing::OneNode,
                (None, false) => Sharing::None,
            };
            let mut lease_calls = LeaseCalls::new(topic, &plans, &self.member, ttl_ms, sharing);
            let calls = std::mem::take(&mut lease_calls.calls);
            let Some(replies) = self.send(calls, deadline).await else {
                return failed;
            };
            match lease_calls.batch_error(&replies) {
                // Asked again at once, one call per slot (an acquire sent
                // twice only takes a newer epoch; a release sent twice is
                // refused the second time, and the slot is gone either way).
                Some(e) if matches!(sharing, Sharing::OneNode) => {
                    tracing::warn!(topic = %topic.name(),
                        "renewing slot leases in one call failed ({e}): renewing them one call \
                         per slot from now on");
                    self.batch_renewals.store(false, Ordering::Relaxed);
                }
                _ => break (lease_calls, replies),
            }
        };
        let Answers {
            mut each,
            again,
            moved,
        } = lease_calls.answers(replies);
        if moved {
            // The cluster's layout changed: ask for it again next round.
            topic.redis().forget_layout();
        }
        if !again.is_empty() {
            // Renew those leases (found elsewhere, or in a shared call that
            // failed) one call per slot, each following its redirect.
            tracing::debug!(topic = %topic.name(), leases = again.len(),
                "renewals not done where the cluster layout said: asking again one per slot");
            let retry: Vec<(u32, Plan)> = again.iter().map(|&i| plans[i]).collect();
            let mut retry_calls =
                LeaseCalls::new(topic, &retry, &self.member, ttl_ms, Sharing::None);
            let calls = std::mem::take(&mut retry_calls.calls);
            if let Some(replies) = self.send(calls, deadline).await {
                for (&i, answer) in again.iter().zip(retry_calls.answers(replies).each) {
                    each[i] = answer;
                }
            }
        }
        let mut o = self.own.lock().unwrap_or_else(|p| p.into_inner());
        let acquired = apply(&mut o, plans, each, sent_at + lease_ttl - margin);
        Round {
            refused: wanted - acquired.len(),
            acquired,
        }
    }

    /// Sends one pipeline of lease calls, answered by `deadline` (None: it
    /// failed or timed out, which is logged).
    async fn send(
        &self,
        calls: Vec<(ScriptId, Cmd)>,
        deadline: Instant,
    ) -> Option<Vec<crate::Result<Value>>> {
        let topic = &self.topic;
        let limit = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(limit, topic.redis().run(calls)).await {
            Ok(Ok(replies)) => Some(replies),
            Ok(Err(e)) => {
                tracing::warn!(topic = %topic.name(), "renewing slot leases failed: {e}");
                None
            }
            Err(_) => {
                tracing::warn!(topic = %topic.name(), "renewing slot leases timed out");
                topic.redis().call_timed_out();
                None
            }
        }
    }

    /// On a cluster, which master serves each hash slot, as the
    /// connection last asked (asked again once a renewal, or a read of the
    /// head index, found a key elsewhere). None on a single node, or when
    /// the cluster did not answer within `limit` (this round's renewals
    /// then go one call per slot).
    async fn layout(&self, limit: Duration) -> Option<Arc<ClusterLayout>> {
        if !self.topic.redis().is_cluster() {
            return None;
        }
        match tokio::time::timeout(limit, self.topic.redis().known_layout()).await {
            Ok(Ok(layout)) => Some(layout),
            Ok(Err(e)) => {
                tracing::debug!(topic = %self.topic.name(), "reading the cluster layout failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!(topic = %self.topic.name(), "reading the cluster layout timed out");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
