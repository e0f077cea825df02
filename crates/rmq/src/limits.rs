//! Every limit rmq enforces, in one place: the library checks against
//! these, the CLI's flags and the HTTP API take their ranges from them, and
//! the README's "Limits" table is held to them by a test. A value past a
//! limit is refused with [`ErrorKind::InvalidArgument`](crate::ErrorKind)
//! (or the kind its check names) and changes nothing; only a retry delay is
//! capped instead (see [`MAX_RETRY_DELAY_MS`]).
//!
//! A leaf: it imports nothing of the crate, so every module can use it.

/// The largest slot count (a power of two).
pub const MAX_SLOTS: u32 = 65_536;

/// The largest priority: priorities are `0..=MAX_PRIORITY` (21 bits, so that
/// priority and a 32-bit FIFO sequence fit exactly in a sorted-set score).
pub const MAX_PRIORITY: u32 = (1 << 21) - 1;

/// The longest topic name.
pub const MAX_TOPIC_NAME: usize = 100;

/// The longest key prefix.
pub const MAX_PREFIX: usize = 64;

/// The largest merge key (64 KiB). A key is a sorted-set member and travels
/// with every delivery; `rmq consume --exec` hands it to the handler in one
/// environment string, which Linux caps at 128 KiB.
pub const MAX_KEY_BYTES: usize = 64 * 1024;

/// The largest due time (Unix ms): 2^53 - 1, so that every score is exact.
pub const MAX_TIME_MS: i64 = (1 << 53) - 1;

/// The longest delay or range (100 years).
pub const MAX_SPAN_MS: u64 = 100 * 365 * 86_400_000;

/// The longest retry delay a nack may ask for (100 years): a longer one
/// counts as this long.
pub const MAX_RETRY_DELAY_MS: u64 = MAX_SPAN_MS;

/// The longest lease: a topic's, a take's and a lease extension's (1 day).
pub const MAX_LEASE_MS: u64 = 86_400_000;

/// The most a topic may accept a fixed-time message's due time in the past
/// (1 hour).
pub const MAX_PAST_TOLERANCE_MS: u64 = 3_600_000;

/// The longest retry backoff a topic may have (7 days).
pub const MAX_BACKOFF_MS: u64 = 7 * 86_400_000;

/// The longest handler timeout a topic or consumer may set (7 days).
pub const MAX_HANDLER_TIMEOUT_MS: u64 = 7 * 86_400_000;

/// The most delivery attempts a topic may allow.
pub const MAX_ATTEMPTS: u32 = 1_000_000;

/// The largest payload limit a topic may set (512 MiB, Redis' own limit
/// for a string).
pub const MAX_PAYLOAD_LIMIT_BYTES: u64 = 512 * 1024 * 1024;

/// The highest in-flight cap a topic may have.
pub const MAX_IN_FLIGHT: u32 = 1_000_000;

/// The highest bound a topic may have (`max_pending`).
pub const MAX_PENDING: u64 = 1_000_000_000_000;

/// The highest rate limit and burst a topic may have (per second).
pub const MAX_RATE: u32 = 10_000_000;

/// Messages per `send_batch` call: bounds one call's memory on both sides.
pub const MAX_BATCH: usize = 100_000;

/// Deliveries one take hands out at most.
pub const MAX_TAKE: usize = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    /// LIMITS.md's value for a constant.
    fn documented(name: &str) -> Option<u64> {
        let table = include_str!("../../../LIMITS.md");
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))?;
        row.split('|').nth(2)?.trim().parse().ok()
    }

    #[test]
    fn the_limits_table_states_every_constant_as_it_is() {
        let all: [(&str, u64); 19] = [
            ("MAX_SLOTS", u64::from(MAX_SLOTS)),
            ("MAX_PRIORITY", u64::from(MAX_PRIORITY)),
            ("MAX_TOPIC_NAME", MAX_TOPIC_NAME as u64),
            ("MAX_PREFIX", MAX_PREFIX as u64),
            ("MAX_KEY_BYTES", MAX_KEY_BYTES as u64),
            ("MAX_TIME_MS", MAX_TIME_MS.unsigned_abs()),
            ("MAX_SPAN_MS", MAX_SPAN_MS),
            ("MAX_RETRY_DELAY_MS", MAX_RETRY_DELAY_MS),
            ("MAX_LEASE_MS", MAX_LEASE_MS),
            ("MAX_PAST_TOLERANCE_MS", MAX_PAST_TOLERANCE_MS),
            ("MAX_BACKOFF_MS", MAX_BACKOFF_MS),
            ("MAX_HANDLER_TIMEOUT_MS", MAX_HANDLER_TIMEOUT_MS),
            ("MAX_ATTEMPTS", u64::from(MAX_ATTEMPTS)),
            ("MAX_PAYLOAD_LIMIT_BYTES", MAX_PAYLOAD_LIMIT_BYTES),
            ("MAX_IN_FLIGHT", u64::from(MAX_IN_FLIGHT)),
            ("MAX_PENDING", MAX_PENDING),
            ("MAX_RATE", u64::from(MAX_RATE)),
            ("MAX_BATCH", MAX_BATCH as u64),
            ("MAX_TAKE", MAX_TAKE as u64),
        ];
        for (name, value) in all {
            assert_eq!(documented(name), Some(value), "LIMITS.md's row for {name}");
        }
        let rows = include_str!("../../../LIMITS.md")
            .lines()
            .filter(|l| l.starts_with("| `MAX_"))
            .count();
        assert_eq!(
            rows,
            all.len(),
            "a row in LIMITS.md for a constant not checked here"
        );
        let declared = include_str!("limits.rs")
            .lines()
            .filter(|l| l.starts_with("pub const MAX_"))
            .count();
        assert_eq!(declared, all.len(), "a constant not checked here");
    }
}
