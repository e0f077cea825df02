//! `rmq take`: two-phase handling across commands. Takes due messages and
//! prints each with its receipt; `rmq ack|nack|extend TOPIC RECEIPT...`
//! (`settle.rs`) settles them later, from this shell or another machine.
//!
//! The receipts are the HTTP API's (sealed with the prefix's receipt key):
//! one taken here settles over HTTP, and one taken over HTTP settles here.

use std::time::Duration;

use clap::Args;
use rmq_serve::views::DeliveryJson;

use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};

#[derive(Debug, Args)]
#[command(after_help = "Each delivery is in flight until it is settled \
    (rmq ack, rmq nack, rmq extend) or its lease runs out; then it comes back \
    as a failed attempt and its receipt answers `stale`. With --json, one \
    object per delivery: receipt, key (or key_base64 when not UTF-8), payload \
    (or payload_base64), attempt, slot, priority or due_ms, taken_ms, \
    lease_until_ms, message_id.\n\n\
    Example: rmq take orders 10 --json | jq -r .receipt | rmq ack orders")]
pub struct TakeArgs {
    /// Topic name
    pub topic: String,
    /// How many messages at most, 1 to 1000
    #[arg(default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=rmq::limits::MAX_TAKE as u64))]
    pub max: u64,
    /// Each delivery's lease in ms, 1 to 86400000 (24 h) (default: the
    /// topic's lease)
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=rmq::limits::MAX_LEASE_MS))]
    pub lease: Option<u64>,
    /// Wait up to this many ms for a first message when none is due, at
    /// most 3600000 (1 hour) (0: answer at once)
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub wait: u64,
}

pub async fn run(g: &Global, a: TakeArgs) -> CliResult {
    let out = Out { json: g.json };
    let (client, topic) = connect::topic(g, &a.topic).await?;
    let key = client.receipt_key().await?;
    let lease_ms = a.lease.unwrap_or(topic.spec().lease_ms);
    let max = usize::try_from(a.max).map_err(|_| CliError::usage("max is too large"))?;
    let got = topic
        .on_demand()
        .take(
            max,
            Duration::from_millis(lease_ms),
            Duration::from_millis(a.wait),
        )
        .await?;
    if got.is_empty() {
        if !out.json {
            output::note(&format!("nothing due in topic {:?}", a.topic));
        }
        return Ok(());
    }
    let mut rows = Vec::with_capacity(got.len());
    for d in got {
        let cells = [
            output::cell(&d.key, 30),
            d.attempt.to_string(),
            d.slot.to_string(),
            output::cell(&d.payload, 40),
        ];
        let view = DeliveryJson::of(&a.topic, &key, d, lease_ms);
        if out.json {
            out.json(&view)?;
        } else {
            let mut row = cells.to_vec();
            row.push(view.receipt().to_string());
            rows.push(row);
        }
    }
    if out.json {
        return Ok(());
    }
    output::table(&["KEY", "ATTEMPT", "SLOT", "PAYLOAD", "RECEIPT"], &rows)?;
    output::note(&format!(
        "in flight for {lease_ms} ms: settle with rmq ack|nack|extend {} RECEIPT...",
        a.topic
    ));
    Ok(())
}
