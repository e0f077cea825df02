//! Redis memory per pending message (`memory`): `used_memory` before and
//! after filling a topic.

use std::time::Instant;

use anyhow::{bail, Result};
use rmq::{Client, TopicKind, TopicSpec};
use serde_json::json;

use crate::env::Env;
use crate::redis_stats::settled_used_memory;
use crate::report::{round, Row};
use crate::workload::{send_all, BIG_N};

/// The slot counts measured (`None`: the default, 16): the target is a
/// bound per message at any slot count (issue 21 item 5), from one slot
/// holding all 1M messages (its pending set split into ~20,000 buckets) to
/// 65,536 slots of ~15 messages each (where the keys of each slot weigh
/// most).
pub(crate) const SLOT_COUNTS: [Option<u32>; 5] =
    [Some(1), None, Some(1_024), Some(16_384), Some(65_536)];

/// `slots`: `None` for the default slot count.
pub(crate) async fn memory(
    env: &Env,
    client: Client,
    kind: TopicKind,
    slots: Option<u32>,
) -> Result<Row> {
    let n = env.n(BIG_N);
    let mut raw = env.raw().await?;
    if env.owned {
        // Only ever on the throwaway server this process started.
        let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await?;
    }
    let mut spec = TopicSpec::new("mem", kind);
    if let Some(s) = slots {
        spec = spec.slots(s);
    }
    let slot_count = spec.slots;
    let topic = client.define_topic(spec).await?;
    let before = settled_used_memory(&mut raw).await?;
    let start = Instant::now();
    send_all(&topic, kind, n, 1000).await?;
    let secs = start.elapsed().as_secs_f64();
    let after = settled_used_memory(&mut raw).await?;
    let pending = topic.stats().await?.total.pending;
    if pending != n {
        bail!("{pending} pending, expected {n}");
    }
    Ok(Row::new(
        "memory",
        kind,
        json!({"key_bytes": 16, "payload_bytes": 64, "slots": slot_count}),
        n,
        secs,
    )
    .with("used_memory_before", before as u64)
    .with("used_memory_after", after as u64)
    .with("bytes_per_msg", round((after - before) / n as f64, 1)))
}
