//! How a handler's delivery ends, whoever decided it (an `--exec`
//! handler's exit, a `--worker`'s result line, a timeout), and the one way
//! to end it by that verdict (reporting to the message store as it goes).

use std::time::Duration;

use rmq::Delivery;

use super::{ack, dead, retry, Ctx, Ended};

/// The longest retry delay a handler may ask for (7 days, the longest
/// backoff a topic may have).
const MAX_RETRY_AFTER_MS: u64 = 7 * 86_400_000;

/// How a delivery ends.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    Ack,
    /// Retried after `after` (None: the topic's backoff).
    Retry {
        after: Option<Duration>,
        error: String,
    },
    Dead {
        error: String,
    },
}

impl Verdict {
    /// A retry after the topic's backoff.
    pub(super) fn retry(error: impl Into<String>) -> Verdict {
        Verdict::Retry {
            after: None,
            error: error.into(),
        }
    }

    /// Ends `d` by this verdict; returns how it ended and its error.
    pub(super) async fn end(self, ctx: &Ctx, d: Delivery) -> (Ended, Option<String>) {
        match self {
            Verdict::Ack => (ack(ctx, d).await, None),
            Verdict::Retry { after, error } => (retry(ctx, d, after, &error).await, Some(error)),
            Verdict::Dead { error } => (dead(ctx, d, &error).await, Some(error)),
        }
    }
}

/// A retry delay asked for in milliseconds, capped at 7 days.
pub(super) fn delay_ms(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_RETRY_AFTER_MS))
}

/// `{"retry_after_ms": N}` (other fields ignored): the delay asked for.
pub(super) fn retry_after(line: &str) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    Some(delay_ms(v.get("retry_after_ms")?.as_u64()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_a_retry_request_is_ignored() {
        for line in [
            "done",
            "{}",
            r#"{"retry_after_ms": -1}"#,
            r#"{"retry_after_ms": "5"}"#,
        ] {
            assert_eq!(retry_after(line), None, "{line}");
        }
        assert_eq!(
            retry_after(r#"{"retry_after_ms": 99999999999}"#),
            Some(Duration::from_millis(MAX_RETRY_AFTER_MS))
        );
    }
}
