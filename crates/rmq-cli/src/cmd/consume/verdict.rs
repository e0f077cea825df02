//! How a delivery ends, whoever decided it (an `--exec` handler's exit, a
//! `--worker`'s result line, a timeout, `--fail`, a signal): the verdict,
//! and the calls that end a delivery by it, each reporting to the message
//! store (`--store-pg`) as it goes and saying what went wrong.

use std::time::Duration;

use rmq::{Delivery, Settled};

use super::{Ctx, Ended};
use crate::output;

/// The longest retry delay a handler may ask for: the library's (a
/// longer one counts as this long).
const MAX_RETRY_AFTER_MS: u64 = rmq::limits::MAX_RETRY_DELAY_MS;

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

/// A retry delay asked for in milliseconds, capped at 100 years.
pub(super) fn delay_ms(ms: u64) -> Duration {
    Duration::from_millis(ms.min(MAX_RETRY_AFTER_MS))
}

/// `{"retry_after_ms": N}` (other fields ignored): the delay asked for.
pub(super) fn retry_after(line: &str) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    Some(delay_ms(v.get("retry_after_ms")?.as_u64()?))
}

/// Gives the message back untouched (the attempt is not counted).
pub(super) async fn release(d: Delivery) -> Ended {
    match d.release().await {
        Ok(()) => Ended::Released,
        Err(e) => {
            output::warn_line(&format!("could not release a message: {e}"));
            Ended::Failed
        }
    }
}

/// Done: acked.
pub(super) async fn ack(ctx: &Ctx, d: Delivery) -> Ended {
    let m = ctx.finisher.as_ref().map(|_| d.message().clone());
    match d.ack().await {
        Ok(()) => {
            if let (Some(f), Some(m)) = (&ctx.finisher, m) {
                f.acked(&m);
            }
            Ended::Acked
        }
        Err(e) => {
            output::warn_line(&format!("could not ack a message: {e}"));
            Ended::Failed
        }
    }
}

/// A failure: retried after the topic's backoff.
pub(super) async fn nack(ctx: &Ctx, d: Delivery, error: &str) -> Ended {
    retry(ctx, d, None, error).await
}

/// A failure: retried after `after` (None: the topic's backoff), or a
/// dead letter after the last attempt.
pub(super) async fn retry(ctx: &Ctx, d: Delivery, after: Option<Duration>, error: &str) -> Ended {
    let m = ctx.finisher.as_ref().map(|_| d.message().clone());
    match d.nack(after, error).await {
        Ok(Settled::Dead) => {
            if let (Some(f), Some(m)) = (&ctx.finisher, m) {
                f.dead(&m, error);
            }
            Ended::Dead
        }
        Ok(Settled::Cancelled) => {
            if let (Some(f), Some(m)) = (&ctx.finisher, m) {
                f.cancelled(&m);
            }
            Ended::Cancelled
        }
        Ok(_) => Ended::Retried,
        Err(e) => {
            output::warn_line(&format!("could not nack a message: {e}"));
            Ended::Failed
        }
    }
}

/// A failure for good: straight to the dead letters.
pub(super) async fn dead(ctx: &Ctx, d: Delivery, error: &str) -> Ended {
    let m = ctx.finisher.as_ref().map(|_| d.message().clone());
    match d.dead(error).await {
        Ok(Settled::Cancelled) => {
            if let (Some(f), Some(m)) = (&ctx.finisher, m) {
                f.cancelled(&m);
            }
            Ended::Cancelled
        }
        Ok(_) => {
            if let (Some(f), Some(m)) = (&ctx.finisher, m) {
                f.dead(&m, error);
            }
            Ended::Dead
        }
        Err(e) => {
            output::warn_line(&format!("could not dead-letter a message: {e}"));
            Ended::Failed
        }
    }
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
        // Past the library's limit: capped at it, as the library caps.
        assert_eq!(
            retry_after(r#"{"retry_after_ms": 99999999999999}"#),
            Some(Duration::from_millis(MAX_RETRY_AFTER_MS))
        );
        assert_eq!(
            retry_after(r#"{"retry_after_ms": 99999999999}"#),
            Some(Duration::from_millis(99_999_999_999))
        );
    }
}
