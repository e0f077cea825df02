//! Printing deliveries (`rmq consume` without `--exec`): a batch the
//! consumer handed out together is written with one write and one flush,
//! then each is ended; a line is always out before its ack.

use std::sync::Arc;

use rmq::Delivery;
use serde::Serialize;
use tokio::time::Instant;

use super::{ack, nack, print, release, Ctx, Ended};
use crate::output::{self, Out};
use crate::{CliError, CliResult};

/// A delivery as printed (borrowing the message: no copies per line).
#[derive(Serialize)]
struct DeliveryJson<'a> {
    key: std::borrow::Cow<'a, str>,
    payload: std::borrow::Cow<'a, str>,
    slot: u32,
    attempt: u32,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
    /// When it was taken (Unix ms, server clock).
    taken_ms: i64,
}

/// Prints a batch of deliveries with one write and one flush, then ends
/// each (ack, or nack with --fail): a line is always out before its ack,
/// so a reader of stdout never misses an acked message. If stdout is
/// closed, the batch is released untouched.
pub(super) async fn handle_printed(ctx: Arc<Ctx>, batch: Vec<Delivery>) -> Vec<Ended> {
    if ctx.kill.is_cancelled() {
        return futures::future::join_all(batch.into_iter().map(release)).await;
    }
    let started = Instant::now();
    let mut text = Vec::with_capacity(batch.len() * 160);
    let encoded = batch
        .iter()
        .try_for_each(|d| write_delivery(&mut text, ctx.out, d.message()));
    let printed = print(&ctx, |_| encoded.and_then(|()| output::raw_bytes(&text)));
    let topics: Vec<String> = batch.iter().map(|d| d.topic.clone()).collect();
    let ends = if !printed {
        futures::future::join_all(batch.into_iter().map(release)).await
    } else if ctx.fail {
        let nacks = batch
            .into_iter()
            .map(|d| nack(&ctx, d, "failed on purpose (rmq consume --fail)"));
        futures::future::join_all(nacks).await
    } else {
        futures::future::join_all(batch.into_iter().map(|d| ack(&ctx, d))).await
    };
    let secs = started.elapsed().as_secs_f64();
    for (topic, e) in topics.iter().zip(&ends) {
        rmq::observe::handled(topic, e.label(), secs);
    }
    ends
}

/// Appends one delivery as `rmq consume` prints it, and a newline.
fn write_delivery(buf: &mut Vec<u8>, out: Out, m: &rmq::Received) -> CliResult {
    if out.json {
        let line = DeliveryJson {
            key: String::from_utf8_lossy(&m.key),
            payload: String::from_utf8_lossy(&m.payload),
            slot: m.slot,
            attempt: m.attempt,
            kind: m.kind.as_str(),
            priority: m.priority,
            due_ms: m.due_ms,
            taken_ms: m.taken_ms,
        };
        serde_json::to_writer(&mut *buf, &line)
            .map_err(|e| CliError::runtime(format!("cannot encode JSON: {e}")))?;
    } else {
        let order = match (m.priority, m.due_ms) {
            (Some(p), _) => format!(", priority {p}"),
            (None, Some(due)) => format!(", due {}", output::clock(due)),
            (None, None) => String::new(),
        };
        buf.extend_from_slice(
            format!(
                "{} (slot {}, attempt {}{order}): {}",
                output::cell(&m.key, 80),
                m.slot,
                m.attempt,
                output::cell(&m.payload, 10_000)
            )
            .as_bytes(),
        );
    }
    buf.push(b'\n');
    Ok(())
}
