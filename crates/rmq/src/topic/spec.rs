//! A topic's definition: a name, one kind, a power-of-two slot count and
//! the settings of consumption, each checked by `validate`. The definition
//! is stored in Redis (the prefix's topic index) so every process agrees
//! on it; a second definition must be identical.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::layout::PendingLayout;
use crate::error::{Error, ErrorKind, Result};

/// How a topic orders and merges its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopicKind {
    /// Due at `now + range`; a duplicate keeps the first due time and brings
    /// the newest payload.
    RangeMerge,
    /// Highest priority first, FIFO among equals in a slot; a duplicate sets
    /// the priority (the last one wins) and the payload.
    Priority,
    /// Due at an exact time; a duplicate sets the due time (the last one
    /// wins) and the payload.
    FixedTime,
}

impl TopicKind {
    /// The kind's name as the CLI and the stored definition spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            TopicKind::RangeMerge => "range-merge",
            TopicKind::Priority => "priority",
            TopicKind::FixedTime => "fixed-time",
        }
    }

    /// The one-letter code the scripts take.
    pub(crate) fn code(self) -> &'static str {
        match self {
            TopicKind::RangeMerge => "r",
            TopicKind::Priority => "p",
            TopicKind::FixedTime => "f",
        }
    }

    /// True for the kinds whose score is a due time.
    pub fn is_time_based(self) -> bool {
        !matches!(self, TopicKind::Priority)
    }
}

impl std::str::FromStr for TopicKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "range-merge" => Ok(TopicKind::RangeMerge),
            "priority" => Ok(TopicKind::Priority),
            "fixed-time" => Ok(TopicKind::FixedTime),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("unknown topic kind {other:?}: use range-merge, priority or fixed-time"),
            )),
        }
    }
}

impl std::fmt::Display for TopicKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

use crate::limits::{
    MAX_ATTEMPTS, MAX_BACKOFF_MS, MAX_HANDLER_TIMEOUT_MS, MAX_LEASE_MS, MAX_PAST_TOLERANCE_MS,
    MAX_PAYLOAD_LIMIT_BYTES,
};
pub use crate::limits::{
    MAX_IN_FLIGHT, MAX_PENDING, MAX_PREFIX, MAX_PRIORITY, MAX_RATE, MAX_SLOTS, MAX_TOPIC_NAME,
};

