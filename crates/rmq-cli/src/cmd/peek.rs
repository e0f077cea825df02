//! `rmq peek`: the next messages in consumption order, taking nothing.
//!
//! Priority topics list the highest priority first (FIFO among equals);
//! time-based topics the earliest due time first. Messages of several slots
//! are merged by that order, as the library's `Topic::peek` returns them.

use clap::Args;
use serde::Serialize;

use crate::output::{self, Out};
use crate::{connect, CliResult, Global};

#[derive(Debug, Args)]
pub struct PeekArgs {
    /// Topic name
    pub topic: String,
    /// How many messages at most
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
}

#[derive(Serialize)]
struct PendingJson {
    key: String,
    payload: String,
    slot: u32,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

pub async fn run(g: &Global, a: PeekArgs) -> CliResult {
    let out = Out { json: g.json };
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let pending = topic.peek(a.limit).await?;
    if out.json {
        for p in &pending {
            out.json(&PendingJson {
                key: output::lossy(&p.key),
                payload: output::lossy(&p.payload),
                slot: p.slot,
                attempts: p.attempts,
                priority: p.priority,
                due_ms: p.due_ms,
            })?;
        }
        return Ok(());
    }
    if pending.is_empty() {
        output::note(&format!("topic {:?} has no pending messages", a.topic));
        return Ok(());
    }
    let now = output::now_ms();
    let time_based = topic.kind().is_time_based();
    let rows: Vec<Vec<String>> = pending
        .iter()
        .map(|p| {
            let order = match (p.priority, p.due_ms) {
                (Some(pr), _) => pr.to_string(),
                (None, Some(due)) if due > now => {
                    format!("{} (in {} ms)", output::clock(due), due - now)
                }
                (None, Some(due)) => format!("{} (due)", output::clock(due)),
                (None, None) => "-".into(),
            };
            vec![
                output::cell(&p.key, 40),
                order,
                p.slot.to_string(),
                p.attempts.to_string(),
                output::cell(&p.payload, 60),
            ]
        })
        .collect();
    output::table(
        &[
            "KEY",
            if time_based { "DUE" } else { "PRIORITY" },
            "SLOT",
            "ATTEMPTS",
            "PAYLOAD",
        ],
        &rows,
    )
}
