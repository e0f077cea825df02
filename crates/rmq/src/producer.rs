//! Sending: one message or a batch, one script call per slot, all slots of a
//! batch in one pipeline (one round trip).

use std::collections::BTreeMap;

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Message, Received};
use crate::outcome::Sent;
use crate::scripts::send::{self, Item, SendRequest};
use crate::scripts::{codes, ScriptId};
use crate::topic::{Topic, TopicSpec};

/// Messages per script call: bounds the time one call holds Redis.
const PER_CALL: usize = 1_000;
pub use crate::limits::MAX_BATCH;

/// A send call, the indices of the messages it carries, and the room it
/// may use (new messages at most; 0 when the topic is not bounded).
type SendCall = ((ScriptId, redis::Cmd), (Vec<usize>, usize));

/// The result of [`Topic::send_batch`]: one result per message, in order.
/// A message the server refused (a due time in the past by its clock)
/// wrote nothing; the others were written.
#[derive(Debug)]
pub struct BatchReport {
    /// Per message, in the order given.
    pub results: Vec<Result<Sent>>,
}

impl BatchReport {
    /// Messages that were new.
    pub fn new_count(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, Ok(s) if !s.merged))
            .count()
    }
    /// Messages merged into one with the same key.
    pub fn merged_count(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r, Ok(s) if s.merged))
            .count()
    }
    /// Messages refused by the server.
    pub fn refused_count(&self) -> usize {
        self.results.iter().filter(|r| r.is_err()).count()
    }
}

impl Topic {
    /// Sends one message. Returns whether it was new or merged; a refusal
    /// (bad input, a due time in the past) writes nothing.
    pub async fn send(&self, message: Message) -> Result<Sent> {
        let mut report = self.send_batch(std::slice::from_ref(&message)).await?;
        report
            .results
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Redis, "no result for the message")))
    }

    /// Sends many messages in one round trip (more than 1000 for one slot
    /// take one more round trip per 1000, in order). Every message is checked
    /// first: if any is invalid, the call is refused and nothing is written.
    /// Messages with the same key in one batch merge in order.
    pub async fn send_batch(&self, messages: &[Message]) -> Result<BatchReport> {
        use tracing::Instrument;
        let span = crate::observe::send_span(self.name(), messages.len());
        self.send_batch_traced(messages).instrument(span).await
    }

    async fn send_batch_traced(&self, messages: &[Message]) -> Result<BatchReport> {
        let settings = self.settings().await?;
        let spec = &settings.spec;
        let specs = self.check_batch(spec, messages)?;
        let slots: Vec<u32> = messages.iter().map(|m| self.slot_of(m.basis())).collect();
        let mut room = self.reserve_room(messages.len()).await?;
        let per_slot = self.send_calls(spec, messages, &specs, &slots, room.granted());
        let mut results: Vec<Option<Result<Sent>>> = (0..messages.len()).map(|_| None).collect();
        for (n, round) in in_order_rounds(per_slot).into_iter().enumerate() {
            let (calls, members): (Vec<_>, Vec<_>) = round
                .into_iter()
                .filter(|(_, (m, _))| m.iter().all(|&i| results[i].is_none()))
                .unzip();
            if calls.is_empty() {
                continue;
            }
            // Room of a call whose answer is lost may have been used: it
            // stays counted (the bound holds; a recount gives it back).
            room.sending(members.iter().map(|(_, room)| room).sum());
            let replies = match self.redis().run_waiting(calls, self.durability).await {
                Ok(r) => r,
                Err(e) if n == 0 => {
                    room.commit().await;
                    return Err(e);
                }
                // Earlier rounds' results stand; this round's and the rest
                // share the error (this round's may or may not have run).
                Err(e) => {
                    for r in results.iter_mut().filter(|r| r.is_none()) {
                        *r = Some(Err(e.duplicate()));
                    }
                    break;
                }
            };
            for ((reply, acked), (members, call_room)) in replies.into_iter().zip(members) {
                if let Some(new) = self.record(spec, reply, acked, &members, &slots, &mut results) {
                    room.answered(call_room, new);
                }
            }
        }
        room.commit().await;
        Ok(BatchReport {
            results: results
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|| {
                        Err(Error::new(ErrorKind::Redis, "no result for the message"))
                    })
                })
                .collect(),
        })
    }

    /// Checks every message before anything is sent; returns each one's
    /// spec argument (priority, due time or range, as the script takes it).
    fn check_batch(&self, spec: &TopicSpec, messages: &[Message]) -> Result<Vec<String>> {
        if messages.len() > MAX_BATCH {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a batch of {} messages is too large: send at most {MAX_BATCH} per call; nothing was sent",
                    messages.len()
                ),
            ));
        }
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.spec_for(spec).map_err(|e| {
                    if messages.len() == 1 {
                        e
                    } else {
                        Error::new(e.kind(), format!("message {i}: {e}; nothing was sent"))
                    }
                })
            })
            .collect()
    }

    /// The send calls of each slot, in message order (a slot with more
    /// than `PER_CALL` messages gets several), each with its messages.
    fn send_calls(
        &self,
        spec: &TopicSpec,
        messages: &[Message],
        specs: &[String],
        slots: &[u32],
        granted: Option<usize>,
    ) -> Vec<Vec<SendCall>> {
        let mut by_slot: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, &slot) in slots.iter().enumerate() {
            by_slot.entry(slot).or_default().push(i);
        }
        let kind = spec.script_kind();
        let max_payload = spec.max_payload_bytes.to_string();
        let tolerance = spec.past_tolerance_ms.to_string();
        let mut per_slot = Vec::with_capacity(by_slot.len());
        for (slot, idxs) in &by_slot {
            let keys = self.slot_keys_kept(*slot);
            let slot_s = slot.to_string();
            let channel = self.channel_for(*slot);
            let mut chunks = Vec::new();
            for chunk in idxs.chunks(PER_CALL) {
                // The room goes to the first `granted` messages of the
                // batch; each call may add as many new ones as it holds of
                // them (a merge among them leaves its unit unused).
                let room = granted.map(|g| chunk.iter().filter(|&&i| i < g).count());
                let request = SendRequest {
                    keys: &keys[..],
                    kind,
                    max_payload: &max_payload,
                    tolerance_ms: &tolerance,
                    channel: &channel,
                    slot: &slot_s,
                    room,
                    items: chunk
                        .iter()
                        .map(|&i| Item {
                            merge_key: messages[i].merge_key(),
                            spec: specs[i].as_bytes(),
                            payload: messages[i].payload(),
                        })
                        .collect(),
                };
                chunks.push((request.call(), (chunk.to_vec(), room.unwrap_or(0))));
            }
            per_slot.push(chunks);
        }
        per_slot
    }

    /// Records one send call's reply for its messages; returns how many
    /// were new (None when the call failed: it may or may not have run). A
    /// failed call fails the later calls of its slot too: they would
    /// overtake it if it ran after all.
    fn record(
        &self,
        spec: &TopicSpec,
        reply: Result<redis::Value>,
        acked: Option<u32>,
        members: &[usize],
        slots: &[u32],
        results: &mut [Option<Result<Sent>>],
    ) -> Option<usize> {
        match reply {
            Ok(v) => {
                let reply = send::reply(v, members.len());
                let new = reply
                    .results
                    .iter()
                    .filter(|&&(c, _)| send::is_new(c))
                    .count();
                for (&i, (code, score)) in members.iter().zip(reply.results) {
                    let (priority, due_ms) = Received::score_fields(spec.kind, score);
                    let at = codes::SentAt {
                        slot: slots[i],
                        priority,
                        due_ms,
                        server_ms: reply.server_ms,
                    };
                    let sent =
                        codes::sent(code, at, spec.max_payload_bytes, spec.past_tolerance_ms)
                            .map_err(|e| full_with_bound(e, spec.max_pending));
                    results[i] = Some(sent.and_then(|s| self.check_replicated(s, acked)));
                }
                Some(new)
            }
            Err(e) => {
                let slot = members.first().map(|&i| slots[i]);
                for (i, r) in results.iter_mut().enumerate() {
                    if r.is_none() && Some(slots[i]) == slot {
                        *r = Some(Err(e.duplicate()));
                    }
                }
                None
            }
        }
    }
}