/// A topic's definition. Build with [`TopicSpec::new`] and the setters;
/// every setter's value is checked by [`TopicSpec::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    /// Topic name: 1 to 100 of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// Ordering and merging rules.
    pub kind: TopicKind,
    /// Power of two in 1..=65536.
    pub slots: u32,
    /// How long a delivery may run before it is rolled back (ms).
    pub lease_ms: u64,
    /// Deliveries before a message goes to the dead letters.
    pub max_attempts: u32,
    /// First retry delay (ms); it doubles per attempt, with jitter.
    pub backoff_ms: u64,
    /// Longest retry delay (ms).
    pub backoff_max_ms: u64,
    /// Largest payload (bytes).
    pub max_payload_bytes: u64,
    /// Fixed-time: how far in the past (by the server clock) a due time may
    /// be and still be accepted, as due at once (ms).
    pub past_tolerance_ms: u64,
    /// Dead letters kept per slot; the oldest go first beyond it (0 = all).
    pub dead_letters_per_slot: u64,
    /// Dead letters older than this are dropped (ms; 0 = kept until the
    /// count limit). Trimmed by the scripts that touch the slot (a pop, a
    /// settle, a new dead letter): no sweeper process. Left out of the
    /// stored definition when 0, so definitions written before it existed
    /// still match.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dead_letter_ttl_ms: u64,
    /// Global rate limit: deliveries per second from this topic across all
    /// its consumers (0 = none). Enforced in Redis, one bucket per topic.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub rate_per_sec: u32,
    /// Deliveries the rate limit lets through at once after a quiet spell
    /// (the bucket's size; at least 1 when a rate is set).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub rate_burst: u32,
    /// Global in-flight cap: deliveries of this topic in flight at once
    /// across all its consumers (0 = none). Enforced in Redis with one
    /// permit per delivery, freed when its end is recorded or its lease
    /// would have run out.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_in_flight: u32,
    /// Bound: messages the topic may hold at once, waiting or in flight
    /// (0 = unbounded). A send that would add a new message beyond it is
    /// refused with [`ErrorKind::Full`]; a merge into a message the topic
    /// holds always succeeds. Dead letters do not count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_pending: u64,
    /// How long a handler may run on one delivery (ms; 0 = no limit): past
    /// it, [`ConsumerBuilder::run`](crate::ConsumerBuilder::run) drops the
    /// handler's future (`rmq consume --exec` kills the handler's process
    /// group) and retries the message with the error `timed out after …`.
    /// A consumer's own setting
    /// ([`ConsumerBuilder::handler_timeout`](crate::ConsumerBuilder::handler_timeout))
    /// comes first. Deliveries taken by hand are not timed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub handler_timeout_ms: u64,
    /// How a deep slot keeps its pending messages: [`PendingLayout::Flat`]
    /// (the default: the fastest) or [`PendingLayout::Compact`] (less
    /// memory). A change applies to a slot at its next write that finds
    /// it in the other layout: a flat slot of 2,000 or fewer becomes
    /// compact at once (a deeper one when it shrinks to 2,000), a compact
    /// one becomes flat when it shrinks to 40. Left out of the stored
    /// definition when flat, so definitions written before it existed
    /// still match.
    #[serde(default, skip_serializing_if = "PendingLayout::is_flat")]
    pub pending_layout: PendingLayout,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl TopicSpec {
    /// A definition with the default settings: 16 slots, 30 s lease,
    /// 16 attempts, backoff 1 s doubling up to 10 min, 1 MiB payloads,
    /// 1 s tolerance for past due times, 10,000 dead letters kept per slot
    /// (older ones are dropped and counted as `dead_dropped`: a poison
    /// storm cannot fill Redis silently).
    pub fn new(name: impl Into<String>, kind: TopicKind) -> Self {
        TopicSpec {
            name: name.into(),
            kind,
            slots: 16,
            lease_ms: 30_000,
            max_attempts: 16,
            backoff_ms: 1_000,
            backoff_max_ms: 600_000,
            max_payload_bytes: 1 << 20,
            past_tolerance_ms: 1_000,
            dead_letters_per_slot: 10_000,
            dead_letter_ttl_ms: 0,
            rate_per_sec: 0,
            rate_burst: 0,
            max_in_flight: 0,
            max_pending: 0,
            handler_timeout_ms: 0,
            pending_layout: PendingLayout::Flat,
        }
    }

    /// Sets the slot count (a power of two in 1..=65536).
    pub fn slots(mut self, slots: u32) -> Self {
        self.slots = slots;
        self
    }
    /// Sets the lease (visibility timeout) of a delivery.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease_ms = duration_ms(lease);
        self
    }
    /// Sets the number of deliveries before the dead letters.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }
    /// Sets the first retry delay and the longest one.
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff_ms = duration_ms(first);
        self.backoff_max_ms = duration_ms(max);
        self
    }
    /// Sets the largest payload.
    pub fn max_payload_bytes(mut self, n: u64) -> Self {
        self.max_payload_bytes = n;
        self
    }
    /// Sets the tolerance for fixed-time messages due in the past.
    pub fn past_tolerance(mut self, d: Duration) -> Self {
        self.past_tolerance_ms = duration_ms(d);
        self
    }
    /// Keeps at most `n` dead letters per slot (0 keeps all).
    pub fn dead_letters_per_slot(mut self, n: u64) -> Self {
        self.dead_letters_per_slot = n;
        self
    }
    /// Drops dead letters older than `ttl` (zero keeps them, up to the
    /// count limit).
    pub fn dead_letter_ttl(mut self, ttl: Duration) -> Self {
        self.dead_letter_ttl_ms = duration_ms(ttl);
        self
    }

    /// Limits deliveries from the topic, across all its consumers and
    /// processes, to `per_sec` a second, with up to `burst` at once after a
    /// quiet spell (`per_sec` 0 removes the limit). Running consumers
    /// follow a change of the rate at their next pop round.
    pub fn rate_limit(mut self, per_sec: u32, burst: u32) -> Self {
        self.rate_per_sec = per_sec;
        self.rate_burst = if per_sec == 0 { 0 } else { burst.max(1) };
        self
    }

    /// Caps the deliveries of the topic in flight at once, across all its
    /// consumers and processes, at `n` (0 removes the cap). A permit is
    /// taken per delivery before its pop and freed once its end is
    /// recorded (ack, nack, dead letter, release) or, when its consumer
    /// died, once its lease would have run out. Running consumers follow a
    /// change at their next pop round.
    pub fn max_in_flight(mut self, n: u32) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Bounds the topic at `n` messages held at once, waiting or in flight
    /// (0 removes the bound). A send that would add a new message beyond it
    /// is refused with [`ErrorKind::Full`] (retryable: room comes back as
    /// messages end); merges into a message the topic holds always succeed.
    /// Producers follow a change at their next send after their definition
    /// refreshes.
    pub fn max_pending(mut self, n: u64) -> Self {
        self.max_pending = n;
        self
    }

    /// Limits how long a handler may run on one delivery (zero: no
    /// limit); see [`TopicSpec::handler_timeout_ms`].
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.handler_timeout_ms = duration_ms(limit);
        self
    }

    /// Sets how a deep slot keeps its pending messages; see
    /// [`TopicSpec::pending_layout`](TopicSpec#structfield.pending_layout).
    pub fn pending_layout(mut self, layout: PendingLayout) -> Self {
        self.pending_layout = layout;
        self
    }

    /// The kind as the scripts that write a slot's pending set take it:
    /// the one-letter code, in upper case when the topic's deep slots are
    /// compact (`pending.lua`'s `pending_use`).
    pub(crate) fn script_kind(&self) -> &'static str {
        match (self.kind, self.pending_layout) {
            (kind, PendingLayout::Flat) => kind.code(),
            (TopicKind::RangeMerge, PendingLayout::Compact) => "R",
            (TopicKind::Priority, PendingLayout::Compact) => "P",
            (TopicKind::FixedTime, PendingLayout::Compact) => "F",
        }
    }

    /// Checks every field; the error says which and what is allowed.
    pub fn validate(&self) -> Result<()> {
        validate_topic_name(&self.name)?;
        if !(1..=MAX_SLOTS).contains(&self.slots) || !self.slots.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::InvalidSlotCount,
                format!(
                    "slot count {} is not a power of two between 1 and {MAX_SLOTS}: use 1, 2, 4, ... 65536",
                    self.slots
                ),
            ));
        }
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::InvalidArgument, what.to_string()))
            }
        };
        check(
            (1..=MAX_LEASE_MS).contains(&self.lease_ms),
            "the lease must be between 1 ms and 24 h (86400000 ms)",
        )?;
        check(
            (1..=MAX_ATTEMPTS).contains(&self.max_attempts),
            "max attempts must be between 1 and 1000000",
        )?;
        check(
            self.backoff_ms <= self.backoff_max_ms && self.backoff_max_ms <= MAX_BACKOFF_MS,
            "the backoff must be at most its maximum, and the maximum at most 7 days (604800000 ms)",
        )?;
        check(
            (1..=MAX_PAYLOAD_LIMIT_BYTES).contains(&self.max_payload_bytes),
            "the payload limit must be between 1 byte and 512 MiB (536870912 bytes)",
        )?;
        check(
            self.past_tolerance_ms <= MAX_PAST_TOLERANCE_MS,
            "the past tolerance must be at most 1 hour (3600000 ms)",
        )?;
        check(
            self.rate_per_sec <= MAX_RATE && self.rate_burst <= MAX_RATE,
            "the rate limit and its burst must be at most 10000000 a second",
        )?;
        check(
            (self.rate_per_sec == 0) == (self.rate_burst == 0),
            "a rate limit needs a burst of at least 1, and a burst needs a rate",
        )?;
        check(
            self.max_in_flight <= MAX_IN_FLIGHT,
            "the in-flight cap must be at most 1000000",
        )?;
        check(
            self.max_pending <= MAX_PENDING,
            "the bound (max pending) must be at most 1000000000000",
        )?;
        check(
            self.handler_timeout_ms <= MAX_HANDLER_TIMEOUT_MS,
            "the handler timeout must be at most 7 days (604800000 ms)",
        )?;
        Ok(())
    }

    pub(crate) fn to_json(&self) -> String {
        // Struct fields serialize in declaration order: canonical for equality checks.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn name_char_ok(c: char, extra: &[char]) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' || extra.contains(&c)
}

