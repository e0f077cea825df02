//! `--forward`: how fast rmq hands due messages to a broker, against the
//! broker's own ceiling.
//!
//! For each broker (a throwaway `nats-server -js` and RabbitMQ node, plus
//! a throwaway Redis) it measures, in one run:
//! - **ceiling**: a plain client publishing N 64-byte messages with the
//!   same headers, 256 publishes awaiting their confirm at once (JetStream
//!   publish acks; RabbitMQ publisher confirms on a durable queue);
//! - **forward**: N messages all due in an rmq priority topic, forwarded by
//!   a [`Forwarder`] (concurrency 256, batch 64) until the broker confirmed
//!   all of them and rmq acked them;
//! - **lateness**: fixed-time messages due at a steady rate (a fifth of
//!   the forward rate, for five seconds), forwarded as they fall due; the
//!   time from each message's due time to its confirm (p50, p99, max).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream;
use futures::stream::{FuturesUnordered, StreamExt};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use rmq::{CancellationToken, Client, Message, Received, TopicKind, TopicSpec};
use rmq_forward::{Confirmed, Forwarder, Sink, SinkError, Target};
use rmq_test_support::{NatsServer, RabbitServer, RedisServer};
use serde_json::json;

use crate::latency::percentiles;
use crate::workload::{key16, now_ms, payload64};

/// Publishes awaiting their confirm at once, for the ceiling and the forwarder.
const WINDOW: usize = 256;

/// Runs every measure for both brokers and prints one JSON line each.
pub(crate) async fn measure(scale: f64) -> Result<()> {
    let n = ((50_000.0 * scale) as u64).max(500);
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await?;

    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await?);
    js.create_stream(jetstream::stream::Config {
        name: "BENCH".into(),
        subjects: vec!["bench.>".into()],
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rabbit = RabbitServer::start();
    let channel = rabbit_channel(&rabbit.url()).await?;

    for broker in ["nats", "rabbitmq"] {
        let ceiling = match broker {
            "nats" => nats_ceiling(&js, n).await?,
            _ => rabbit_ceiling(&channel, n).await?,
        };
        let to = match broker {
            "nats" => format!("{}?subject=bench.fwd", nats.url()),
            _ => format!("{}?exchange=&routing_key=bench", rabbit.url()),
        };
        let target = Target::parse(&to)?;
        let forward = forward_rate(&client, &target, broker, n).await?;
        let lateness = lateness(&client, &target, broker, (forward / 5.0).max(100.0)).await?;
        let line = json!({
            "scenario": "forward",
            "broker": broker,
            "messages": n,
            "ceiling_msgs_per_s": ceiling.round(),
            "forward_msgs_per_s": forward.round(),
            "forward_of_ceiling": (forward / ceiling * 1000.0).round() / 1000.0,
            "lateness_ms": lateness,
        });
        println!("{line}");
        eprintln!(
            "{broker:9} ceiling {:>8.0} msg/s   forward {:>8.0} msg/s ({:.0}% of ceiling)   due->confirmed {}",
            ceiling,
            forward,
            forward / ceiling * 100.0,
            lateness
        );
    }
    Ok(())
}

fn headers_of(i: u64) -> Vec<(&'static str, String)> {
    vec![
        ("rmq-id", format!("ceiling/0/{i}")),
        ("rmq-topic", "ceiling".into()),
        ("rmq-key", String::from_utf8_lossy(&key16(i)).into_owned()),
        ("rmq-slot", "0".into()),
        ("rmq-attempt", "1".into()),
        ("rmq-kind", "priority".into()),
        ("rmq-priority", "0".into()),
    ]
}

async fn nats_ceiling(js: &jetstream::Context, n: u64) -> Result<f64> {
    let start = Instant::now();
    let mut acks = FuturesUnordered::new();
    for i in 0..n {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("ceiling/{i}").as_str());
        for (k, v) in headers_of(i) {
            h.insert(k, v.as_str());
        }
        let ack = js
            .publish_with_headers("bench.ceiling", h, payload64(i).into())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        acks.push(std::future::IntoFuture::into_future(ack));
        if acks.len() >= WINDOW {
            if let Some(r) = acks.next().await {
                r.map_err(|e| anyhow::anyhow!("{e}"))?;
            }
        }
    }
    while let Some(r) = acks.next().await {
        r.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn rabbit_channel(url: &str) -> Result<lapin::Channel> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for q in ["ceiling", "bench"] {
        ch.queue_declare(q.into(), durable, FieldTable::default())
            .await?;
    }
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    // The connection lives as long as the process: the channel needs it.
    std::mem::forget(conn);
    Ok(ch)
}

async fn rabbit_ceiling(ch: &lapin::Channel, n: u64) -> Result<f64> {
    let start = Instant::now();
    let mut confirms = FuturesUnordered::new();
    for i in 0..n {
        let mut t = FieldTable::default();
        for (k, v) in headers_of(i) {
            t.insert(
                ShortString::from(k),
                AMQPValue::LongString(LongString::from(v.into_bytes())),
            );
        }
        let props = lapin::BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(format!("ceiling/{i}")))
            .with_headers(t);
        let opts = BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        };
        let c = ch
            .basic_publish("".into(), "ceiling".into(), opts, &payload64(i), props)
            .await?;
        confirms.push(c);
        if confirms.len() >= WINDOW {
            if let Some(r) = confirms.next().await {
                anyhow::ensure!(r?.is_ack(), "the broker nacked a message");
            }
        }
    }
    while let Some(r) = confirms.next().await {
        anyhow::ensure!(r?.is_ack(), "the broker nacked a message");
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn forward_rate(client: &Client, target: &Target, broker: &str, n: u64) -> Result<f64> {
    let spec = TopicSpec::new(format!("fwd-{broker}"), TopicKind::Priority).slots(16);
    let topic = client.define_topic(spec).await?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<Message> = chunk
            .iter()
            .map(|&i| Message::new(payload64(i)).key(key16(i)))
            .collect();
        topic.send_batch(&batch).await?;
    }
    let (took, _) = forward_all(topic, target, n, Duration::from_secs(600)).await?;
    Ok(n as f64 / took.as_secs_f64())
}

