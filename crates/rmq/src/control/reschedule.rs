//! A waiting message's new due time or priority (`reschedule.lua`).

use super::{check_key, Reschedule, Rescheduled};
use crate::error::{Error, ErrorKind, Result};
use crate::message::Received;
use crate::scripts::control::{self, RescheduleRequest};
use crate::topic::{Topic, TopicKind, MAX_PRIORITY};

impl Topic {
    /// Gives the waiting message of `key` (in the slot of its own hash) a
    /// new due time or priority, keeping its payload and attempts.
    pub async fn reschedule(&self, key: &[u8], to: Reschedule) -> Result<Rescheduled> {
        self.reschedule_in(key, key, to).await
    }

    /// [`Topic::reschedule`] for a key that lives in the slot of `basis`.
    pub async fn reschedule_in(
        &self,
        key: &[u8],
        basis: &[u8],
        to: Reschedule,
    ) -> Result<Rescheduled> {
        check_key(key)?;
        let spec = self.reschedule_spec(to)?;
        let slot = self.slot_of(basis);
        let (keys, channel) = (self.slot_keys(slot), self.channel_for(slot));
        let settings = self.settings().await?;
        let tolerance_ms = settings.spec.past_tolerance_ms;
        let (slot_s, tolerance) = (slot.to_string(), tolerance_ms.to_string());
        let (id, cmd) = RescheduleRequest {
            keys: &keys,
            kind: settings.spec.script_kind(),
            channel: &channel,
            slot: &slot_s,
            key,
            spec: &spec,
            tolerance_ms: &tolerance,
        }
        .call();
        let (_, code, score) = control::rescheduled(self.redis().run_one(id, cmd).await?);
        let moved = crate::scripts::codes::rescheduled(code, tolerance_ms)?;
        let (priority, due_ms) = Received::score_fields(self.spec.kind, score.unwrap_or(0));
        Ok(Rescheduled {
            slot,
            moved,
            priority,
            due_ms,
        })
    }

    /// The script's spec argument for `to`, if it fits the topic's kind.
    fn reschedule_spec(&self, to: Reschedule) -> Result<String> {
        let kind = self.spec.kind;
        match (kind, to) {
            (TopicKind::Priority, Reschedule::Priority(p)) if p <= MAX_PRIORITY => {
                Ok(p.to_string())
            }
            (TopicKind::Priority, Reschedule::Priority(p)) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("priority {p} is out of range: use 0..={MAX_PRIORITY}"),
            )),
            (TopicKind::FixedTime | TopicKind::RangeMerge, Reschedule::At(ms)) if ms >= 0 => {
                Ok(ms.to_string())
            }
            (TopicKind::FixedTime | TopicKind::RangeMerge, Reschedule::Delay(ms)) => {
                Ok(format!("+{ms}"))
            }
            (TopicKind::FixedTime | TopicKind::RangeMerge, Reschedule::At(ms)) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("due time {ms} is out of range: use Unix milliseconds"),
            )),
            (kind, _) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{kind} topic {:?} takes {}; nothing was changed",
                    self.spec.name,
                    match kind {
                        TopicKind::Priority => "a new priority (--priority)",
                        _ => "a new due time (--at or --delay), not a priority",
                    }
                ),
            )),
        }
    }
}