/// Checks a topic name: 1 to 100 of `A-Z a-z 0-9 _ . -`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let path_step = name == "." || name == "..";
    if name.is_empty()
        || name.len() > MAX_TOPIC_NAME
        || path_step
        || !name.chars().all(|c| name_char_ok(c, &[]))
    {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid topic name {name:?}: use 1 to {MAX_TOPIC_NAME} letters, digits, '_', '.' or '-' \
                 (no braces, colons or whitespace; not . or ..)"
            ),
        ));
    }
    Ok(())
}

/// Checks a key prefix: 1 to 64 of `A-Z a-z 0-9 _ . - :`.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty()
        || prefix.len() > MAX_PREFIX
        || !prefix.chars().all(|c| name_char_ok(c, &[':']))
    {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid key prefix {prefix:?}: use 1 to {MAX_PREFIX} letters, digits, '_', '.', '-' or ':'"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_break_keys_are_refused() {
        for bad in [
            "",
            "a b",
            "a{b",
            "a}b",
            "a:b",
            "tab\t",
            &"x".repeat(101),
            "é",
            // Path steps: in a URL they would name another resource.
            ".",
            "..",
        ] {
            let e = validate_topic_name(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
        validate_topic_name("orders.v2-eu_1").unwrap();
    }

    #[test]
    fn slot_counts_must_be_powers_of_two() {
        for bad in [0, 3, 12, 65_537, 131_072] {
            let e = TopicSpec::new("t", TopicKind::Priority)
                .slots(bad)
                .validate()
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidSlotCount, "{bad}");
        }
        for good in [1, 2, 16, 65_536] {
            TopicSpec::new("t", TopicKind::Priority)
                .slots(good)
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn definition_json_round_trips() {
        let spec = TopicSpec::new("t", TopicKind::RangeMerge).slots(4);
        let back: TopicSpec = serde_json::from_str(&spec.to_json()).unwrap();
        assert_eq!(back, spec);
        assert!(spec.to_json().contains("\"range-merge\""));
    }
}
