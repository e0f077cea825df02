//! The flags that define a topic (`create`) and change its settings
//! (`update`), and the definition they make.

use std::time::Duration;

use clap::{Args, ValueEnum};
use rmq::{PendingLayout, TopicKind, TopicSpec};

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// Topic name
    pub topic: String,
    #[command(flatten)]
    pub settings: Settings,
    /// Refused: a topic's kind never changes (create a new topic)
    #[arg(long, value_name = "KIND", hide = true)]
    pub kind: Option<String>,
    /// Refused: a topic's slot count never changes (create a new topic)
    #[arg(long, value_name = "N", hide = true)]
    pub slots: Option<u32>,
}

/// The topic kinds, as the command line spells them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    /// Highest priority first, FIFO among equals
    Priority,
    /// Due at an exact time
    FixedTime,
    /// Due a range after the first send; duplicates merge until then
    RangeMerge,
}

impl From<KindArg> for TopicKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Priority => TopicKind::Priority,
            KindArg::FixedTime => TopicKind::FixedTime,
            KindArg::RangeMerge => TopicKind::RangeMerge,
        }
    }
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Topic name (letters, digits, '_', '.', '-')
    pub topic: String,
    /// How the topic orders and merges messages
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// Slot count, a power of two, 1 to 65536 [default: 16]
    #[arg(long, value_name = "N")]
    pub slots: Option<u32>,
    #[command(flatten)]
    pub settings: Settings,
}

/// The settings that may change after creation (`topic update`).
#[derive(Debug, Args)]
pub struct Settings {
    /// Lease of a delivery in ms, 1 to 86400000 (24 h) [default: 30000]
    #[arg(long, value_name = "MS")]
    pub lease: Option<u64>,
    /// Deliveries before a message becomes a dead letter, 1 to 1000000
    /// [default: 16]
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// First retry delay in ms, doubling per attempt; at most --backoff-max
    /// [default: 1000]
    #[arg(long, value_name = "MS")]
    pub backoff: Option<u64>,
    /// Longest retry delay in ms, at most 604800000 (7 days) [default: 600000]
    #[arg(long, value_name = "MS")]
    pub backoff_max: Option<u64>,
    /// Largest payload in bytes, 1 to 536870912 (512 MiB) [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_payload: Option<u64>,
    /// Fixed-time topics: how far in the past a due time may be and still
    /// be accepted (as due at once), in ms, at most 3600000 (1 hour)
    /// [default: 1000]
    #[arg(long, value_name = "MS")]
    pub past_tolerance: Option<u64>,
    /// Dead letters kept per slot, the oldest dropped (and counted) beyond;
    /// 0 keeps all [default: 10000]
    #[arg(long, value_name = "N")]
    pub dead_letters_per_slot: Option<u64>,
    /// Dead letters older than this (ms) are dropped; 0 keeps them (up to
    /// the count) [default: 0]
    #[arg(long, value_name = "MS")]
    pub dead_letter_ttl: Option<u64>,
    /// Global rate limit: deliveries a second across all consumers, as N
    /// or N/s, at most 10000000/s; 0 removes it [default: none]
    #[arg(long, value_name = "N/s", value_parser = parse_rate)]
    pub rate: Option<u32>,
    /// Deliveries the rate limit lets through at once after a quiet spell
    /// (at most 10000000) [default: a tenth of the rate, at least 1]
    #[arg(long, value_name = "N", requires = "rate")]
    pub burst: Option<u32>,
    /// Global in-flight cap: deliveries in flight at once across all
    /// consumers, at most 1000000; 0 removes it [default: none]
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<u32>,
    /// Bound: messages the topic may hold at once, waiting or in flight; a
    /// send of a new message beyond it is refused (exit code 75, retry
    /// later); merges always succeed; at most 1000000000000; 0 removes it
    /// [default: none]
    #[arg(long, value_name = "N")]
    pub max_pending: Option<u64>,
    /// How long a handler (`rmq consume --exec`, a library consumer's
    /// `run`) may run on one delivery, in ms: past it the handler is
    /// stopped and the message retried ("timed out after ..."); a
    /// consumer's own --timeout comes first; at most 604800000 (7 days); 0
    /// removes it [default: none]
    #[arg(long, value_name = "MS")]
    pub handler_timeout: Option<u64>,
    /// How a slot keeps its pending messages once it holds more than 120:
    /// flat (the fastest: a take touches one key however deep the slot,
    /// ~280 B of Redis a message) or compact (~190 B a message, 20-50%
    /// more Redis work a message while a slot is that deep); a change
    /// applies to each slot at its next write [default: flat]
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub pending_layout: Option<LayoutArg>,
}

