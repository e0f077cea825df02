//! Shared by the forwarder's tests: a throwaway Redis with one topic, and
//! what the tests need on each broker (a stream or a queue to forward to,
//! and reading back what arrived).
#![allow(dead_code, unused_imports, unreachable_pub, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use rmq::{Client, Topic, TopicSpec};
pub use rmq_test_support::{NatsServer, RabbitServer, RedisServer};

/// One message as the broker's consumer sees it.
#[derive(Debug, Clone)]
pub struct Arrived {
    pub headers: BTreeMap<String, String>,
    pub payload: Vec<u8>,
}

impl Arrived {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

pub async fn redis_topic(spec: TopicSpec) -> (RedisServer, Client, Topic) {
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await.unwrap();
    let topic = client.define_topic(spec).await.unwrap();
    (redis, client, topic)
}

/// A forwarder running in the background until [`Running::finish`].
pub struct Running {
    stop: rmq::CancellationToken,
    run: tokio::task::JoinHandle<rmq::Result<rmq_forward::ForwardReport>>,
}

impl Running {
    pub fn start<S: rmq_forward::Sink>(forwarder: rmq_forward::Forwarder<S>) -> Running {
        let stop = rmq::CancellationToken::new();
        let run = tokio::spawn(forwarder.run(stop.clone()));
        Running { stop, run }
    }

    /// Stops it and returns its report (the publishes in flight finish).
    pub async fn finish(self) -> rmq_forward::ForwardReport {
        self.stop.cancel();
        self.run.await.unwrap().unwrap()
    }
}

/// Whether the topic holds nothing any more: nothing pending, in flight or
/// waiting for a retry.
pub async fn all_ended(topic: &Topic) -> bool {
    let st = topic.stats().await.unwrap().total;
    st.pending == 0 && st.in_flight == 0 && st.retry_waiting == 0
}

/// Polls `check` every 50 ms until it returns true or `secs` pass.
pub async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

// ---- NATS JetStream ----

/// A stream `name` taking `subject`, shaped by `config`.
pub async fn nats_stream(
    url: &str,
    name: &str,
    subject: &str,
    config: impl FnOnce(&mut jetstream::stream::Config),
) -> jetstream::Context {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client);
    let mut c = jetstream::stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        ..Default::default()
    };
    config(&mut c);
    js.create_stream(c).await.unwrap();
    js
}

/// Everything stream `name` holds, in order.
pub async fn nats_read(js: &jetstream::Context, name: &str) -> Vec<Arrived> {
    let mut stream = js.get_stream(name).await.unwrap();
    let (first, last) = {
        let info = stream.info().await.unwrap();
        (info.state.first_sequence, info.state.last_sequence)
    };
    let mut out = Vec::new();
    if last == 0 {
        return out;
    }
    for seq in first..=last {
        let Ok(m) = stream.get_raw_message(seq).await else {
            continue;
        };
        let headers = m
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.iter()
                        .map(|x| x.as_str().to_owned())
                        .collect::<Vec<_>>()
                        .join(","),
                )
            })
            .collect();
        out.push(Arrived {
            headers,
            payload: m.payload.to_vec(),
        });
    }
    out
}

/// How many messages stream `name` holds.
pub async fn nats_count(js: &jetstream::Context, name: &str) -> u64 {
    match js.get_stream(name).await {
        Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    }
}

// ---- RabbitMQ ----

/// A durable direct exchange `due` and a durable queue `jobs` bound to it
/// with routing key `jobs`; returns a channel to read with.
pub async fn rabbit_queue(url: &str) -> lapin::Channel {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_declare(
        "due".into(),
        lapin::ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        "jobs".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "jobs".into(),
        "due".into(),
        "jobs".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    // Keep the connection open for as long as the channel is used.
    std::mem::forget(conn);
    ch
}

/// A fresh reading channel (after a broker restart).
pub async fn rabbit_channel(url: &str) -> lapin::Channel {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    std::mem::forget(conn);
    ch
}

/// Takes (and acks) everything queue `jobs` holds now.
pub async fn rabbit_drain(ch: &lapin::Channel) -> Vec<Arrived> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get("jobs".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let props = &m.delivery.properties;
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        if let Some(id) = props.message_id() {
            headers.insert("message_id".into(), id.to_string());
        }
        if let Some(t) = props.headers() {
            for (k, v) in t.inner() {
                let text = match v {
                    AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                    other => format!("{other:?}"),
                };
                headers.insert(k.to_string(), text);
            }
        }
        if let Some(mode) = props.delivery_mode() {
            headers.insert("delivery_mode".into(), mode.to_string());
        }
        out.push(Arrived {
            headers,
            payload: m.delivery.data.clone(),
        });
    }
    out
}

/// How many messages each `rmq-key` arrived as.
pub fn copies(arrived: &[Arrived]) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for a in arrived {
        *n.entry(a.header("rmq-key").to_owned()).or_insert(0) += 1;
    }
    n
}

/// A sink whose first confirm of every message is "lost": it publishes,
/// then reports the broker unavailable, as when a connection dies between
/// the broker storing a message and its confirm arriving. The forwarder
/// then retries a message the broker already has.
pub struct LoseFirstConfirm<S>(pub S);

impl<S: rmq_forward::Sink> rmq_forward::Sink for LoseFirstConfirm<S> {
    async fn publish(
        &self,
        msg: &rmq::Received,
    ) -> Result<rmq_forward::Confirmed, rmq_forward::SinkError> {
        let confirmed = self.0.publish(msg).await?;
        if msg.attempt == 1 {
            return Err(rmq_forward::SinkError::Unavailable(
                "the confirm was lost".into(),
            ));
        }
        Ok(confirmed)
    }
}

/// Serial-order workload: `entities` entities with `each` messages apiece,
/// all of one entity in one slot (slot basis `e<entity>`), due 3 ms apart
/// in order; payload `e<entity>:<n>`.
pub fn entity_messages(entities: u64, each: u64) -> Vec<rmq::Message> {
    (0..each)
        .flat_map(|n| {
            (0..entities).map(move |e| {
                rmq::Message::new(format!("e{e}:{n}"))
                    .key(format!("e{e}:{n}"))
                    .slot_basis(format!("e{e}"))
                    .delay(Duration::from_millis(n * 3))
            })
        })
        .collect()
}

/// Asserts that each entity's messages arrived in order.
pub fn assert_entity_order(arrived: &[Arrived]) {
    let mut last = BTreeMap::<String, i64>::new();
    for a in arrived {
        let text = String::from_utf8(a.payload.clone()).unwrap();
        let (entity, n) = text.split_once(':').unwrap();
        let n: i64 = n.parse().unwrap();
        let prev = last.insert(entity.to_owned(), n).unwrap_or(-1);
        assert!(n > prev, "{entity}: {n} arrived after {prev}");
    }
}
