//! Looking a key up: one atomic read of its slot (`get.lua`).

use super::{check_key, unexpected, DeadInfo, Lookup, Parked, State};
use crate::error::Result;
use crate::message::Received;
use crate::scripts::control::{self, GetReply, Where};
use crate::topic::Topic;

impl Topic {
    /// Everything about `key` in the slot of its own hash (see
    /// [`Topic::get_in`] for a message sent with a slot basis).
    pub async fn get(&self, key: &[u8]) -> Result<Lookup> {
        self.get_in(key, key).await
    }

    /// Everything about `key`, which lives in the slot of `basis`.
    pub async fn get_in(&self, key: &[u8], basis: &[u8]) -> Result<Lookup> {
        check_key(key)?;
        let slot = self.slot_of(basis);
        let keys = self.slot_keys(slot);
        let (id, cmd) = control::get(&keys, self.spec.kind.code(), key);
        let reply = GetReply::parse(self.redis().run_one(id, cmd).await?)
            .ok_or_else(|| unexpected("get"))?;
        Ok(self.lookup(key, slot, reply))
    }

    fn lookup(&self, key: &[u8], slot: u32, r: GetReply) -> Lookup {
        let kind = self.spec.kind;
        let (priority, due_ms) = match r.score {
            Some(s) => Received::score_fields(kind, s),
            None => (None, None),
        };
        let state = match (r.state, &r.dead) {
            (Where::Pending, _) => State::Pending,
            (Where::Retry, _) => State::RetryWaiting,
            (Where::Flight, _) => State::InFlight,
            (Where::Absent, Some(_)) => State::Dead,
            (Where::Absent, None) => State::Absent,
        };
        let parked = r.parked.map(|(score, payload)| {
            let (priority, due_ms) = Received::score_fields(kind, score);
            Parked {
                payload,
                priority,
                due_ms,
            }
        });
        Lookup {
            key: key.to_vec(),
            state,
            slot,
            payload: r.payload,
            attempts: r.attempts,
            priority,
            due_ms,
            next_attempt_ms: (state == State::RetryWaiting)
                .then_some(r.next_ms)
                .flatten(),
            lease_until_ms: (state == State::InFlight).then_some(r.next_ms).flatten(),
            fence: r.epoch,
            error: r.error,
            cancelled: r.cancelled,
            parked,
            dead: r.dead.map(|d| DeadInfo {
                payload: d.payload,
                attempts: d.attempts,
                error: d.error,
                dead_at_ms: d.dead_ms,
                deaths: d.deaths,
            }),
            server_ms: r.now,
        }
    }
}
