//! Keeping slot leases: one background duty per serial consumer.
//!
//! Every tick it sends a heartbeat, computes the slots this member should
//! own, and in one pipeline acquires the missing ones, renews the owned
//! ones and releases the ones it should give up (only once nothing of the
//! slot is in flight here, so a handover never overlaps two handlers).
//! A lease that could not be renewed in time is dropped locally before it
//! expires in Redis, and the handlers of that slot are cancelled; the new
//! owner can take the slot only after the old lease has expired (or was
//! released) and the slot has nothing in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{assign, Coordinator, Fence, SerialConfig};
use crate::consumer::Shared;
use crate::scripts::{self, ScriptId};
use crate::topic::Topic;
use crate::value::{int_at, items};

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

enum Plan {
    Acquire,
    Renew(u64),
    Release(u64),
}

fn lease_call(
    topic: &Topic,
    slot: u32,
    op: &str,
    owner: &str,
    epoch: u64,
    ttl_ms: &str,
) -> (ScriptId, redis::Cmd) {
    let epoch = epoch.to_string();
    let args: [&[u8]; 4] = [
        op.as_bytes(),
        owner.as_bytes(),
        epoch.as_bytes(),
        ttl_ms.as_bytes(),
    ];
    (
        ScriptId::Lease,
        scripts::call(ScriptId::Lease, &topic.slot_keys(slot), &args),
    )
}

/// Gives up, between keeper rounds too, every lease whose local validity
/// ran out (the keeper may be stuck waiting for Redis).
async fn watchdog(topic: Topic, shared: Arc<Shared>, every: Duration, stop: CancellationToken) {
    let Some(own) = shared.ownership.as_ref() else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every.max(Duration::from_millis(5))) => {}
            _ = stop.cancelled() => return,
        }
        own.lock()
            .unwrap_or_else(|p| p.into_inner())
            .expire(topic.name());
        shared.notify.notify_one();
    }
}

/// Runs until `stop` fires, then releases every lease and leaves the group.
pub(crate) async fn keep_leases(
    topic: Topic,
    shared: Arc<Shared>,
    coordinator: Arc<dyn Coordinator>,
    cfg: SerialConfig,
    stop: CancellationToken,
) {
    let tick = cfg.tick();
    let ttl_ms = cfg.lease_ttl.as_millis().to_string();
    // A lease counts here for half its time after the renewal was sent;
    // renewals come every quarter and each call may take a quarter at most,
    // so a slow or cut-off Redis makes this consumer give the slot up (and
    // stop its handlers) well before the lease can expire in Redis.
    let margin = cfg.lease_ttl / 2;
    let call_limit = cfg.lease_ttl / 4;
    tokio::spawn(watchdog(
        topic.clone(),
        shared.clone(),
        cfg.lease_ttl / 10,
        stop.clone(),
    ));
    let Some(own) = shared.ownership.as_ref() else {
        return;
    };
    let member = own.lock().unwrap_or_else(|p| p.into_inner()).member.clone();
    loop {
        let leaving = stop.is_cancelled();
        let members =
            match tokio::time::timeout(call_limit, coordinator.heartbeat(&member, leaving)).await {
                Ok(Ok(m)) => Some(m),
                Ok(Err(e)) => {
                    tracing::warn!(topic = %topic.name(), "group heartbeat failed: {e}");
                    None
                }
                Err(_) => {
                    tracing::warn!(topic = %topic.name(), "group heartbeat timed out");
                    None
                }
            };
        let plans: Vec<(u32, Plan)> = {
            let mut o = own.lock().unwrap_or_else(|p| p.into_inner());
            o.expire(topic.name());
            let desired: HashSet<u32> = match (&members, leaving) {
                (_, true) => HashSet::new(),
                (Some(m), false) => assign(m, topic.spec().slots, &member).into_iter().collect(),
                (None, false) => o.slots.keys().copied().collect(),
            };
            let mut plans = Vec::new();
            for (&slot, s) in o.slots.iter_mut() {
                s.leaving = !desired.contains(&slot);
                if !s.leaving || (s.busy && !leaving) {
                    plans.push((slot, Plan::Renew(s.epoch)));
                } else {
                    plans.push((slot, Plan::Release(s.epoch)));
                }
            }
            if members.is_some() {
                for &slot in &desired {
                    if !o.slots.contains_key(&slot) {
                        plans.push((slot, Plan::Acquire));
                    }
                }
            }
            plans
        };
        let calls = plans
            .iter()
            .map(|(slot, p)| match p {
                Plan::Acquire => lease_call(&topic, *slot, "acquire", &member, 0, &ttl_ms),
                Plan::Renew(e) => lease_call(&topic, *slot, "renew", &member, *e, &ttl_ms),
                Plan::Release(e) => lease_call(&topic, *slot, "release", &member, *e, &ttl_ms),
            })
            .collect();
        let sent_at = Instant::now();
        let result = match tokio::time::timeout(call_limit, topic.redis().run(calls)).await {
            Ok(r) => r,
            Err(_) => Err(crate::error::Error::new(
                crate::error::ErrorKind::Connection,
                "renewing slot leases timed out",
            )),
        };
        let mut acquired = Vec::new();
        match result {
            Ok(replies) => {
                let mut o = own.lock().unwrap_or_else(|p| p.into_inner());
                for ((slot, plan), reply) in plans.into_iter().zip(replies) {
                    let granted = reply.as_ref().ok().map(|v| items(v.clone()));
                    let code = granted.as_ref().and_then(|a| int_at(a, 0));
                    let ok = code == Some(1);
                    let epoch = granted
                        .as_ref()
                        .and_then(|a| int_at(a, 1))
                        .and_then(|e| u64::try_from(e).ok());
                    match (plan, ok, epoch) {
                        (Plan::Acquire, true, Some(epoch)) => {
                            tracing::debug!(topic = %topic.name(), slot, epoch, "slot acquired");
                            acquired.push(slot);
                            o.slots.insert(
                                slot,
                                Owned {
                                    epoch,
                                    lost: CancellationToken::new(),
                                    busy: false,
                                    valid_until: sent_at + cfg.lease_ttl - margin,
                                    leaving: false,
                                },
                            );
                        }
                        (Plan::Renew(_), true, _) => {
                            if let Some(s) = o.slots.get_mut(&slot) {
                                s.valid_until = sent_at + cfg.lease_ttl - margin;
                            }
                        }
                        // Release refused while a delivery of the slot is in flight: keep it.
                        (Plan::Release(_), false, _) if code == Some(2) => {}
                        (Plan::Renew(_), false, _) | (Plan::Release(_), _, _) => o.lose(slot),
                        _ => {}
                    }
                }
            }
            Err(e) => tracing::warn!(topic = %topic.name(), "renewing slot leases failed: {e}"),
        }
        if !acquired.is_empty() {
            // Look at newly owned slots at once, whatever was known of them.
            let mut sched = shared.schedule();
            for slot in acquired {
                sched.wake_at(slot, 0);
            }
        }
        shared.notify.notify_one();
        if leaving {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.cancelled() => {}
        }
    }
}
