//! Send throughput: `send_single` (one message per call, N concurrent
//! senders) and `send_batch` (one sender, fixed batch sizes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use rmq::{Client, Message, Topic, TopicKind};
use serde_json::json;
use tokio::task::JoinSet;

use crate::env::Env;
use crate::report::Row;
use crate::workload::{define, make, SEND_N};

pub(crate) async fn send_single(env: &Env, client: Client, kind: TopicKind, c: u64) -> Result<Row> {
    let n = env.n(SEND_N);
    let topic = define(&client, "bench", kind).await?;
    let start = Instant::now();
    send_concurrently(&topic, kind, n, c).await?;
    let secs = start.elapsed().as_secs_f64();
    let pending = topic.stats().await?.total.pending;
    Ok(
        Row::new("send_single", kind, json!({"concurrency": c}), n, secs)
            .with("pending_after", pending),
    )
}

/// Sends messages 0..n one per call, `c` senders at once.
pub(crate) async fn send_concurrently(
    topic: &Topic,
    kind: TopicKind,
    n: u64,
    c: u64,
) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..c {
        let t = topic.clone();
        let next = next.clone();
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                t.send(make(kind, i, i)).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

pub(crate) async fn send_batch(
    env: &Env,
    client: Client,
    kind: TopicKind,
    batch: u64,
) -> Result<Row> {
    let n = env.n(SEND_N);
    let topic = define(&client, "bench", kind).await?;
    let msgs: Vec<Message> = (0..n).map(|i| make(kind, i, i)).collect();
    let start = Instant::now();
    for chunk in msgs.chunks(batch as usize) {
        let r = topic.send_batch(chunk).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let pending = topic.stats().await?.total.pending;
    Ok(Row::new(
        "send_batch",
        kind,
        json!({"batch": batch, "concurrency": 1}),
        n,
        secs,
    )
    .with("pending_after", pending))
}
