//! Messages going in ([`Message`]), what a send reports ([`Sent`]) and what
//! a consumer receives ([`Received`]).

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::topic::{TopicKind, TopicSpec, MAX_PRIORITY};

pub(crate) use crate::limits::MAX_SPAN_MS;
pub use crate::limits::{MAX_KEY_BYTES, MAX_TIME_MS};

/// When a message is due, or how it ranks, as it was given; which one
/// applies depends on the topic's kind ([`Message::check`] says whether it
/// fits). A store that keeps messages before they reach Redis reads it with
/// [`Message::timing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// None given (a priority topic then uses priority 0).
    None,
    /// Priority topics: the priority.
    Priority(u32),
    /// Fixed-time topics: due at this Unix time (ms).
    At(i64),
    /// Fixed-time topics: due this many ms after the send.
    Delay(u64),
    /// Range-merge topics: due this many ms after the first send of its key.
    Range(u64),
}

/// A message to send: a payload, a merge key (the payload itself when not
/// given), an optional slot basis, and the kind's timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    key: Option<Vec<u8>>,
    payload: Vec<u8>,
    slot_basis: Option<Vec<u8>>,
    timing: Timing,
}

impl Message {
    /// A message whose merge key is its payload (the original's behaviour).
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Message {
            key: None,
            payload: payload.into(),
            slot_basis: None,
            timing: Timing::None,
        }
    }

    /// Sets the merge key: pending messages with the same key are merged.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the slot basis (default: the merge key). Messages with one basis
    /// share a slot, and so are consumed one at a time in serial mode.
    pub fn slot_basis(mut self, basis: impl Into<Vec<u8>>) -> Self {
        self.slot_basis = Some(basis.into());
        self
    }

    /// Priority topics: the priority, `0..=2097151`, bigger first (default 0).
    pub fn priority(mut self, p: u32) -> Self {
        self.timing = Timing::Priority(p);
        self
    }

    /// Fixed-time topics: due at this Unix time in milliseconds (server clock).
    pub fn at_ms(mut self, unix_ms: i64) -> Self {
        self.timing = Timing::At(unix_ms);
        self
    }

    /// Fixed-time topics: due this long after the server receives it.
    pub fn delay(mut self, d: Duration) -> Self {
        self.timing = Timing::Delay(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Range-merge topics: due this long after the first send of its key;
    /// duplicates until then merge into it (must be at least 1 ms).
    pub fn range(mut self, d: Duration) -> Self {
        self.timing = Timing::Range(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// The timing as it was given (priority, due time, delay or range).
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The slot basis when one was given (else the merge key is used).
    pub fn given_slot_basis(&self) -> Option<&[u8]> {
        self.slot_basis.as_deref()
    }

    /// The merge key (the payload when none was given).
    pub fn merge_key(&self) -> &[u8] {
        self.key.as_deref().unwrap_or(&self.payload)
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The bytes the slot is computed from.
    pub fn basis(&self) -> &[u8] {
        self.slot_basis
            .as_deref()
            .unwrap_or_else(|| self.merge_key())
    }

    /// Checks the message against a topic's definition, as a send would
    /// before writing anything (kind's timing, ranges, sizes).
    pub fn check(&self, topic: &TopicSpec) -> Result<()> {
        self.spec_for(topic).map(|_| ())
    }

    /// Checks the message against the topic and returns the script's spec
    /// argument (priority, due time, `+delay` or range).
    pub(crate) fn spec_for(&self, topic: &TopicSpec) -> Result<String> {
        self.check_sizes(topic)?;
        self.timing_arg(topic)
    }

    /// The merge key is there and, like the payload, within the limits.
    fn check_sizes(&self, topic: &TopicSpec) -> Result<()> {
        if self.merge_key().is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "a message needs a non-empty merge key (or, without one, a non-empty payload)",
            ));
        }
        if self.payload.len() as u64 > topic.max_payload_bytes {
            return Err(Error::new(
                ErrorKind::PayloadTooLarge,
                format!(
                    "the payload has {} bytes, more than topic {:?} allows ({} bytes)",
                    self.payload.len(),
                    topic.name,
                    topic.max_payload_bytes
                ),
            ));
        }
        if self.merge_key().len() > MAX_KEY_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "the merge key has {} bytes, more than rmq allows ({MAX_KEY_BYTES} bytes){}",
                    self.merge_key().len(),
                    if self.key.is_none() {
                        ": without a key the payload is the key; give a shorter one with Message::key"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if self.merge_key().len() as u64 > topic.max_payload_bytes {
            return Err(Error::new(
                ErrorKind::PayloadTooLarge,
                format!(
                    "the merge key is larger than the topic's limit of {} bytes",
                    topic.max_payload_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The timing as send.lua's spec argument, if it fits the topic's kind.
    fn timing_arg(&self, topic: &TopicSpec) -> Result<String> {
        let bad = |m: String| Err(Error::new(ErrorKind::InvalidArgument, m));
        match (topic.kind, self.timing) {
            (TopicKind::Priority, Timing::None) => Ok("0".into()),
            (TopicKind::Priority, Timing::Priority(p)) if p <= MAX_PRIORITY => Ok(p.to_string()),
            (TopicKind::Priority, Timing::Priority(p)) => bad(format!(
                "priority {p} is out of range: use 0..={MAX_PRIORITY}"
            )),
            (TopicKind::FixedTime, Timing::At(ms)) if (0..=MAX_TIME_MS).contains(&ms) => {
                Ok(ms.to_string())
            }
            (TopicKind::FixedTime, Timing::At(ms)) => bad(format!(
                "due time {ms} is out of range: use Unix milliseconds from 0 to {MAX_TIME_MS}"
            )),
            (TopicKind::FixedTime, Timing::Delay(ms)) if ms <= MAX_SPAN_MS => Ok(format!("+{ms}")),
            (TopicKind::FixedTime, Timing::Delay(_)) => {
                bad("the delay is longer than 100 years".into())
            }
            (TopicKind::FixedTime, Timing::None) => {
                bad("a fixed-time message needs a due time (at) or a delay".into())
            }
            (TopicKind::RangeMerge, Timing::Range(ms)) if (1..=MAX_SPAN_MS).contains(&ms) => {
                Ok(ms.to_string())
            }
            (TopicKind::RangeMerge, Timing::Range(_)) => {
                bad("the range must be at least 1 ms and at most 100 years".into())
            }
            (TopicKind::RangeMerge, Timing::None) => {
                bad("a range-merge message needs a range (ms > 0)".into())
            }
            (kind, timing) => bad(format!(
                "{} does not apply to {kind} topic {:?}: {}",
                timing_name(timing),
                topic.name,
                match kind {
                    TopicKind::Priority => "give a priority",
                    TopicKind::FixedTime => "give a due time or a delay",
                    TopicKind::RangeMerge => "give a range",
                }
            )),
        }
    }
}

fn timing_name(t: Timing) -> &'static str {
    match t {
        Timing::None => "no timing",
        Timing::Priority(_) => "a priority",
        Timing::At(_) => "a due time",
        Timing::Delay(_) => "a delay",
        Timing::Range(_) => "a range",
    }
}

/// A message as a consumer receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The topic's name.
    pub topic: String,
    /// The topic's kind.
    pub kind: TopicKind,
    /// The merge key.
    pub key: Vec<u8>,
    /// The payload.
    pub payload: Vec<u8>,
    /// The slot it lives in.
    pub slot: u32,
    /// Which delivery this is: 1 for the first.
    pub attempt: u32,
    /// Priority topics: its priority.
    pub priority: Option<u32>,
    /// Time-based topics: when it was due (Unix ms, server clock).
    pub due_ms: Option<i64>,
    /// Identifies this delivery: acks carrying another token are refused.
    pub token: u64,
    /// The token of this message's first delivery: every retry of the
    /// message carries it (see [`Received::stable_id`]).
    pub origin: u64,
    /// The server's time when it was taken (Unix ms).
    pub taken_ms: i64,
    /// Serial mode: the slot lease's epoch (fencing token) under which it
    /// was taken. It only grows; pass it to downstream writes so that a
    /// consumer that lost the slot cannot overwrite a newer owner's work.
    pub fence: Option<u64>,
    /// The delivery id pop returned (`<token>,<attempt>,<score>|<key>`): it
    /// names this delivery when it is settled.
    pub(crate) id: Vec<u8>,
}

impl Received {
    /// Names this message across its deliveries, for a downstream system
    /// that deduplicates (a forwarder's `Nats-Msg-Id`, a `message_id`):
    /// `<topic>/<slot>/<origin>/<key CRC32>/<payload length>-<payload
    /// CRC32>`. A retry
    /// of the message (after a failure, an expired lease, a reschedule, or
    /// the release of a later attempt) has the same id; a message merged
    /// into while it waited for a retry has a new one when its payload
    /// changed, so the new payload is never taken for a duplicate. A first
    /// delivery given back with [`release`](crate::Delivery::release)
    /// counts as not delivered: its next delivery is a first one, with a
    /// new id. Origins are a slot's delivery tokens, which count from the
    /// server clock at the slot's first delivery, so ids do not repeat when
    /// a topic is deleted and defined again, nor between deployments; two
    /// messages could share one only if a Redis failover or restore wound a
    /// slot's counter back *and* they had the same key and payload.
    pub fn stable_id(&self) -> String {
        format!(
            "{}/{}/{}/{:08x}/{}-{:08x}",
            self.topic,
            self.slot,
            self.origin,
            crc32fast::hash(&self.key),
            self.payload.len(),
            crc32fast::hash(&self.payload)
        )
    }

    pub(crate) fn score_fields(kind: TopicKind, score: i64) -> (Option<u32>, Option<i64>) {
        match kind {
            TopicKind::Priority => (u32::try_from(score >> 32).ok(), None),
            _ => (None, Some(score)),
        }
    }
}
