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

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use redis::{Cmd, Value};

use super::calls::{Answers, LeaseCalls, Sharing};
use super::plan::{apply, plan, Ownership, Plan};
use super::{assign, Membership, SerialConfig, SlotEvents};
use crate::conn::ClusterLayout;
use crate::scripts::lease::LeaseAnswer;
use crate::scripts::ScriptId;
use crate::topic::Topic;

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
        let plans = self.plans(members.as_deref(), leaving);
        let wanted = plans.iter().filter(|(_, p)| *p == Plan::Acquire).count();
        let failed = Round {
            acquired: Vec::new(),
            refused: wanted,
        };
        // (Read before the clock starts: the calls keep their whole share.)
        let layout = self.layout(heartbeat_limit).await;
        let sent_at = Instant::now();
        let deadline = sent_at + call_limit;
        let Some((lease_calls, replies)) = self
            .send_plans(&plans, layout.as_ref(), ttl_ms, deadline)
            .await
        else {
            return failed;
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
            self.renew_one_by_one(&plans, &again, &mut each, ttl_ms, deadline)
                .await;
        }
        let mut o = self.own.lock().unwrap_or_else(|p| p.into_inner());
        let acquired = apply(&mut o, plans, each, sent_at + lease_ttl - margin);
        Round {
            refused: wanted - acquired.len(),
            acquired,
        }
    }

    /// This round's plan: the slots this member should own, from the
    /// members the heartbeat saw (None: unknown this round; none when
    /// leaving), against what it owns (expired leases dropped first).
    fn plans(&self, members: Option<&[String]>, leaving: bool) -> Vec<(u32, Plan)> {
        let topic = &self.topic;
        let mut o = self.own.lock().unwrap_or_else(|p| p.into_inner());
        o.expire(topic.name());
        let desired: Option<HashSet<u32>> = match (members, leaving) {
            (_, true) => Some(HashSet::new()),
            (Some(m), false) => Some(
                assign(m, topic.spec().slots, &self.member)
                    .into_iter()
                    .collect(),
            ),
            (None, false) => None,
        };
        plan(&mut o, desired.as_ref(), leaving)
    }

    /// Sends the plan's lease calls (per master with a layout, else in one
    /// call while that works, else one call per slot) and returns them with
    /// their replies (None: the pipeline failed or timed out). A shared
    /// call that fails as a whole is asked again at once, one call per
    /// slot, and so are all later rounds' (an acquire sent twice only
    /// takes a newer epoch; a release sent twice is refused the second
    /// time, and the slot is gone either way).
    async fn send_plans(
        &self,
        plans: &[(u32, Plan)],
        layout: Option<&Arc<ClusterLayout>>,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Option<(LeaseCalls, Vec<crate::Result<Value>>)> {
        let topic = &self.topic;
        loop {
            let sharing = match (layout, self.batch_renewals.load(Ordering::Relaxed)) {
                (Some(layout), _) => Sharing::PerMaster(layout),
                (None, true) => Sharing::OneNode,
                (None, false) => Sharing::None,
            };
            let mut lease_calls = LeaseCalls::new(topic, plans, &self.member, ttl_ms, sharing);
            let calls = std::mem::take(&mut lease_calls.calls);
            let replies = self.send(calls, deadline).await?;
            match lease_calls.batch_error(&replies) {
                Some(e) if matches!(sharing, Sharing::OneNode) => {
                    tracing::warn!(topic = %topic.name(),
                        "renewing slot leases in one call failed ({e}): renewing them one call \
                         per slot from now on");
                    self.batch_renewals.store(false, Ordering::Relaxed);
                }
                _ => return Some((lease_calls, replies)),
            }
        }
    }

    /// Renews the leases of `again` (found elsewhere than the layout said,
    /// or in a shared call that failed) one call per slot, each following
    /// its redirect; their answers replace those in `each`.
    async fn renew_one_by_one(
        &self,
        plans: &[(u32, Plan)],
        again: &[usize],
        each: &mut [Option<LeaseAnswer>],
        ttl_ms: u64,
        deadline: Instant,
    ) {
        tracing::debug!(topic = %self.topic.name(), leases = again.len(),
            "renewals not done where the cluster layout said: asking again one per slot");
        let retry: Vec<(u32, Plan)> = again.iter().map(|&i| plans[i]).collect();
        let mut retry_calls =
            LeaseCalls::new(&self.topic, &retry, &self.member, ttl_ms, Sharing::None);
        let calls = std::mem::take(&mut retry_calls.calls);
        if let Some(replies) = self.send(calls, deadline).await {
            for (&i, answer) in again.iter().zip(retry_calls.answers(replies).each) {
                each[i] = answer;
            }
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
