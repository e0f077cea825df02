//! Sending: one message or a batch, one script call per slot, all slots of a
//! batch in one pipeline (one round trip).

use std::collections::BTreeMap;

use crate::error::{Error, ErrorKind, Result};
use crate::message::{Message, Sent};
use crate::scripts::{self, ScriptId};
use crate::topic::Topic;
use crate::value::{int_at, items};

/// Messages per script call: bounds the time one call holds Redis.
const PER_CALL: usize = 1_000;
/// Messages per `send_batch`: bounds one call's memory on both sides.
pub const MAX_BATCH: usize = 100_000;

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

    /// Sends many messages in one round trip. Every message is checked
    /// first: if any is invalid, the call is refused and nothing is written.
    /// Messages with the same key in one batch merge in order.
    pub async fn send_batch(&self, messages: &[Message]) -> Result<BatchReport> {
        let spec = &self.spec;
        if messages.len() > MAX_BATCH {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "a batch of {} messages is too large: send at most {MAX_BATCH} per call; nothing was sent",
                    messages.len()
                ),
            ));
        }
        let mut specs = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let s = m.spec_for(spec).map_err(|e| {
                if messages.len() == 1 {
                    e
                } else {
                    Error::new(e.kind(), format!("message {i}: {e}; nothing was sent"))
                }
            })?;
            specs.push(s);
        }
        // Group by slot, keeping order within a slot.
        let mut by_slot: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut slots = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let slot = self.slot_of(m.basis());
            slots.push(slot);
            by_slot.entry(slot).or_default().push(i);
        }
        let max_payload = spec.max_payload_bytes.to_string();
        let tolerance = spec.past_tolerance_ms.to_string();
        let mut calls = Vec::new();
        let mut call_members: Vec<Vec<usize>> = Vec::new();
        for (slot, idxs) in &by_slot {
            let keys = self.slot_keys(*slot);
            let slot_s = slot.to_string();
            let channel = self.channel_for(*slot);
            for chunk in idxs.chunks(PER_CALL) {
                let mut args: Vec<&[u8]> = vec![
                    spec.kind.code().as_bytes(),
                    max_payload.as_bytes(),
                    tolerance.as_bytes(),
                    channel.as_bytes(),
                    slot_s.as_bytes(),
                ];
                for &i in chunk {
                    args.push(messages[i].merge_key());
                    args.push(specs[i].as_bytes());
                    args.push(messages[i].payload());
                }
                calls.push((ScriptId::Send, scripts::call(ScriptId::Send, &keys, &args)));
                call_members.push(chunk.to_vec());
            }
        }
        let replies = self.redis().run_waiting(calls, self.durability).await?;
        let mut results: Vec<Option<Result<Sent>>> = (0..messages.len()).map(|_| None).collect();
        for ((reply, acked), members) in replies.into_iter().zip(call_members) {
            match reply {
                Ok(v) => {
                    let codes = items(v);
                    for (j, &i) in members.iter().enumerate() {
                        let code = int_at(&codes, j + 1).unwrap_or(-3);
                        let sent = decode(
                            code,
                            slots[i],
                            spec.max_payload_bytes,
                            spec.past_tolerance_ms,
                        );
                        results[i] = Some(sent.and_then(|s| self.check_replicated(s, acked)));
                    }
                }
                Err(e) => {
                    for &i in &members {
                        results[i] = Some(Err(e.duplicate()));
                    }
                }
            }
        }
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

fn decode(code: i64, slot: u32, max_payload: u64, tolerance: u64) -> Result<Sent> {
    match code {
        1 => Ok(Sent {
            slot,
            merged: false,
            behind_in_flight: false,
            replicas: None,
        }),
        2 => Ok(Sent {
            slot,
            merged: true,
            behind_in_flight: false,
            replicas: None,
        }),
        3 => Ok(Sent {
            slot,
            merged: false,
            behind_in_flight: true,
            replicas: None,
        }),
        4 => Ok(Sent {
            slot,
            merged: true,
            behind_in_flight: true,
            replicas: None,
        }),
        c => Err(Error::from_send_code(
            c,
            usize::try_from(max_payload).unwrap_or(usize::MAX),
            tolerance,
        )),
    }
}
