//! A slot's pop call, and its reply made into deliveries; a survey (a pop
//! of count 0 per slot) learns slots' heads without taking anything. The
//! fetch loop and taking by hand (`life/take.rs`) share them.

use redis::Value;

use crate::consumer::Shared;
use crate::group::Fence;
use crate::message::Received;
use crate::scripts::pop::{DeliveryId, PopReply, PopRequest};
use crate::scripts::{ScriptId, TopicArgs};
use crate::topic::{Topic, TopicSpec};

/// Slots looked at per pipeline in a survey.
const SURVEY_CHUNK: usize = 256;

/// A pop call taking up to `count` messages of `slot` (0: only look).
pub(crate) fn pop_call(
    topic: &Topic,
    args: &TopicArgs,
    slot: u32,
    count: usize,
    fence: Option<&Fence>,
) -> (ScriptId, redis::Cmd) {
    PopRequest {
        keys: &topic.slot_keys_kept(slot)[..],
        topic: args,
        count,
        channel: &topic.channel_for(slot),
        slot,
        fence: fence.map(|f| (&*f.owner, f.epoch)),
    }
    .call()
}

/// What a survey came to.
pub(crate) enum Surveyed {
    /// Every slot answered.
    All,
    /// Some slots' looks failed (each is looked at again in a second).
    Some,
    /// Redis could not be reached.
    Unreachable,
}

/// Looks at slots without taking (count 0): reclaims expired leases and
/// learns each slot's head.
pub(crate) async fn survey(topic: &Topic, shared: &Shared, slots: &[u32]) -> Surveyed {
    let mut all = true;
    for chunk in slots.chunks(SURVEY_CHUNK) {
        let calls = chunk
            .iter()
            .map(|&slot| pop_call(topic, &topic.cached().args, slot, 0, None))
            .collect();
        let since = shared.lock().generation();
        let replies = match topic.redis().run(calls).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(topic = %topic.name(), "looking at slots failed, will retry: {e}");
                return Surveyed::Unreachable;
            }
        };
        for (&slot, r) in chunk.iter().zip(replies) {
            let mut s = shared.lock();
            match r {
                Ok(v) => {
                    let p = parse_pop(&topic.spec, slot, v);
                    topic.give_back_room_later(p.ended);
                    s.observe_server_time(p.now);
                    s.after_pop(slot, since, p.head, p.retry, p.lease, p.now);
                }
                Err(e) => {
                    all = false;
                    tracing::error!(topic = %topic.name(), slot, "looking at a slot failed: {e}");
                    let now = s.server_now();
                    s.after_pop(slot, since, None, None, Some(now + 1_000), now);
                }
            }
        }
    }
    if all {
        Surveyed::All
    } else {
        Surveyed::Some
    }
}

/// A pop reply, decoded.
pub(crate) struct Popped {
    pub(crate) now: i64,
    pub(crate) head: Option<i64>,
    pub(crate) retry: Option<i64>,
    pub(crate) lease: Option<i64>,
    /// Expired leases rolled back that ended their message (dead,
    /// superseded, cancelled): a bounded topic's room comes back for them.
    pub(crate) ended: u64,
    pub(crate) messages: Vec<Received>,
    /// The lowest and highest score among the messages taken (None: none
    /// taken).
    pub(crate) taken: Option<(i64, i64)>,
}

/// A pop reply made into deliveries of `slot` (a malformed delivery id is
/// logged and skipped).
pub(crate) fn parse_pop(spec: &TopicSpec, slot: u32, reply: Value) -> Popped {
    let r = PopReply::parse(reply);
    let mut taken: Option<(i64, i64)> = None;
    let messages = r
        .taken
        .into_iter()
        .filter_map(|(id, payload)| {
            let Some(d) = DeliveryId::parse(&id) else {
                tracing::error!(topic = %spec.name, slot, "pop returned a malformed delivery id");
                return None;
            };
            taken = Some(taken.map_or((d.score, d.score), |(low, high)| {
                (low.min(d.score), high.max(d.score))
            }));
            let (priority, due_ms) = Received::score_fields(spec.kind, d.score);
            Some(Received {
                topic: spec.name.clone(),
                kind: spec.kind,
                key: d.key.to_vec(),
                payload,
                slot,
                attempt: d.attempt,
                priority,
                due_ms,
                token: d.token,
                origin: d.origin,
                taken_ms: r.now,
                fence: None,
                id,
            })
        })
        .collect();
    Popped {
        now: r.now,
        head: r.head,
        retry: r.retry,
        lease: r.lease,
        ended: r.ended,
        messages,
        taken,
    }
}
