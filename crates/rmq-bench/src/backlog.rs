//! Backlog (`backlog`): consume throughput with a small and a huge number of
//! pending messages, to show that the cost per message grows at most with
//! O(log n) of the backlog (sorted-set operations), not with its size.

use std::time::Instant;

use anyhow::Result;
use rmq::{Client, TopicKind};
use serde_json::json;

use crate::consume::Drain;
use crate::env::Env;
use crate::redis_stats::redis_cpu_secs;
use crate::report::{round, Row};
use crate::workload::{define, send_all, SEND_N};

/// Pending messages of the large case at scale 1 (the 10M).
pub(crate) const LARGE: u64 = 10_000_000;
/// Pending messages of the small case at scale 1.
pub(crate) const SMALL: u64 = 10_000;

/// Fills `pending` messages plus the ones to consume, then measures how fast
/// a consumer (concurrency 128, batch 64) takes and acks `SEND_N/4 × scale`
/// of them while the rest stays pending.
pub(crate) async fn backlog(
    env: &Env,
    client: Client,
    pending: u64,
    small_rate: Option<f64>,
) -> Result<Row> {
    let n = env.n(SEND_N / 4);
    let kind = TopicKind::Priority;
    let topic = define(&client, "bench", kind).await?;
    let fill = Instant::now();
    send_all(&topic, kind, pending + n, 1000).await?;
    let fill_secs = fill.elapsed().as_secs_f64();
    let mut raw = env.raw().await?;
    let cpu0 = redis_cpu_secs(&mut raw).await?;
    let drain = Drain::start(&topic, 128, 64);
    let secs = drain.wait_acked(&topic, n).await?;
    let cpu1 = redis_cpu_secs(&mut raw).await?;
    drain.finish().await?;
    let mut row = Row::new(
        "backlog",
        kind,
        json!({"pending": pending, "concurrency": 128, "batch": 64}),
        n,
        secs,
    )
    .with(
        "redis_cpu_us_per_msg",
        round((cpu1 - cpu0) * 1e6 / n as f64, 2),
    )
    .with("fill_secs", round(fill_secs, 2));
    if let Some(small) = small_rate {
        row = row.with("vs_small_backlog", round(n as f64 / secs / small, 3));
    }
    Ok(row)
}
