//! `rmq reschedule`: a waiting message's new due time or priority.
//!
//! The payload and attempts stay. Priority topics take `--priority` (the
//! message goes to the back of its new priority's FIFO); time-based topics
//! take `--at` or `--delay`. A message in flight cannot be rescheduled, but
//! the duplicate parked behind it can. Refusals (wrong kind, a due time in
//! the past, no waiting message) exit with 2 and change nothing. With
//! `--batch`, JSON lines on stdin (`{"key": .., "at"|"delay"|"priority": ..,
//! "slot_basis": ..}`) are all checked first, then rescheduled one by one;
//! each key's answer is printed (a key with nothing waiting is an answer,
//! not a failure).

use std::io::Read;

use clap::Args;
use rmq::{Moved, Reschedule};
use serde::{Deserialize, Serialize};

use super::key_arg;
use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};
use rmq_serve::views::KeyField;

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("to").required(true).args(["at", "delay", "priority", "batch"]))]
#[command(group = clap::ArgGroup::new("the_key").args(["key", "key_text", "key_hex", "key_base64", "batch"]).required(true))]
pub struct RescheduleArgs {
    /// Topic name
    pub topic: String,
    /// Merge key (or --key, --key-hex, --key-base64)
    pub key: Option<String>,
    #[command(flatten)]
    pub key_flags: key_arg::KeyFlags,
    /// Read JSON lines from stdin: {"key": .., "at"|"delay"|"priority": ..,
    /// "slot_basis": ..}
    #[arg(long)]
    pub batch: bool,
    /// Time-based topics: due at this Unix time in ms (server clock)
    #[arg(
        long,
        value_name = "UNIX_MS",
        group = "to",
        allow_negative_numbers = true
    )]
    pub at: Option<i64>,
    /// Time-based topics: due this many ms from now (server clock)
    #[arg(long, value_name = "MS", group = "to")]
    pub delay: Option<u64>,
    /// Priority topics: the new priority, 0..=2097151, bigger first
    #[arg(long, value_name = "N", group = "to")]
    pub priority: Option<u32>,
    /// Slot basis the message was sent with (default: the merge key)
    #[arg(long, value_name = "B")]
    pub slot_basis: Option<String>,
}

#[derive(Serialize)]
struct RescheduledJson {
    #[serde(flatten)]
    key: KeyField,
    rescheduled: bool,
    slot: u32,
    moved: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

/// One line of `--batch` input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    key: String,
    at: Option<i64>,
    delay: Option<u64>,
    priority: Option<u32>,
    slot_basis: Option<String>,
}

/// A key `--batch` could not reschedule.
#[derive(Serialize)]
struct RefusedJson {
    #[serde(flatten)]
    key: KeyField,
    rescheduled: bool,
    error: String,
}

fn new_place(at: Option<i64>, delay: Option<u64>, priority: Option<u32>) -> Option<Reschedule> {
    match (at, delay, priority) {
        (Some(ms), None, None) => Some(Reschedule::At(ms)),
        (None, Some(ms), None) => Some(Reschedule::Delay(ms)),
        (None, None, Some(p)) => Some(Reschedule::Priority(p)),
        _ => None,
    }
}

fn moved_name(m: Moved) -> &'static str {
    match m {
        Moved::Pending => "pending",
        Moved::RetryWaiting => "retry-waiting",
        Moved::Parked => "parked",
    }
}

pub async fn run(g: &Global, a: RescheduleArgs) -> CliResult {
    let out = Out { json: g.json };
    if a.batch {
        return batch(g, out, &a).await;
    }
    let key = a.key_flags.bytes(a.key.as_deref())?;
    let Some(to) = new_place(a.at, a.delay, a.priority) else {
        return Err(CliError::usage("give one of --at, --delay and --priority"));
    };
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let basis = a
        .slot_basis
        .clone()
        .map_or_else(|| key.clone(), String::into_bytes);
    let r = topic.reschedule_in(&key, &basis, to).await?;
    let moved = moved_name(r.moved);
    out.either(
        &RescheduledJson {
            key: KeyField::of(&key),
            rescheduled: true,
            slot: r.slot,
            moved,
            priority: r.priority,
            due_ms: r.due_ms,
        },
        || {
            let place = match (r.priority, r.due_ms) {
                (Some(p), _) => format!("priority {p}"),
                (None, Some(due)) => format!("due {}", output::clock(due)),
                (None, None) => String::new(),
            };
            format!(
                "rescheduled the {moved} message of {:?} (slot {}): {place}",
                String::from_utf8_lossy(&key),
                r.slot
            )
        },
    )
}

/// `--batch`: every line checked first, then each key rescheduled.
async fn batch(g: &Global, out: Out, a: &RescheduleArgs) -> CliResult {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| CliError::usage(format!("could not read stdin as UTF-8 text: {e}")))?;
    let mut items = Vec::new();
    for (n, text) in input
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: String| {
            CliError::usage(format!("line {}: {why}; nothing was rescheduled", n + 1))
        };
        let line: Line = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let to = new_place(line.at, line.delay, line.priority)
            .ok_or_else(|| bad("give exactly one of at, delay and priority".into()))?;
        if line.key.is_empty() {
            return Err(bad("the key is empty".into()));
        }
        items.push((line, to));
    }
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let (mut done, mut refused) = (0usize, 0usize);
    for (line, to) in &items {
        let basis = line.slot_basis.as_deref().unwrap_or(&line.key);
        match topic
            .reschedule_in(line.key.as_bytes(), basis.as_bytes(), *to)
            .await
        {
            Ok(r) => {
                done += 1;
                if out.json {
                    out.json(&RescheduledJson {
                        key: KeyField::of(line.key.as_bytes()),
                        rescheduled: true,
                        slot: r.slot,
                        moved: moved_name(r.moved),
                        priority: r.priority,
                        due_ms: r.due_ms,
                    })?;
                }
            }
            Err(e)
                if e.kind() == rmq::ErrorKind::NotWaiting
                    || e.kind() == rmq::ErrorKind::PastDue =>
            {
                refused += 1;
                if out.json {
                    out.json(&RefusedJson {
                        key: KeyField::of(line.key.as_bytes()),
                        rescheduled: false,
                        error: e.to_string(),
                    })?;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !out.json {
        output::line(&format!(
            "{} keys: {done} rescheduled, {refused} refused (nothing waiting, or due in the past)",
            items.len()
        ))?;
    }
    Ok(())
}
