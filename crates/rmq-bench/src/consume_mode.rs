//! Serial against parallel consume throughput (`consume_mode`): four
//! consumers of one process drain a 64-slot topic in either mode.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmq::{CancellationToken, Client, Outcome, TopicKind, TopicSpec};
use serde_json::json;

use crate::env::Env;
use crate::redis_stats::{info_field_sum, redis_cpu_secs_sum};
use crate::report::{round, Row};
use crate::workload::send_all;

/// Messages of `consume_mode` at scale 1.
const MODE_N: u64 = 100_000;
/// Messages of `consume_mode` under `--smoke`.
const MODE_SMOKE_N: u64 = 400;
const MODE_CONSUMERS: usize = 4;
const MODE_CONCURRENCY: usize = 16;
const MODE_SLOTS: u32 = 64;
const MODE_GROUP_MS: u64 = 2_000;

pub(crate) fn mode_n(env: &Env) -> u64 {
    if env.smoke {
        MODE_SMOKE_N
    } else {
        env.n(MODE_N)
    }
}

/// A 64-slot priority topic pre-filled with N messages, drained by four
/// consumers of one process (each with its own `Client`, so they do not
/// share a connection), in parallel or in serial mode.
pub(crate) async fn consume_mode(
    env: &Env,
    client: Client,
    serial: bool,
    parallel_rate: Option<f64>,
) -> Result<Row> {
    let n = mode_n(env);
    let kind = TopicKind::Priority;
    let topic = client
        .define_topic(TopicSpec::new("bench", kind).slots(MODE_SLOTS))
        .await?;
    send_all(&topic, kind, n, 1000).await?;

    let mut topics = Vec::with_capacity(MODE_CONSUMERS);
    for _ in 0..MODE_CONSUMERS {
        let c = env
            .client_with_prefix(client.prefix())
            .await
            .context("connecting a consumer's client")?;
        topics.push(c.topic("bench").await?);
    }

    let mut raw = env.raw_all().await?;
    let cpu0 = redis_cpu_secs_sum(&mut raw).await?;
    let cmds0 = info_field_sum(&mut raw, "stats", "total_commands_processed").await?;
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let start = Instant::now();
    let mut runs = Vec::with_capacity(MODE_CONSUMERS);
    for t in &topics {
        let mut b = crate::env::consumer(t)
            .concurrency(MODE_CONCURRENCY)
            .shutdown_grace(Duration::from_secs(5));
        if serial {
            b = b
                .serial("bench")
                .member_timeout(Duration::from_millis(MODE_GROUP_MS))
                .slot_lease(Duration::from_millis(MODE_GROUP_MS));
        }
        runs.push(tokio::spawn(
            b.run(cancel.clone(), |_| async { Outcome::Ack }),
        ));
    }
    let limit = Duration::from_secs(20) + Duration::from_millis(n.saturating_mul(3));
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let acked = topic.stats().await?.total.acked;
        if acked >= n {
            break;
        }
        if let Some(i) = runs.iter().position(|r| r.is_finished()) {
            bail!("consumer {i} stopped early after {acked} of {n} acks");
        }
        if start.elapsed() > limit {
            bail!(
                "only {acked} of {n} acked after {:.0} s",
                start.elapsed().as_secs_f64()
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = redis_cpu_secs_sum(&mut raw).await?;
    let cmds1 = info_field_sum(&mut raw, "stats", "total_commands_processed").await?;
    cancel.cancel();
    let mut per_consumer = Vec::with_capacity(MODE_CONSUMERS);
    let mut failed_settles = 0;
    for (i, run) in runs.into_iter().enumerate() {
        let report = tokio::time::timeout(Duration::from_secs(15), run)
            .await
            .with_context(|| format!("consumer {i} did not stop within 15 s"))???;
        per_consumer.push(report.acked);
        failed_settles += report.failed_settles;
    }

    let mode = if serial { "serial" } else { "parallel" };
    let mut row = Row::new(
        "consume_mode",
        kind,
        json!({
            "mode": mode,
            "consumers": MODE_CONSUMERS,
            "concurrency": MODE_CONCURRENCY,
            "slots": MODE_SLOTS,
        }),
        n,
        secs,
    )
    .with(
        "redis_cpu_us_per_msg",
        round((cpu1 - cpu0) * 1e6 / n as f64, 2),
    )
    .with("redis_cmds_per_msg", round((cmds1 - cmds0) / n as f64, 2))
    .with("acked_per_consumer", per_consumer)
    .with("failed_settles", failed_settles);
    if serial {
        row = row
            .with("member_timeout_ms", MODE_GROUP_MS)
            .with("slot_lease_ms", MODE_GROUP_MS);
        if let Some(p) = parallel_rate.filter(|p| *p > 0.0) {
            let ratio = round(row.rate() / p, 3);
            row = row.with("serial_vs_parallel", ratio);
        }
    }
    Ok(row)
}
