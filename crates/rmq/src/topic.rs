//! Topics: a name, one kind, a power-of-two slot count and the settings of
//! consumption. The definition is stored in Redis (the prefix's topic index)
//! so every process agrees on it; a second definition must be identical.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// The largest slot count.
pub const MAX_SLOTS: u32 = 65_536;
/// The largest priority: priorities are `0..=MAX_PRIORITY` (21 bits, so that
/// priority and a 32-bit FIFO sequence fit exactly in a sorted-set score).
pub const MAX_PRIORITY: u32 = (1 << 21) - 1;
/// The longest topic name.
pub const MAX_TOPIC_NAME: usize = 100;
/// The longest key prefix.
pub const MAX_PREFIX: usize = 64;

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
            (1..=86_400_000).contains(&self.lease_ms),
            "the lease must be between 1 ms and 24 h",
        )?;
        check(
            (1..=1_000_000).contains(&self.max_attempts),
            "max attempts must be between 1 and 1000000",
        )?;
        check(
            self.backoff_ms <= self.backoff_max_ms && self.backoff_max_ms <= 7 * 86_400_000,
            "the backoff must be at most its maximum, and the maximum at most 7 days",
        )?;
        check(
            (1..=512 * 1024 * 1024).contains(&self.max_payload_bytes),
            "the payload limit must be between 1 byte and 512 MiB",
        )?;
        check(
            self.past_tolerance_ms <= 3_600_000,
            "the past tolerance must be at most 1 hour",
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
    if name.is_empty() || name.len() > MAX_TOPIC_NAME || !name.chars().all(|c| name_char_ok(c, &[]))
    {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid topic name {name:?}: use 1 to {MAX_TOPIC_NAME} letters, digits, '_', '.' or '-' \
                 (no braces, colons or whitespace)"
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

/// A defined topic: send to it, consume from it, inspect it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Topic {
    pub(crate) ctx: std::sync::Arc<crate::context::Context>,
    pub(crate) spec: std::sync::Arc<TopicSpec>,
    pub(crate) channel: std::sync::Arc<str>,
    pub(crate) args: std::sync::Arc<crate::scripts::TopicArgs>,
    /// Durable sends: WAIT for this many replicas after each send.
    pub(crate) durability: Option<crate::conn::WaitFor>,
}

impl Topic {
    pub(crate) fn new(ctx: std::sync::Arc<crate::context::Context>, spec: TopicSpec) -> Topic {
        let channel = crate::keys::wake_channel(&ctx.prefix, &spec.name).into();
        let args = std::sync::Arc::new(crate::scripts::TopicArgs {
            kind: spec.kind.code(),
            lease: spec.lease_ms.to_string(),
            max_attempts: spec.max_attempts.to_string(),
            backoff: spec.backoff_ms.to_string(),
            backoff_max: spec.backoff_max_ms.to_string(),
            dead_max: spec.dead_letters_per_slot.to_string(),
        });
        Topic {
            ctx,
            spec: std::sync::Arc::new(spec),
            channel,
            args,
            durability: None,
        }
    }

    /// A handle on the same topic whose sends are durable: each send
    /// returns only after `replicas` replicas acknowledged its write (Redis
    /// `WAIT` on the connection that wrote it), or fails with
    /// [`ErrorKind::NotReplicated`](crate::ErrorKind::NotReplicated) when
    /// fewer did within `timeout` (at most 60 s; the write stays on the
    /// master; sending again is safe, it merges). Durable sends use a
    /// connection of their own, since `WAIT` holds the connection it runs
    /// on: consumers are never held up by a slow replica. On Redis 7.2+
    /// with the AOF on, `WAITAOF 1 n` is used instead: the write is also
    /// fsynced on the master and on the replicas that count. Redis replication stays asynchronous: a
    /// durable send survives the failover of its master to a replica that
    /// acknowledged it; a plain send may be lost by a failover.
    pub fn durable(&self, replicas: u32, timeout: std::time::Duration) -> Topic {
        let mut t = self.clone();
        t.durability = Some(crate::conn::WaitFor {
            aof: self.ctx.redis.waitaof,
            replicas,
            timeout_ms: u64::try_from(timeout.min(crate::conn::MAX_WAIT).as_millis())
                .unwrap_or(60_000)
                .max(1),
        });
        t
    }

    /// The definition.
    pub fn spec(&self) -> &TopicSpec {
        &self.spec
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The kind.
    pub fn kind(&self) -> TopicKind {
        self.spec.kind
    }

    /// The slot a message with this slot basis goes to.
    pub fn slot_of(&self, basis: &[u8]) -> u32 {
        crate::slot::slot_of(basis, self.spec.slots)
    }

    /// The Redis keys that hold slot `slot` (all under one hash tag), for
    /// operators: `MEMORY USAGE`, ACL checks, finding a slot's node.
    pub fn keys_of_slot(&self, slot: u32) -> Vec<String> {
        self.slot_keys(slot).into()
    }

    pub(crate) fn slot_keys(&self, slot: u32) -> [String; 10] {
        crate::keys::slot_keys(&self.ctx.prefix, &self.spec.name, slot, self.spec.slots)
    }

    /// The channel on which scripts working on `slot` announce a new head:
    /// the topic's one channel on a single node, the sharded channel of the
    /// slot's hash tag on a cluster.
    pub(crate) fn channel_for(&self, slot: u32) -> std::borrow::Cow<'_, str> {
        if self.ctx.is_cluster() {
            let tag = crate::keys::slot_tag(&self.spec.name, slot, self.spec.slots);
            crate::keys::sharded_wake_channel(&self.ctx.prefix, &self.spec.name, tag).into()
        } else {
            std::borrow::Cow::Borrowed(&self.channel)
        }
    }

    /// Every distinct channel of the topic (see [`channel_for`](Self::channel_for)).
    pub(crate) fn channels(&self) -> Vec<String> {
        let mut all: Vec<String> = (0..self.spec.slots)
            .map(|s| self.channel_for(s).into_owned())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    pub(crate) fn redis(&self) -> &crate::conn::Redis {
        &self.ctx.redis
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &str {
        &self.ctx.prefix
    }
}