/// A Full refusal that names the topic's bound.
fn full_with_bound(e: Error, bound: u64) -> Error {
    if e.kind() != ErrorKind::Full {
        return e;
    }
    Error::new(
        ErrorKind::Full,
        format!(
            "the topic is full: it holds its bound of {bound} messages (max pending); \
             nothing was written; retry later (room comes back as messages end)"
        ),
    )
}

/// Orders a batch's calls into rounds: round k holds the k-th call of every
/// slot that has one. A round is sent only once the one before has ended
/// (script reloads and retries included), so the calls of one slot run in
/// the order of the messages: a key in two of them ends with the later
/// one's payload and due time, as if sent one by one.
fn in_order_rounds<T>(per_slot: Vec<Vec<T>>) -> Vec<Vec<T>> {
    let mut rounds: Vec<Vec<T>> = Vec::new();
    for calls in per_slot {
        for (k, call) in calls.into_iter().enumerate() {
            if rounds.len() <= k {
                rounds.push(Vec::new());
            }
            rounds[k].push(call);
        }
    }
    rounds
}

impl Topic {
    /// A durable send whose write fewer replicas than asked acknowledged
    /// becomes a NotReplicated error.
    fn check_replicated(&self, mut sent: Sent, acked: Option<u32>) -> Result<Sent> {
        let Some(want) = self.durability else {
            return Ok(sent);
        };
        let got = acked.unwrap_or(0);
        sent.replicas = Some(got);
        if got >= want.replicas {
            return Ok(sent);
        }
        Err(Error::new(
            ErrorKind::NotReplicated,
            format!(
                "the message was written on the master ({}) but only {got} of {} replicas \
                 acknowledged it within {} ms: a failover now may lose it; sending it again is safe",
                if sent.merged { "merged" } else { "new" },
                want.replicas,
                want.timeout_ms
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::in_order_rounds;

    #[test]
    fn a_slots_calls_go_out_one_round_after_the_other_in_message_order() {
        let rounds = in_order_rounds(vec![vec!["a1", "a2", "a3"], vec!["b1"], vec!["c1", "c2"]]);
        assert_eq!(
            rounds,
            vec![vec!["a1", "b1", "c1"], vec!["a2", "c2"], vec!["a3"]]
        );
    }
}
