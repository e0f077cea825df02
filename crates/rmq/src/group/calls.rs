//! A lease round's calls and how their replies map back to its plans.
//!
//! A member renews its leases every tick, so how renewals share calls is
//! what a group costs Redis while idle. On a single node they go in
//! `renew.lua` calls of up to [`RENEW_CHUNK`] leases; on a cluster in
//! `renew.lua` calls of up to that many leases that one master serves (as
//! the cluster's layout says), since a script may reach keys of several
//! hash slots of its own node only. The chunks keep each call short, so
//! other clients are not held up. A renewal that found its lease on
//! another master (the layout changed) is asked again alone. Acquires and
//! releases, which come with changes of owner, stay one `lease.lua` call
//! per slot, as every call does when renewals cannot share calls.

use std::collections::HashMap;

use redis::{Cmd, Value};

use super::plan::Plan;
use crate::conn::ClusterLayout;
use crate::keys::cluster_hash_slot;
use crate::scripts::lease::{LeaseAnswer, LeaseOp, LeaseRequest};
use crate::scripts::renew::{self, RenewRequest, Renewal};
use crate::scripts::ScriptId;
use crate::topic::Topic;

/// Leases renewed by one `renew.lua` call at most.
pub(crate) const RENEW_CHUNK: usize = 1_024;

/// How a round's renewals share calls.
#[derive(Clone, Copy)]
pub(crate) enum Sharing<'a> {
    /// Not at all: one `lease.lua` call per slot.
    None,
    /// A single node: chunks of every renewal, all keys declared.
    OneNode,
    /// A cluster: chunks of the renewals that one master serves, as this
    /// layout says (a lease of a hash slot nobody serves goes alone).
    PerMaster(&'a ClusterLayout),
}

impl Sharing<'_> {
    /// The group whose shared call renews `lease` (None: it goes alone).
    fn group_of(self, lease: &str) -> Option<u16> {
        match self {
            Sharing::None => None,
            Sharing::OneNode => Some(0),
            Sharing::PerMaster(layout) => layout.master_of(cluster_hash_slot(lease.as_bytes())),
        }
    }
}

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
    /// A cluster: a renewal whose shared call failed is asked again alone.
    on_cluster: bool,
}

/// The plans' answers, and the plans to ask again one call per slot.
pub(crate) struct Answers {
    /// Each plan's answer (None: its call failed), in the plans' order.
    pub(crate) each: Vec<Option<LeaseAnswer>>,
    /// Positions of renewals not done: their lease was on another master,
    /// or their shared call failed on a cluster.
    pub(crate) again: Vec<usize>,
    /// Some lease was not where the cluster's layout said.
    pub(crate) moved: bool,
}

impl LeaseCalls {
    /// The calls for `plans`, renewals sharing calls as `sharing` says.
    pub(crate) fn new(
        topic: &Topic,
        plans: &[(u32, Plan)],
        member: &str,
        ttl_ms: u64,
        sharing: Sharing<'_>,
    ) -> LeaseCalls {
        Self::of_keys(|slot| topic.slot_keys(slot), plans, member, ttl_ms, sharing)
    }

    /// [`new`](Self::new) with each slot's keys from `slot_keys`.
    fn of_keys(
        slot_keys: impl Fn(u32) -> [String; 10],
        plans: &[(u32, Plan)],
        member: &str,
        ttl_ms: u64,
        sharing: Sharing<'_>,
    ) -> LeaseCalls {
        let mut calls = Vec::with_capacity(plans.len());
        let mut sources = vec![Source::Own(0); plans.len()];
        // Renewals that share calls, by group (one group on a single node,
        // one per master on a cluster): plan position, lease key, epoch.
        let mut groups: HashMap<u16, Vec<(usize, String, u64)>> = HashMap::new();
        for (i, &(slot, plan)) in plans.iter().enumerate() {
            if let Plan::Renew(epoch) = plan {
                let [.., lease] = slot_keys(slot);
                if let Some(g) = sharing.group_of(&lease) {
                    groups.entry(g).or_default().push((i, lease, epoch));
                    continue;
                }
            }
            let (op, epoch) = match plan {
                Plan::Acquire => (LeaseOp::Acquire, 0),
                Plan::Renew(e) => (LeaseOp::Renew, e),
                Plan::Release(e) => (LeaseOp::Release, e),
            };
            sources[i] = Source::Own(calls.len());
            calls.push(
                LeaseRequest {
                    keys: &slot_keys(slot),
                    op,
                    owner: member,
                    epoch,
                    ttl_ms,
                }
                .call(),
            );
        }
        let on_cluster = matches!(sharing, Sharing::PerMaster(_));
        let mut groups: Vec<_> = groups.into_values().collect();
        groups.sort_by_key(|g| g.first().map(|(i, ..)| *i));
        let mut out = LeaseCalls {
            calls,
            sources,
            batches: Vec::new(),
            on_cluster,
        };
        for chunk in groups.iter().flat_map(|g| g.chunks(RENEW_CHUNK)) {
            out.push_batch(chunk, member, ttl_ms);
        }
        out
    }

