//! Cancelling by key: waiting messages removed, in-flight ones marked so
//! that their delivery is the last (`cancel.lua`), many keys per call.

use std::collections::BTreeMap;

use super::{check_key, unexpected, CancelOutcome, State, SLOTS_PER_ROUND};
use crate::error::Result;
use crate::scripts::control;
use crate::scripts::ScriptId;
use crate::topic::Topic;

/// Keys one cancel call takes at most (bounds the time it holds Redis).
const CANCEL_PER_CALL: usize = 1_000;

impl Topic {
    /// Cancels the messages of these keys (each in the slot of its own
    /// hash); returns what happened to each, in order. Cancelling twice is
    /// harmless. All keys are checked before anything is sent.
    pub async fn cancel(&self, keys: &[&[u8]]) -> Result<Vec<CancelOutcome>> {
        let slots: Vec<u32> = keys.iter().map(|k| self.slot_of(k)).collect();
        self.cancel_by_slot(keys, &slots).await
    }

    /// Cancels the messages of these keys, which live in the slot of `basis`.
    pub async fn cancel_in(&self, keys: &[&[u8]], basis: &[u8]) -> Result<Vec<CancelOutcome>> {
        let slots = vec![self.slot_of(basis); keys.len()];
        self.cancel_by_slot(keys, &slots).await
    }

    async fn cancel_by_slot(&self, keys: &[&[u8]], slots: &[u32]) -> Result<Vec<CancelOutcome>> {
        for key in keys {
            check_key(key)?;
        }
        let mut by_slot: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, &slot) in slots.iter().enumerate() {
            by_slot.entry(slot).or_default().push(i);
        }
        let slot_keys: BTreeMap<u32, [String; 10]> =
            by_slot.keys().map(|&s| (s, self.slot_keys(s))).collect();
        let mut calls: Vec<((ScriptId, redis::Cmd), &[usize])> = Vec::new();
        for (slot, idxs) in &by_slot {
            for chunk in idxs.chunks(CANCEL_PER_CALL) {
                let merge_keys: Vec<&[u8]> = chunk.iter().map(|&i| keys[i]).collect();
                let call = control::cancel(&slot_keys[slot], self.spec.script_kind(), &merge_keys);
                calls.push((call, chunk));
            }
        }
        let mut out = vec![CancelOutcome::Absent; keys.len()];
        for round in calls.chunks(SLOTS_PER_ROUND) {
            let cmds = round.iter().map(|(c, _)| c.clone()).collect();
            let mut removed = 0;
            let mut failed = None;
            for (reply, (_, idxs)) in self.redis().run(cmds).await?.into_iter().zip(round) {
                let reply = match reply {
                    Ok(v) => v,
                    Err(e) => {
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                let (codes, n) = control::cancel_codes(reply, idxs.len());
                removed += n;
                for (&i, code) in idxs.iter().zip(codes) {
                    match cancel_outcome(code) {
                        Ok(o) => out[i] = o,
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
            }
            // Room comes back for what the calls that ran removed, even
            // when another call of the round failed.
            self.give_back_room(removed).await;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(out)
    }
}

fn cancel_outcome(code: Option<i64>) -> Result<CancelOutcome> {
    Ok(match code {
        Some(1) => CancelOutcome::Cancelled(State::Pending),
        Some(2) => CancelOutcome::Cancelled(State::RetryWaiting),
        Some(3) => CancelOutcome::WillNotRetry { already: false },
        Some(4) => CancelOutcome::WillNotRetry { already: true },
        Some(5) => CancelOutcome::Dead,
        Some(0) => CancelOutcome::Absent,
        _ => return Err(unexpected("cancel")),
    })
}