/// The pending layouts, as the command line spells them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LayoutArg {
    /// One sorted set per slot, however deep
    Flat,
    /// Small sorted sets once a slot holds more than 120
    Compact,
}

impl From<LayoutArg> for PendingLayout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Flat => PendingLayout::Flat,
            LayoutArg::Compact => PendingLayout::Compact,
        }
    }
}

/// `500`, `500/s`, `30000/min`: deliveries a second.
fn parse_rate(s: &str) -> Result<u32, String> {
    let (n, per) = s.split_once('/').unwrap_or((s, "s"));
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate: use N, N/s or N/min"))?;
    match per.trim() {
        "s" | "sec" => Ok(n),
        "m" | "min" if n.is_multiple_of(60) => Ok(n / 60),
        "m" | "min" => Err(format!("{s:?}: a rate per minute must be a multiple of 60")),
        other => Err(format!("{s:?}: unknown unit {other:?}: use /s or /min")),
    }
}

impl Settings {
    /// `spec` with the settings given here.
    pub fn apply(&self, mut spec: TopicSpec) -> TopicSpec {
        let ms = Duration::from_millis;
        if let Some(v) = self.lease {
            spec = spec.lease(ms(v));
        }
        if let Some(n) = self.max_attempts {
            spec = spec.max_attempts(n);
        }
        if self.backoff.is_some() || self.backoff_max.is_some() {
            let first = self.backoff.unwrap_or(spec.backoff_ms);
            let max = self.backoff_max.unwrap_or(spec.backoff_max_ms);
            spec = spec.backoff(ms(first), ms(max));
        }
        if let Some(n) = self.max_payload {
            spec = spec.max_payload_bytes(n);
        }
        if let Some(v) = self.past_tolerance {
            spec = spec.past_tolerance(ms(v));
        }
        if let Some(n) = self.dead_letters_per_slot {
            spec = spec.dead_letters_per_slot(n);
        }
        if let Some(v) = self.dead_letter_ttl {
            spec = spec.dead_letter_ttl(ms(v));
        }
        if let Some(rate) = self.rate {
            let burst = self.burst.unwrap_or((rate / 10).max(1));
            spec = spec.rate_limit(rate, burst);
        }
        if let Some(n) = self.max_in_flight {
            spec = spec.max_in_flight(n);
        }
        if let Some(n) = self.max_pending {
            spec = spec.max_pending(n);
        }
        if let Some(v) = self.handler_timeout {
            spec = spec.handler_timeout(ms(v));
        }
        if let Some(l) = self.pending_layout {
            spec = spec.pending_layout(l.into());
        }
        spec
    }

    pub(super) fn any(&self) -> bool {
        self.lease.is_some()
            || self.max_attempts.is_some()
            || self.backoff.is_some()
            || self.backoff_max.is_some()
            || self.max_payload.is_some()
            || self.past_tolerance.is_some()
            || self.dead_letters_per_slot.is_some()
            || self.dead_letter_ttl.is_some()
            || self.rate.is_some()
            || self.max_in_flight.is_some()
            || self.max_pending.is_some()
            || self.handler_timeout.is_some()
            || self.pending_layout.is_some()
    }
}

impl CreateArgs {
    /// The definition these options ask for.
    pub fn spec(&self) -> TopicSpec {
        let mut spec = TopicSpec::new(self.topic.clone(), self.kind.into());
        if let Some(n) = self.slots {
            spec = spec.slots(n);
        }
        self.settings.apply(spec)
    }
}

#[cfg(test)]
mod rate_tests {
    use super::parse_rate;

    #[test]
    fn rates_read_per_second_or_per_minute_and_refuse_the_rest() {
        assert_eq!(parse_rate("500"), Ok(500));
        assert_eq!(parse_rate("500/s"), Ok(500));
        assert_eq!(parse_rate("600/min"), Ok(10));
        for bad in ["", "fast", "-1/s", "10/h", "61/min", "5000000000"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}
