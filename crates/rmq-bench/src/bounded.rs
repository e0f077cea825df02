//! Bounded topics (`send_bounded`): what a bound costs a producer. A send
//! to a bounded topic reserves room in one more call before it sends (and
//! gives back what merges left unused), so the cost is one round trip per
//! send call, the most for single sends. Each case sends to an unbounded
//! and a bounded topic (a bound the run never reaches) in alternating
//! rounds, A B B A A B, on the same server and client, and reports both
//! rates and their ratio.

use std::time::Instant;

use anyhow::{bail, Result};
use rmq::{Client, Topic, TopicKind, TopicSpec};
use serde_json::json;

use crate::env::Env;
use crate::report::{round, Row};
use crate::send::send_concurrently;
use crate::workload::{send_all, SEND_N};

/// How the producer sends.
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    /// One message per call, this many senders at once.
    Single(u64),
    /// One sender, this many messages per call.
    Batch(u64),
}

impl Shape {
    pub(crate) fn label(self) -> String {
        match self {
            Shape::Single(c) => format!("single concurrency={c}"),
            Shape::Batch(b) => format!("batch={b}"),
        }
    }
}

/// Rounds per case: unbounded, bounded, bounded, unbounded, ...
const ORDER: [bool; 6] = [false, true, true, false, false, true];

pub(crate) async fn send_bounded(env: &Env, client: Client, shape: Shape) -> Result<Row> {
    let kind = TopicKind::Priority;
    let n = env.n(SEND_N) / 2;
    let (mut secs, mut sent) = ([0.0f64; 2], [0u64; 2]);
    for (round, bounded) in ORDER.into_iter().enumerate() {
        let bound = if bounded { 1_000_000_000 } else { 0 };
        let spec = TopicSpec::new(format!("bounded{round}"), kind).max_pending(bound);
        let topic = client.define_topic(spec).await?;
        let start = Instant::now();
        send(&topic, kind, n, shape).await?;
        secs[usize::from(bounded)] += start.elapsed().as_secs_f64();
        sent[usize::from(bounded)] += n;
        if bounded && topic.bound_usage().await?.map(|(held, _)| held) != Some(n) {
            bail!("the bound's count is not the {n} messages sent");
        }
    }
    let rate = |i: usize| sent[i] as f64 / secs[i];
    let ratio = rate(1) / rate(0);
    eprintln!(
        "send_bounded: {}: unbounded {:.0}/s, bounded {:.0}/s ({:.1}%)",
        shape.label(),
        rate(0),
        rate(1),
        ratio * 100.0
    );
    let params = match shape {
        Shape::Single(c) => json!({"mode": "single", "concurrency": c}),
        Shape::Batch(b) => json!({"mode": "batch", "batch": b}),
    };
    Ok(Row::new("send_bounded", kind, params, sent[1], secs[1])
        .with("unbounded_msgs_per_sec", round(rate(0), 0))
        .with("bounded_vs_unbounded", round(ratio, 3)))
}

async fn send(topic: &Topic, kind: TopicKind, n: u64, shape: Shape) -> Result<()> {
    match shape {
        Shape::Batch(b) => send_all(topic, kind, n, b).await,
        Shape::Single(c) => send_concurrently(topic, kind, n, c).await,
    }
}
