//! `rmq topic list` and `rmq topic show`: definitions with their totals,
//! as text or JSON, and the one-line description the other commands print.

use rmq::{Stats, Topic, TopicSpec};
use serde::Serialize;

use crate::output::{self, Out};
use crate::{connect, CliResult, Global};

/// A topic as `show`/`list` print it in JSON: the definition's fields plus
/// the totals.
#[derive(Serialize)]
struct TopicView<'a> {
    #[serde(flatten)]
    spec: &'a TopicSpec,
    stats: Stats,
    /// Messages counted against the bound now (bounded topics only).
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_held: Option<u64>,
}

/// Whether the topic is paused: "no", "yes", or how many slots are (a
/// pause or resume that was cut off half way).
pub fn paused_text(stats: &Stats, slots: u32) -> String {
    match stats.paused_slots {
        0 => "no".into(),
        n if n == u64::from(slots) => "yes (`rmq topic resume` to take again)".into(),
        n => format!("{n} of {slots} slots (run `rmq topic pause` or `resume` again)"),
    }
}

/// The definition on one line.
pub fn describe(s: &TopicSpec) -> String {
    let mut text = format!(
        "{}, {} slots, lease {} ms, max attempts {}, backoff {}..{} ms, max payload {} bytes",
        s.kind,
        s.slots,
        s.lease_ms,
        s.max_attempts,
        s.backoff_ms,
        s.backoff_max_ms,
        s.max_payload_bytes
    );
    if s.rate_per_sec > 0 {
        text += &format!(", rate {}/s (bursts of {})", s.rate_per_sec, s.rate_burst);
    }
    if s.max_in_flight > 0 {
        text += &format!(", at most {} in flight", s.max_in_flight);
    }
    if s.max_pending > 0 {
        text += &format!(", bounded at {} messages", s.max_pending);
    }
    text
}

pub(super) async fn list(g: &Global, out: Out) -> CliResult {
    let client = connect::client(g).await?;
    let specs = client.topics().await?;
    let mut rows = Vec::new();
    for spec in specs {
        let name = spec.name.clone();
        let topic: Topic = client.topic(&name).await?;
        let stats = topic.stats().await?.total;
        if out.json {
            let bound_held = match topic.spec().max_pending {
                0 => None,
                _ => topic.bound_usage().await?.map(|(held, _)| held),
            };
            out.json(&TopicView {
                spec: &topic.spec(),
                stats,
                bound_held,
            })?;
        } else {
            let s = topic.spec();
            rows.push(vec![
                name,
                s.kind.to_string(),
                s.slots.to_string(),
                stats.pending.to_string(),
                stats.in_flight.to_string(),
                stats.dead.to_string(),
                s.lease_ms.to_string(),
                s.max_attempts.to_string(),
            ]);
        }
    }
    if !out.json {
        if rows.is_empty() {
            output::note(&format!(
                "no topics under prefix {:?} (create one with `rmq topic create`)",
                g.prefix
            ));
            return Ok(());
        }
        output::table(
            &[
                "TOPIC",
                "KIND",
                "SLOTS",
                "PENDING",
                "IN FLIGHT",
                "DEAD",
                "LEASE MS",
                "MAX ATTEMPTS",
            ],
            &rows,
        )?;
    }
    Ok(())
}

pub(super) async fn show(g: &Global, out: Out, name: &str) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let stats = topic.stats().await?.total;
    let s = topic.spec();
    if out.json {
        let bound_held = topic.bound_usage().await?.map(|(held, _)| held);
        return out.json(&TopicView {
            spec: &s,
            stats,
            bound_held,
        });
    }
    let rows: Vec<Vec<String>> = [
        ("topic", s.name.clone()),
        ("kind", s.kind.to_string()),
        ("slots", s.slots.to_string()),
        ("lease", format!("{} ms", s.lease_ms)),
        ("max attempts", s.max_attempts.to_string()),
        (
            "backoff",
            format!("{} ms doubling up to {} ms", s.backoff_ms, s.backoff_max_ms),
        ),
        ("max payload", format!("{} bytes", s.max_payload_bytes)),
        (
            "rate limit",
            match s.rate_per_sec {
                0 => "none".into(),
                r => format!("{r}/s across all consumers, bursts of {}", s.rate_burst),
            },
        ),
        (
            "in-flight cap",
            match s.max_in_flight {
                0 => "none".into(),
                c => format!(
                    "{c} at once across all consumers ({} held now)",
                    topic.in_flight_permits().await?
                ),
            },
        ),
        (
            "bound",
            match topic.bound_usage().await? {
                None => "none".into(),
                Some((held, bound)) => format!(
                    "{bound} messages waiting or in flight ({held} counted now); new sends beyond it are refused"
                ),
            },
        ),
        (
            "handler timeout",
            match s.handler_timeout_ms {
                0 => "none".into(),
                ms => format!("{ms} ms (then the handler is stopped and its message retried)"),
            },
        ),
        (
            "dead letters expire",
            match s.dead_letter_ttl_ms {
                0 => "never (only the count limit)".into(),
                ms => format!("after {ms} ms"),
            },
        ),
        ("past tolerance", format!("{} ms", s.past_tolerance_ms)),
        (
            "pending layout",
            match s.pending_layout {
                rmq::PendingLayout::Flat => "flat (one sorted set per slot, however deep)".into(),
                rmq::PendingLayout::Compact => {
                    "compact (small sorted sets once a slot holds more than 120)".into()
                }
            },
        ),
        (
            "dead letters kept",
            if s.dead_letters_per_slot == 0 {
                "all".into()
            } else {
                format!("{} per slot", s.dead_letters_per_slot)
            },
        ),
        ("paused", paused_text(&stats, s.slots)),
        ("pending", stats.pending.to_string()),
        ("  due now", stats.due_now.to_string()),
        ("  scheduled", stats.scheduled.to_string()),
        ("retry waiting", stats.retry_waiting.to_string()),
        ("in flight", stats.in_flight.to_string()),
        ("behind in flight", stats.behind_in_flight.to_string()),
        ("dead", stats.dead.to_string()),
        ("sent", stats.sent.to_string()),
        ("merged", stats.merged.to_string()),
        ("delivered", stats.delivered.to_string()),
        ("acked", stats.acked.to_string()),
        ("retried", stats.retried.to_string()),
        ("dead-lettered", stats.dead_lettered.to_string()),
        ("cancelled", stats.cancelled.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| vec![format!("{k}:"), v])
    .collect();
    let mut text = String::new();
    let w = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
    for r in &rows {
        text.push_str(&format!("{:<w$} {}\n", r[0], r[1]));
    }
    output::raw(&text)
}
