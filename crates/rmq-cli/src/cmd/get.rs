//! `rmq get`: where one merge key is and everything about it.
//!
//! One atomic read of the key's slot: its state (pending, retry-waiting,
//! in-flight, dead or absent), payload, attempts, due time or priority,
//! lease, last error, a duplicate parked behind an in-flight delivery, and
//! the key's dead letter if it has one. Payloads print as text.

use clap::Args;
use rmq::{Lookup, State};
use rmq_serve::views::LookupJson;

use super::key_arg;
use crate::output::{self, Out};
use crate::{connect, CliResult, Global};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("the_key").required(true).args(["key", "key_text", "key_hex", "key_base64"]))]
pub struct GetArgs {
    /// Topic name
    pub topic: String,
    /// Merge key (or --key, --key-hex, --key-base64)
    pub key: Option<String>,
    #[command(flatten)]
    pub key_flags: key_arg::KeyFlags,
    /// Slot basis the message was sent with (default: the merge key)
    #[arg(long, value_name = "B")]
    pub slot_basis: Option<String>,
}

pub async fn run(g: &Global, a: GetArgs) -> CliResult {
    let out = Out { json: g.json };
    let key = a.key_flags.bytes(a.key.as_deref())?;
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let basis = a.slot_basis.map_or_else(|| key.clone(), String::into_bytes);
    let l = topic.get_in(&key, &basis).await?;
    if out.json {
        return out.json(&LookupJson::of(&l));
    }
    output::raw(&describe(&l))
}

/// The lookup as aligned `name: value` lines.
fn describe(l: &Lookup) -> String {
    let now = l.server_ms;
    let when = |ms: i64| {
        if ms > now {
            format!("{} (in {} ms)", output::clock(ms), ms - now)
        } else {
            format!("{} ({} ms ago)", output::clock(ms), now - ms)
        }
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("key", output::lossy(&l.key)),
        ("state", l.state.name().to_string()),
        ("slot", l.slot.to_string()),
    ];
    if let Some(p) = &l.payload {
        rows.push(("payload", output::cell(p, 200)));
    }
    if l.state != State::Absent && l.state != State::Dead {
        rows.push(("attempts", l.attempts.to_string()));
    }
    if let Some(p) = l.priority {
        rows.push(("priority", p.to_string()));
    }
    if let Some(due) = l.due_ms {
        rows.push(("due", when(due)));
    }
    if let Some(t) = l.next_attempt_ms {
        rows.push(("next attempt", when(t)));
    }
    if let Some(t) = l.lease_until_ms {
        rows.push(("lease until", when(t)));
    }
    if let Some(f) = l.fence {
        rows.push(("fence", f.to_string()));
    }
    if let Some(e) = &l.error {
        rows.push(("last error", output::cell(e.as_bytes(), 300)));
    }
    if l.cancelled {
        rows.push((
            "cancelled",
            "yes: this delivery will not be retried".to_string(),
        ));
    }
    if let Some(p) = &l.parked {
        let order = match (p.priority, p.due_ms) {
            (Some(pr), _) => format!("priority {pr}"),
            (None, Some(due)) => format!("due {}", when(due)),
            (None, None) => String::new(),
        };
        rows.push((
            "parked",
            format!(
                "{} ({order}), waits for this delivery to end",
                output::cell(&p.payload, 120)
            ),
        ));
    }
    if let Some(d) = &l.dead {
        rows.push((
            "dead letter",
            format!(
                "{} after {} attempts, died {} ({} deaths): {}",
                output::cell(&d.payload, 80),
                d.attempts,
                when(d.dead_at_ms),
                d.deaths,
                output::cell(d.error.as_bytes(), 300)
            ),
        ));
    }
    let w = rows.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{:<w$} {v}\n", format!("{k}:")))
        .collect()
}
