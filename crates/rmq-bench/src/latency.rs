//! Delivery lateness of fixed-time messages (`latency`), with and without a
//! background load on another topic, reported as percentiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmq::{CancellationToken, Client, Message, Outcome, TopicKind};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::env::Env;
use crate::report::{round, Row};
use crate::workload::{define, key16, make, now_ms, payload64, Rng};

/// p50, p99, p99.9 and max of `v`.
pub(crate) fn percentiles(mut v: Vec<i64>) -> Value {
    v.sort_unstable();
    let p = |q: f64| -> i64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((q / 100.0 * v.len() as f64).ceil() as usize).saturating_sub(1);
        v[i.min(v.len() - 1)]
    };
    json!({"p50": p(50.0), "p99": p(99.0), "p99.9": p(99.9), "max": v.last().copied().unwrap_or(0)})
}

pub(crate) async fn latency(env: &Env, client: Client, background: bool) -> Result<Row> {
    let kind = TopicKind::FixedTime;
    let n = if env.smoke { 50 } else { env.n(2000) };
    let spread = if env.smoke {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(2)
    };
    let topic = define(&client, "lat", kind).await?;
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();

    // Background load: another topic, 200 messages every 10 ms, consumed.
    let bg_sent = Arc::new(AtomicU64::new(0));
    let bg_acked = Arc::new(AtomicU64::new(0));
    let mut bg_tasks = JoinSet::new();
    if background {
        let bg = define(&client, "bg", TopicKind::Priority).await?;
        let (t, stop, sent) = (bg.clone(), cancel.clone(), bg_sent.clone());
        bg_tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0u64;
            while !stop.is_cancelled() {
                tick.tick().await;
                let msgs: Vec<Message> = (i..i + 200)
                    .map(|j| make(TopicKind::Priority, j, j))
                    .collect();
                i += 200;
                t.send_batch(&msgs).await?;
                sent.fetch_add(200, Ordering::Relaxed);
            }
            anyhow::Ok(())
        });
        let acked = bg_acked.clone();
        let consumer = crate::env::consumer(&bg)
            .concurrency(128)
            .batch(64)
            .shutdown_grace(Duration::from_secs(5));
        let stop = cancel.clone();
        bg_tasks.spawn(async move {
            consumer
                .run(stop, move |_| {
                    let acked = acked.clone();
                    async move {
                        acked.fetch_add(1, Ordering::Relaxed);
                        Outcome::Ack
                    }
                })
                .await?;
            anyhow::Ok(())
        });
        // Let the load reach a steady state.
        tokio::time::sleep(if env.smoke {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        })
        .await;
    }
    let bg_start = (
        bg_sent.load(Ordering::Relaxed),
        bg_acked.load(Ordering::Relaxed),
        Instant::now(),
    );

    let samples: Arc<Mutex<Vec<(i64, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = samples.clone();
    let run = tokio::spawn(
        crate::env::consumer(&topic)
            .concurrency(16)
            .shutdown_grace(Duration::from_secs(5))
            .run(cancel.clone(), move |r| {
                let s = s2.clone();
                async move {
                    let local = now_ms();
                    let due = r.due_ms.unwrap_or(local);
                    s.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((r.taken_ms - due, local - due));
                    Outcome::Ack
                }
            }),
    );

    let mut rng = Rng(now_ms() as u64 | 1);
    let start = Instant::now();
    for i in 0..n {
        let at = tokio::time::Instant::from_std(start + spread.mul_f64(i as f64 / n as f64));
        tokio::time::sleep_until(at).await;
        let due = now_ms() + 50 + (rng.next() % 201) as i64;
        topic
            .send(Message::new(payload64(i)).key(key16(i)).at_ms(due))
            .await?;
    }
    let send_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = samples.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        if got >= n {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {got} of {n} latency messages arrived within 20 s of the last send");
        }
        if run.is_finished() {
            bail!("the consumer stopped early ({got} of {n})");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let bg_secs = bg_start.2.elapsed().as_secs_f64();
    let bg_sent_n = bg_sent.load(Ordering::Relaxed) - bg_start.0;
    let bg_acked_n = bg_acked.load(Ordering::Relaxed) - bg_start.1;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .context("the latency consumer did not stop within 15 s")???;
    let drained = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(r) = bg_tasks.join_next().await {
            r??;
        }
        anyhow::Ok(())
    })
    .await;
    drained.context("the background load did not stop within 15 s")??;

    let all = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let server: Vec<i64> = all.iter().map(|s| s.0).collect();
    let local: Vec<i64> = all.iter().map(|s| s.1).collect();
    let mut row = Row::new(
        "latency",
        kind,
        json!({"background": background, "spread_ms": spread.as_millis() as u64}),
        n,
        secs,
    )
    .with("send_secs", round(send_secs, 3))
    .with("lateness_server_ms", percentiles(server))
    .with("lateness_local_ms", percentiles(local));
    if background {
        row = row
            .with("bg_sent_per_sec", round(bg_sent_n as f64 / bg_secs, 0))
            .with("bg_acked_per_sec", round(bg_acked_n as f64 / bg_secs, 0));
    }
    Ok(row)
}
