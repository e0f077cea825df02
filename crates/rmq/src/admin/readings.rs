//! Readings over many slots at a bounded cost per call. A topic may have
//! 65,536 slots, and one script call per slot made `stats` on such a topic
//! 65,536 calls. On a single node one reading call covers many slots (its
//! keys span hash slots, which a single node serves); on a cluster each
//! slot's keys live under their own hash tag, so a call covers one slot,
//! and the calls are pipelined. A server in cluster mode reached as a
//! single node refuses a call over many slots (CROSSSLOT): the reading is
//! then made again one slot per call. Any other error is the reading's.

use redis::{Cmd, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::scripts::admin::split_reading;
use crate::scripts::ScriptId;
use crate::topic::Topic;

/// Slots one reading call covers on a single node: 1,280 keys, a call of
/// 0.3–1.6 ms of Redis time (one EXISTS when none of them was ever used).
pub(crate) const SLOTS_PER_CALL: usize = 128;

/// Calls sent in one pipeline round.
const CALLS_PER_ROUND: usize = 256;

/// What a reading gives: the server time of its last reply, and each
/// slot's part, in the order the slots were asked for.
pub(crate) struct Reading {
    pub(crate) server_ms: i64,
    pub(crate) parts: Vec<Value>,
}

impl Topic {
    /// Runs a reading script over `slots`: `call` makes one call from the
    /// keys of some slots (ten per slot, slot after slot), and its reply
    /// holds the server time, then `per_slot` values per slot.
    pub(crate) async fn read_slots(
        &self,
        slots: &[u32],
        per_slot: usize,
        call: impl Fn(&[String]) -> (ScriptId, Cmd),
    ) -> Result<Reading> {
        if !self.redis().is_cluster() {
            match self
                .read_in_calls_of(SLOTS_PER_CALL, slots, per_slot, &call)
                .await
            {
                Err(e) if e.redis_code() == Some("CROSSSLOT") => {
                    tracing::debug!(topic = %self.name(),
                        "the server is in cluster mode: reading one slot per call");
                }
                done => return done,
            }
        }
        self.read_in_calls_of(1, slots, per_slot, &call).await
    }

    async fn read_in_calls_of(
        &self,
        slots_per_call: usize,
        slots: &[u32],
        per_slot: usize,
        call: &impl Fn(&[String]) -> (ScriptId, Cmd),
    ) -> Result<Reading> {
        let mut out = Reading {
            server_ms: 0,
            parts: Vec::with_capacity(slots.len() * per_slot),
        };
        let groups: Vec<&[u32]> = slots.chunks(slots_per_call).collect();
        for round in groups.chunks(CALLS_PER_ROUND) {
            let calls = round
                .iter()
                .map(|group| {
                    let keys: Vec<String> = group.iter().flat_map(|&s| self.slot_keys(s)).collect();
                    call(&keys)
                })
                .collect();
            for (reply, group) in self.redis().run(calls).await?.into_iter().zip(round) {
                let (now, parts) =
                    split_reading(reply?, per_slot, group.len()).ok_or_else(|| {
                        Error::new(
                            ErrorKind::Redis,
                            "a reading script answered in another shape",
                        )
                    })?;
                out.server_ms = now;
                out.parts.extend(parts);
            }
        }
        Ok(out)
    }

    /// All the topic's slots, in order.
    pub(crate) fn all_slots(&self) -> Vec<u32> {
        (0..self.spec.slots).collect()
    }
}
