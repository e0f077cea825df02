//! A lease round's calls and how their replies map back to its plans.
//!
//! On a single node all of a round's renewals go in one `renew.lua` call
//! (a member renews its leases every tick, so this is what a group costs
//! Redis while idle); acquires and releases, which come with changes of
//! owner, stay one `lease.lua` call per slot, as every call does on a
//! cluster, where one call may touch one hash slot only.

use redis::{Cmd, Value};

use super::lease::Plan;
use crate::scripts::lease::{LeaseAnswer, LeaseOp, LeaseRequest};
use crate::scripts::renew::{self, RenewRequest};
use crate::scripts::ScriptId;
use crate::topic::Topic;

/// Where a plan's answer is in the replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The reply of call `i`.
    Own(usize),
    /// Position `p` of the batched renewal's reply.
    Batched(usize),
}

/// The calls of one round, in the order to send them.
pub(crate) struct LeaseCalls {
    pub(crate) calls: Vec<(ScriptId, Cmd)>,
    sources: Vec<Source>,
    /// The batched renewal: its call's index and the epochs it renews.
    batch: Option<(usize, Vec<u64>)>,
}

impl LeaseCalls {
    /// The calls for `plans`; `one_node`: renewals may go in one call.
    pub(crate) fn new(
        topic: &Topic,
        plans: &[(u32, Plan)],
        member: &str,
        ttl_ms: u64,
        one_node: bool,
    ) -> LeaseCalls {
        let mut calls = Vec::with_capacity(plans.len());
        let mut sources = Vec::with_capacity(plans.len());
        let (mut leases, mut epochs) = (Vec::new(), Vec::new());
        for &(slot, plan) in plans {
            if let (Plan::Renew(epoch), true) = (plan, one_node) {
                sources.push(Source::Batched(epochs.len()));
                leases.push(lease_key(topic, slot));
                epochs.push(epoch);
                continue;
            }
            let (op, epoch) = match plan {
                Plan::Acquire => (LeaseOp::Acquire, 0),
                Plan::Renew(e) => (LeaseOp::Renew, e),
                Plan::Release(e) => (LeaseOp::Release, e),
            };
            sources.push(Source::Own(calls.len()));
            calls.push(
                LeaseRequest {
                    keys: &topic.slot_keys(slot),
                    op,
                    owner: member,
                    epoch,
                    ttl_ms,
                }
                .call(),
            );
        }
        let batch = (!epochs.is_empty()).then(|| {
            calls.push(
                RenewRequest {
                    leases,
                    epochs: &epochs,
                    owner: member,
                    ttl_ms,
                }
                .call(),
            );
            (calls.len() - 1, epochs)
        });
        LeaseCalls {
            calls,
            sources,
            batch,
        }
    }

    /// Each plan's answer (None: its call failed), in the plans' order.
    pub(crate) fn answers(&self, replies: Vec<crate::Result<Value>>) -> Vec<Option<LeaseAnswer>> {
        let mut replies: Vec<Option<Value>> = replies.into_iter().map(Result::ok).collect();
        let batched = match &self.batch {
            Some((i, epochs)) => renew::answers(replies.get_mut(*i).and_then(Option::take), epochs),
            None => Vec::new(),
        };
        self.sources
            .iter()
            .map(|s| match *s {
                Source::Own(i) => replies
                    .get_mut(i)
                    .and_then(Option::take)
                    .map(LeaseAnswer::of),
                Source::Batched(p) => batched.get(p).cloned().flatten(),
            })
            .collect()
    }
}

/// A slot's lease key (the last of its ten keys).
fn lease_key(topic: &Topic, slot: u32) -> String {
    let [.., lease] = topic.slot_keys(slot);
    lease
}
