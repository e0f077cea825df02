//! Merge-heavy sending (`merge_heavy`): many messages over few keys, checking
//! that they merge down to one pending message per key.

use std::time::Instant;

use anyhow::{bail, Result};
use rmq::{Client, Message, TopicKind};
use serde_json::json;

use crate::env::Env;
use crate::report::Row;
use crate::workload::{define, make, BIG_N};

pub(crate) async fn merge_heavy(env: &Env, client: Client) -> Result<Row> {
    let n = env.n(BIG_N);
    let keys: u64 = 10_000;
    let batch: u64 = 1000;
    let kind = TopicKind::Priority;
    let topic = define(&client, "bench", kind).await?;
    let mut merged_reported = 0u64;
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let msgs: Vec<Message> = (i..end).map(|j| make(kind, j % keys, j)).collect();
        let r = topic.send_batch(&msgs).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
        merged_reported += r.merged_count() as u64;
        i = end;
    }
    let secs = start.elapsed().as_secs_f64();
    let st = topic.stats().await?.total;
    let expected = n.min(keys);
    if st.pending != expected {
        bail!("{} pending after merging, expected {expected}", st.pending);
    }
    Ok(Row::new(
        "merge_heavy",
        kind,
        json!({"keys": keys, "batch": batch}),
        n,
        secs,
    )
    .with("pending_after", st.pending)
    .with("merged", st.merged)
    .with("merged_reported", merged_reported))
}
