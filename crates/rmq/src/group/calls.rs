//! A lease round's calls and how their replies map back to its plans.
//!
//! On a single node a round's renewals go in `renew.lua` calls of up to
//! [`RENEW_CHUNK`] leases (a member renews its leases every tick, so this
//! is what a group costs Redis while idle; the chunks keep each call
//! short, so other clients are not held up). Acquires and releases, which
//! come with changes of owner, stay one `lease.lua` call per slot, as
//! every call does on a cluster, where one call may touch one hash slot.

use redis::{Cmd, Value};

use super::lease::Plan;
use crate::scripts::lease::{LeaseAnswer, LeaseOp, LeaseRequest};
use crate::scripts::renew::{self, RenewRequest};
use crate::scripts::ScriptId;
use crate::topic::Topic;

/// Leases renewed by one `renew.lua` call at most.
pub(crate) const RENEW_CHUNK: usize = 1_024;

/// Where a plan's answer is in the replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The reply of call `i`.
    Own(usize),
    /// Batch `b`'s reply, position `p`.
    Batched(usize, usize),
}

/// One `renew.lua` call: its index among the calls and the epochs it renews.
struct Batch {
    call: usize,
    epochs: Vec<u64>,
}

/// The calls of one round, in the order to send them.
pub(crate) struct LeaseCalls {
    pub(crate) calls: Vec<(ScriptId, Cmd)>,
    sources: Vec<Source>,
    batches: Vec<Batch>,
}

impl LeaseCalls {
    /// The calls for `plans`; `batch_renewals`: renewals may share calls
    /// (a single node only).
    pub(crate) fn new(
        topic: &Topic,
        plans: &[(u32, Plan)],
        member: &str,
        ttl_ms: u64,
        batch_renewals: bool,
    ) -> LeaseCalls {
        let mut calls = Vec::with_capacity(plans.len());
        let mut sources = Vec::with_capacity(plans.len());
        let mut renewals: Vec<(String, u64)> = Vec::new();
        for &(slot, plan) in plans {
            if let (Plan::Renew(epoch), true) = (plan, batch_renewals) {
                let n = renewals.len();
                sources.push(Source::Batched(n / RENEW_CHUNK, n % RENEW_CHUNK));
                renewals.push((lease_key(topic, slot), epoch));
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
        let mut batches = Vec::new();
        for chunk in renewals.chunks(RENEW_CHUNK) {
            let (leases, epochs): (Vec<String>, Vec<u64>) = chunk.iter().cloned().unzip();
            calls.push(
                RenewRequest {
                    leases,
                    epochs: &epochs,
                    owner: member,
                    ttl_ms,
                }
                .call(),
            );
            batches.push(Batch {
                call: calls.len() - 1,
                epochs,
            });
        }
        LeaseCalls {
            calls,
            sources,
            batches,
        }
    }

    /// The error of a batched renewal that failed as a whole (e.g.
    /// CROSSSLOT from a server in cluster mode reached as a single node,
    /// or a lease key of a foreign type), if one did.
    pub(crate) fn batch_error<'r>(
        &self,
        replies: &'r [crate::Result<Value>],
    ) -> Option<&'r crate::Error> {
        self.batches
            .iter()
            .find_map(|b| replies.get(b.call).and_then(|r| r.as_ref().err()))
    }

    /// Each plan's answer (None: its call failed), in the plans' order.
    pub(crate) fn answers(&self, replies: Vec<crate::Result<Value>>) -> Vec<Option<LeaseAnswer>> {
        let mut replies: Vec<Option<Value>> = replies.into_iter().map(Result::ok).collect();
        let batched: Vec<Vec<Option<LeaseAnswer>>> = self
            .batches
            .iter()
            .map(|b| renew::answers(replies.get_mut(b.call).and_then(Option::take), &b.epochs))
            .collect();
        self.sources
            .iter()
            .map(|s| match *s {
                Source::Own(i) => replies
                    .get_mut(i)
                    .and_then(Option::take)
                    .map(LeaseAnswer::of),
                Source::Batched(b, p) => batched.get(b).and_then(|a| a.get(p)).cloned().flatten(),
            })
            .collect()
    }
}

/// A slot's lease key (the last of its ten keys).
fn lease_key(topic: &Topic, slot: u32) -> String {
    let [.., lease] = topic.slot_keys(slot);
    lease
}