    /// One shared renewal call for `chunk` (plan position, lease key,
    /// epoch), each of its plans answered from it.
    fn push_batch(&mut self, chunk: &[(usize, String, u64)], member: &str, ttl_ms: u64) {
        let b = self.batches.len();
        for (p, (i, ..)) in chunk.iter().enumerate() {
            self.sources[*i] = Source::Batched(b, p);
        }
        let leases = chunk.iter().map(|(_, l, _)| l.clone()).collect();
        let epochs: Vec<u64> = chunk.iter().map(|(.., e)| *e).collect();
        self.calls.push(
            RenewRequest {
                leases,
                epochs: &epochs,
                owner: member,
                ttl_ms,
                on_cluster: self.on_cluster,
            }
            .call(),
        );
        self.batches.push(Batch {
            call: self.calls.len() - 1,
            epochs,
        });
    }

    /// The error of a shared renewal that failed as a whole (e.g.
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

    /// Each plan's answer, and which renewals to ask again alone.
    pub(crate) fn answers(&self, replies: Vec<crate::Result<Value>>) -> Answers {
        let mut replies: Vec<Option<Value>> = replies.into_iter().map(Result::ok).collect();
        let batched: Vec<Option<Vec<Renewal>>> = self
            .batches
            .iter()
            .map(|b| renew::answers(replies.get_mut(b.call).and_then(Option::take), &b.epochs))
            .collect();
        let (mut again, mut moved) = (Vec::new(), false);
        let each = (self.sources.iter().enumerate())
            .map(|(i, s)| match *s {
                Source::Own(c) => replies
                    .get_mut(c)
                    .and_then(Option::take)
                    .map(LeaseAnswer::of),
                Source::Batched(b, p) => match batched.get(b).map(|a| a.as_ref().map(|a| a.get(p)))
                {
                    Some(Some(Some(Renewal::Answered(a)))) => Some(a.clone()),
                    Some(Some(Some(Renewal::Elsewhere))) => {
                        again.push(i);
                        moved = true;
                        None
                    }
                    _ if self.on_cluster => {
                        again.push(i);
                        None
                    }
                    _ => None,
                },
            })
            .collect();
        Answers { each, again, moved }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls as `new` lays them out for: an acquire of its own (call 0),
    /// then two shared renewals of two leases each (calls 1 and 2).
    fn laid_out(on_cluster: bool) -> LeaseCalls {
        LeaseCalls {
            calls: Vec::new(),
            sources: vec![
                Source::Own(0),
                Source::Batched(0, 0),
                Source::Batched(0, 1),
                Source::Batched(1, 0),
                Source::Batched(1, 1),
            ],
            batches: vec![
                Batch {
                    call: 1,
                    epochs: vec![3, 4],
                },
                Batch {
                    call: 2,
                    epochs: vec![5, 6],
                },
            ],
            on_cluster,
        }
    }

    fn replies() -> Vec<crate::Result<Value>> {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&n| Value::Int(n)).collect());
        vec![
            Ok(ints(&[1, 9])),
            // Renewed, then found on another master.
            Ok(ints(&[100, 200, 1, 2])),
            Err(crate::Error::new(
                crate::ErrorKind::Redis,
                "the call failed",
            )),
        ]
    }

    #[test]
    fn on_a_cluster_renewals_found_elsewhere_or_in_a_failed_call_are_asked_again() {
        let Answers { each, again, moved } = laid_out(true).answers(replies());
        assert!(moved);
        let codes: Vec<Option<i64>> = each.iter().map(|a| a.as_ref()?.code).collect();
        assert_eq!(codes, [Some(1), Some(1), None, None, None]);
        assert_eq!(each[1].as_ref().and_then(|a| a.epoch), Some(3));
        assert_eq!(again, [2, 3, 4], "elsewhere, then both of the failed call");
    }

    #[test]
    fn on_one_node_a_failed_call_fails_its_renewals() {
        let Answers { each, again, .. } = laid_out(false).answers(replies());
        assert!(each[3].is_none() && each[4].is_none());
        assert_eq!(again, [2], "only the one answered elsewhere");
    }

    /// Slot `s`'s ten keys, under a hash tag of its own, the lease last.
    fn keys_of(slot: u32) -> [String; 10] {
        std::array::from_fn(|k| format!("{{t{slot}}}:{k}"))
    }

    /// Hash slots 0..8192 on one master, 8192..16000 on another, the rest
    /// served by nobody.
    fn two_masters() -> ClusterLayout {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entry = |a: i64, b: i64, id: &str| {
            Value::Array(vec![
                Value::Int(a),
                Value::Int(b),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk(id)]),
            ])
        };
        let reply = Value::Array(vec![entry(0, 8191, "a"), entry(8192, 15_999, "b")]);
        ClusterLayout::of_reply(&reply).unwrap()
    }

    #[test]
    fn per_master_renewals_go_in_chunks_of_one_master_and_each_answer_finds_its_slot() {
        let layout = two_masters();
        let master = |slot: u32| {
            let [.., lease] = keys_of(slot);
            layout.master_of(cluster_hash_slot(lease.as_bytes()))
        };
        // 3,000 renewals (epoch = slot), an acquire and a release.
        let mut plans: Vec<(u32, Plan)> =
            (0..3_000).map(|s| (s, Plan::Renew(u64::from(s)))).collect();
        plans.push((3_000, Plan::Acquire));
        plans.push((3_001, Plan::Release(9)));
        let calls = LeaseCalls::of_keys(keys_of, &plans, "me", 1_000, Sharing::PerMaster(&layout));
        let on = |m: Option<u16>| (0..3_000).filter(|&s| master(s) == m).count();
        let (a, b, nobody) = (on(Some(0)), on(Some(1)), on(None));
        assert!(
            a > RENEW_CHUNK && b > RENEW_CHUNK && nobody > 0,
            "{a} {b} {nobody}"
        );
        let renew_calls = calls
            .calls
            .iter()
            .filter(|(id, _)| *id == ScriptId::Renew)
            .count();
        assert_eq!(
            renew_calls,
            a.div_ceil(RENEW_CHUNK) + b.div_ceil(RENEW_CHUNK)
        );
        assert_eq!(
            calls.calls.len(),
            renew_calls + nobody + 2,
            "the rest go alone"
        );
        for batch in &calls.batches {
            let masters: std::collections::HashSet<_> =
                batch.epochs.iter().map(|&e| master(e as u32)).collect();
            assert_eq!(masters.len(), 1, "one master per call");
            assert!(batch.epochs.len() <= RENEW_CHUNK);
        }
        // Replies: a shared call renews even slots and refuses odd ones; a
        // call of its own is granted at epoch 777.
        let mut replies: Vec<crate::Result<Value>> = (0..calls.calls.len())
            .map(|_| Ok(Value::Array(vec![Value::Int(1), Value::Int(777)])))
            .collect();
        for batch in &calls.batches {
            let mut codes = vec![Value::Int(0), Value::Int(0)];
            codes.extend(
                batch
                    .epochs
                    .iter()
                    .map(|e| Value::Int(i64::from(e % 2 == 0))),
            );
            replies[batch.call] = Ok(Value::Array(codes));
        }
        let Answers { each, again, moved } = calls.answers(replies);
        assert!(again.is_empty() && !moved);
        for (&(slot, plan), answer) in plans.iter().zip(&each) {
            let answer = answer.as_ref().unwrap();
            match (plan, master(slot)) {
                (Plan::Renew(_), Some(_)) if slot % 2 == 0 => {
                    assert_eq!(
                        (answer.code, answer.epoch),
                        (Some(1), Some(u64::from(slot)))
                    )
                }
                (Plan::Renew(_), Some(_)) => assert_eq!(answer.code, Some(0), "slot {slot}"),
                _ => assert_eq!((answer.code, answer.epoch), (Some(1), Some(777))),
            }
        }
    }
}
