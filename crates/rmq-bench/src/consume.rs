//! Consume throughput (`consume`): a pre-filled priority topic drained by
//! one consumer at several concurrency/batch settings, with the Redis and
//! client CPU cost per message.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmq::{CancellationToken, Client, Outcome, TopicKind};
use serde_json::json;

use crate::env::Env;
use crate::redis_stats::{info_field_sum, redis_cpu_secs_sum};
use crate::report::{round, Row};
use crate::workload::{define, send_all, SEND_N};

/// CPU seconds (user + sys) used by this process so far (Linux; 0 elsewhere).
fn own_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields after ')' start at field 3 (state); utime is field 14, stime 15.
    (tick(11) + tick(12)) / 100.0
}

/// Context switches (voluntary and not) of all this process's threads so
/// far (Linux; 0 elsewhere): each time a thread parks for want of work and
/// is woken, as a task hand-off to an idle thread does.
fn own_context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

pub(crate) async fn consume(env: &Env, client: Client, c: usize, batch: usize) -> Result<Row> {
    let n = env.n(SEND_N);
    let kind = TopicKind::Priority;
    let topic = define(&client, "bench", kind).await?;
    send_all(&topic, kind, n, 1000).await?;
    let mut raw = env.raw_all().await?;
    let cpu0 = redis_cpu_secs_sum(&mut raw).await?;
    let cmds0 = info_field_sum(&mut raw, "stats", "total_commands_processed").await?;
    let own0 = own_cpu_secs();
    let allocs0 = crate::allocations();
    let switches0 = own_context_switches();
    let drain = Drain::start(&topic, c, batch);
    let secs = drain.wait_acked(&topic, n).await?;
    let cpu1 = redis_cpu_secs_sum(&mut raw).await?;
    let cmds1 = info_field_sum(&mut raw, "stats", "total_commands_processed").await?;
    let own1 = own_cpu_secs();
    let allocs1 = crate::allocations();
    let switches1 = own_context_switches();
    let report = drain.finish().await?;
    Ok(Row::new(
        "consume",
        kind,
        json!({"concurrency": c, "batch": batch}),
        n,
        secs,
    )
    .with(
        "redis_cpu_us_per_msg",
        round((cpu1 - cpu0) * 1e6 / n as f64, 2),
    )
    .with(
        "client_cpu_us_per_msg",
        round((own1 - own0) * 1e6 / n as f64, 2),
    )
    .with("redis_cmds_per_msg", round((cmds1 - cmds0) / n as f64, 2))
    .with(
        "allocs_per_msg",
        round(allocs1.saturating_sub(allocs0) as f64 / n as f64, 1),
    )
    .with(
        "ctx_switches_per_msg",
        round(switches1.saturating_sub(switches0) as f64 / n as f64, 2),
    )
    .with("run_acked", report.acked)
    .with("failed_settles", report.failed_settles))
}

/// A consumer acking everything at once (no-op handler), measured until a
/// number of acks is reached.
pub(crate) struct Drain {
    cancel: CancellationToken,
    run: tokio::task::JoinHandle<rmq::Result<rmq::RunReport>>,
    start: Instant,
    /// Stops the consumer if the scenario ends early.
    _stop: tokio_util::sync::DropGuard,
}

impl Drain {
    pub(crate) fn start(topic: &rmq::Topic, c: usize, batch: usize) -> Drain {
        let cancel = CancellationToken::new();
        let run = tokio::spawn(
            crate::env::consumer(topic)
                .concurrency(c)
                .batch(batch)
                .shutdown_grace(Duration::from_secs(5))
                .run(cancel.clone(), |_| async { Outcome::Ack }),
        );
        let _stop = cancel.clone().drop_guard();
        Drain {
            cancel,
            run,
            start: Instant::now(),
            _stop,
        }
    }

    /// Seconds from the start until `n` messages were acked (polled every 20 ms).
    pub(crate) async fn wait_acked(&self, topic: &rmq::Topic, n: u64) -> Result<f64> {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let acked = topic.stats().await?.total.acked;
            if acked >= n {
                return Ok(self.start.elapsed().as_secs_f64());
            }
            if self.run.is_finished() {
                bail!("the consumer stopped early after {acked} of {n} acks");
            }
        }
    }

    /// Stops the consumer and returns what it did.
    pub(crate) async fn finish(self) -> Result<rmq::RunReport> {
        self.cancel.cancel();
        Ok(tokio::time::timeout(Duration::from_secs(15), self.run)
            .await
            .context("the consumer did not stop within 15 s")???)
    }
}
