//! Shared by the integration tests: a throwaway Redis per test and helpers
//! that take messages by hand (to drive the two phases step by step).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use rmq::{CancellationToken, Client, Deliveries, Delivery, Topic, TopicKind, TopicSpec};
pub use rmq_test_support::RedisServer;

pub async fn setup(kind: TopicKind, slots: u32) -> (RedisServer, Client, Topic) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.expect("connect");
    let topic = client
        .define_topic(
            TopicSpec::new("t", kind)
                .slots(slots)
                .backoff(Duration::from_millis(20), Duration::from_millis(100)),
        )
        .await
        .expect("define");
    (server, client, topic)
}

pub async fn setup_with(spec: TopicSpec) -> (RedisServer, Client, Topic) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.expect("connect");
    let topic = client.define_topic(spec).await.expect("define");
    (server, client, topic)
}

/// A stream consumer whose deliveries are ended by hand.
pub fn stream(topic: &Topic, concurrency: usize) -> (Deliveries, CancellationToken) {
    let stop = CancellationToken::new();
    let s = topic
        .consumer()
        .concurrency(concurrency)
        .batch(concurrency)
        .rescan(Duration::from_millis(200))
        .stream(stop.clone());
    (s, stop)
}

/// The next delivery within `secs`, or None.
pub async fn next(s: &mut Deliveries, secs: u64) -> Option<Delivery> {
    tokio::time::timeout(Duration::from_secs(secs), s.next())
        .await
        .ok()
        .flatten()
}

/// Takes every delivery that arrives within `quiet` of the previous one.
pub async fn drain(s: &mut Deliveries, quiet: Duration) -> Vec<Delivery> {
    let mut out = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(quiet, s.next()).await {
        out.push(d);
    }
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
