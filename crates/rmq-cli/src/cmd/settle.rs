//! `rmq ack`, `rmq nack` and `rmq extend`: settle deliveries taken with
//! `rmq take` (or over HTTP) by their receipts, given as arguments or one
//! per line on stdin. Every receipt is checked before any is settled: one
//! that is not of this topic, or was changed, settles nothing (exit 2).
//! Then one line per receipt, in order, says how it came out; any that did
//! not come out as asked (`stale`: its lease ran out or it was settled
//! already; `fenced`; `unknown`) makes the exit code 1.

use std::io::BufRead;
use std::time::Duration;

use clap::Args;
use rmq::{Ending, Receipt};
use serde_json::json;

use crate::output::Out;
use crate::{connect, CliError, CliResult, Global};

const AFTER: &str = "Outcomes: acked, retrying, dead, extended, superseded (a \
    duplicate sent while it was in flight took its place), cancelled, stale \
    (its lease ran out and the message came back, or it was settled already: \
    nothing changed), fenced (serial mode: the slot moved on), unknown (Redis \
    failed; settle again). Exit code 0 when every receipt came out as asked, \
    1 otherwise, 2 when a receipt is not of this topic (nothing settled).";

#[derive(Debug, Args)]
#[command(after_help = AFTER)]
pub struct AckArgs {
    /// Topic name
    pub topic: String,
    /// Receipts from `rmq take` or HTTP take (none: one per line on stdin)
    pub receipts: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = AFTER)]
pub struct NackArgs {
    /// Topic name
    pub topic: String,
    /// Receipts from `rmq take` or HTTP take (none: one per line on stdin)
    pub receipts: Vec<String>,
    /// Retry after this many ms, at most 3153600000000 (100 years)
    /// (default: the topic's backoff)
    #[arg(long, value_name = "MS", conflicts_with = "dead",
          value_parser = clap::value_parser!(u64).range(0..=rmq::limits::MAX_RETRY_DELAY_MS))]
    pub retry_after: Option<u64>,
    /// Failed for good: straight to the dead letters, no retry
    #[arg(long)]
    pub dead: bool,
    /// Why it failed (kept with a dead letter)
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
}

#[derive(Debug, Args)]
#[command(after_help = AFTER)]
pub struct ExtendArgs {
    /// Topic name
    pub topic: String,
    /// Receipts from `rmq take` or HTTP take (none: one per line on stdin)
    pub receipts: Vec<String>,
    /// The lease now ends this many ms from now, 1 to 86400000 (24 h)
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=rmq::limits::MAX_LEASE_MS))]
    pub lease: u64,
}

pub async fn ack(g: &Global, a: AckArgs) -> CliResult {
    settle(g, &a.topic, a.receipts, Ending::Ack).await
}

pub async fn nack(g: &Global, a: NackArgs) -> CliResult {
    let ending = if a.dead {
        Ending::Dead {
            error: a.error.unwrap_or_else(|| "rmq nack --dead".into()),
        }
    } else {
        Ending::Nack {
            delay: a.retry_after.map(Duration::from_millis),
            error: a.error.unwrap_or_else(|| "rmq nack".into()),
        }
    };
    settle(g, &a.topic, a.receipts, ending).await
}

pub async fn extend(g: &Global, a: ExtendArgs) -> CliResult {
    let ending = Ending::Extend(Duration::from_millis(a.lease));
    settle(g, &a.topic, a.receipts, ending).await
}

/// The receipts given, or one per line on stdin (blank lines skipped).
fn receipts(given: Vec<String>) -> CliResult<Vec<String>> {
    if !given.is_empty() {
        return Ok(given);
    }
    let mut out = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| CliError::runtime(format!("cannot read stdin: {e}")))?;
        let line = line.trim();
        if !line.is_empty() {
            out.push(line.to_string());
        }
    }
    if out.is_empty() {
        return Err(CliError::usage(
            "no receipts: give them as arguments or one per line on stdin",
        ));
    }
    Ok(out)
}

async fn settle(g: &Global, topic_name: &str, given: Vec<String>, ending: Ending) -> CliResult {
    let out = Out { json: g.json };
    let texts = receipts(given)?;
    let (client, topic) = connect::topic(g, topic_name).await?;
    let key = client.receipt_key().await?;
    let opened = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            key.open(topic_name, t).map_err(|e| {
                CliError::usage(format!("receipt {}: {e}; nothing was settled", i + 1))
            })
        })
        .collect::<CliResult<Vec<Receipt>>>()?;
    let asked = ending.outcome_word(&Ok(rmq::Settled::Done));
    let batch = opened.into_iter().map(|r| (r, ending.clone())).collect();
    let mut missed = 0;
    for (i, r) in topic.settle_receipts(batch).await.into_iter().enumerate() {
        let word = ending.outcome_word(&r);
        let as_asked = word == asked || (asked == "retrying" && word == "dead");
        missed += usize::from(!as_asked);
        let error = r.err().map(|e| e.to_string());
        out.either(
            &json!({ "receipt": i + 1, "outcome": word, "error": error }),
            || match &error {
                Some(e) if word == "unknown" => format!("{word}: {e}"),
                _ => word.to_string(),
            },
        )?;
    }
    if missed > 0 {
        return Err(CliError::runtime(format!(
            "{missed} of {} receipts did not come out as {asked}",
            texts.len()
        )));
    }
    Ok(())
}