/// Forwards `topic` until `n` messages were confirmed (within `limit`):
/// how long that took from the forwarder's start, and each message's
/// lateness (confirm time minus due time, ms; time kinds only).
async fn forward_all(
    topic: rmq::Topic,
    target: &Target,
    n: u64,
    limit: Duration,
) -> Result<(Duration, Vec<i64>)> {
    let sink = Counted::new(target.connect().await?, n);
    let done = sink.done.clone();
    let late = sink.late.clone();
    let stop = CancellationToken::new();
    let start = Instant::now();
    let run = tokio::spawn(
        Forwarder::new(topic, sink)
            .concurrency(WINDOW)
            .batch(64)
            .run(stop.clone()),
    );
    tokio::time::timeout(limit, done.notified())
        .await
        .with_context(|| format!("{n} messages were not forwarded within {limit:?}"))?;
    let took = start.elapsed();
    stop.cancel();
    let report = run.await??;
    anyhow::ensure!(report.dead == 0, "messages died: {report:?}");
    let late = late.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok((took, late))
}

async fn lateness(
    client: &Client,
    target: &Target,
    broker: &str,
    rate: f64,
) -> Result<serde_json::Value> {
    let spec = TopicSpec::new(format!("late-{broker}"), TopicKind::FixedTime).slots(16);
    let topic = client.define_topic(spec).await?;
    let n = (rate * 5.0) as u64;
    let first_due = now_ms() + 1000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<Message> = chunk
            .iter()
            .map(|&i| {
                let due = first_due + (i as f64 * 1000.0 / rate) as i64;
                Message::new(payload64(i)).key(key16(i)).at_ms(due)
            })
            .collect();
        topic.send_batch(&batch).await?;
    }
    let (_, late) = forward_all(topic, target, n, Duration::from_secs(120)).await?;
    let mut out = percentiles(late);
    out["rate_per_s"] = json!(rate.round());
    Ok(out)
}

/// A sink that counts confirms, notes each one's lateness (confirm time
/// minus due time, ms) and says when `n` were confirmed.
struct Counted<S> {
    inner: S,
    n: u64,
    confirmed: std::sync::atomic::AtomicU64,
    done: Arc<tokio::sync::Notify>,
    late: Arc<Mutex<Vec<i64>>>,
}

impl<S> Counted<S> {
    fn new(inner: S, n: u64) -> Self {
        Counted {
            inner,
            n,
            confirmed: std::sync::atomic::AtomicU64::new(0),
            done: Arc::new(tokio::sync::Notify::new()),
            late: Arc::new(Mutex::new(Vec::with_capacity(n as usize))),
        }
    }
}

impl<S: Sink> Sink for Counted<S> {
    async fn publish(&self, msg: &Received) -> Result<Confirmed, SinkError> {
        let c = self.inner.publish(msg).await?;
        if let Some(due) = msg.due_ms {
            self.late
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(now_ms() - due);
        }
        let confirmed = self
            .confirmed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if confirmed == self.n {
            self.done.notify_one();
        }
        Ok(c)
    }
}
