//! Shared by the store's tests: a throwaway PostgreSQL and Redis per test,
//! a migrated store, relays in the background, and a consumer that reports
//! what it finished.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use rmq::{CancellationToken, Received, TopicSpec};
pub use rmq_store::{Finisher, Relay, RelayOptions, RelayReport, Store, StoredTopic};
pub use rmq_test_support::{PostgresServer, RedisServer};

pub struct Setup {
    pub pg: PostgresServer,
    pub redis: RedisServer,
    pub store: Store,
    pub client: rmq::Client,
}

pub async fn setup() -> Setup {
    let pg = PostgresServer::start();
    let redis = RedisServer::start();
    let store = Store::connect_unchecked(&pg.conninfo()).await.unwrap();
    store.migrate().await.unwrap();
    let client = rmq::Client::connect(&redis.url()).await.unwrap();
    Setup {
        pg,
        redis,
        store,
        client,
    }
}

impl Setup {
    /// Defines the topic in the store and in Redis.
    pub async fn define(&self, spec: TopicSpec) -> (StoredTopic, rmq::Topic) {
        let stored = self.store.define_topic(&spec).await.unwrap();
        let topic = self.client.define_topic(spec).await.unwrap();
        (stored, topic)
    }

    /// A PostgreSQL connection of the application's.
    pub async fn app(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.pg.conninfo(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c
    }

    /// A relay running in the background until the token is cancelled.
    pub async fn relay(&self, options: RelayOptions) -> Running {
        let relay = Relay::connect(&self.pg.conninfo(), self.client.clone(), options)
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(relay.run(stop.clone()));
        Running { stop, task }
    }
}

pub fn fast(name: &str) -> RelayOptions {
    RelayOptions {
        name: name.to_string(),
        poll: Duration::from_millis(100),
        ..RelayOptions::default()
    }
}

pub struct Running {
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<RelayReport>,
}

impl Running {
    pub async fn stop(self) -> RelayReport {
        self.stop.cancel();
        self.task.await.unwrap()
    }
}

/// Consumes until `n` deliveries were acked or `within` passed (then a
/// little longer, to catch any extra delivery); reports each ack.
pub async fn consume(
    topic: &rmq::Topic,
    finisher: &Finisher,
    n: usize,
    within: Duration,
) -> Vec<Received> {
    consume_with(topic, finisher, n, within, true).await
}

/// Acks exactly `n` deliveries (or what came within `within`), reporting
/// each; what the consumer had taken beyond is given back when it closes.
pub async fn consume_exactly(
    topic: &rmq::Topic,
    finisher: &Finisher,
    n: usize,
    within: Duration,
) -> Vec<Received> {
    consume_with(topic, finisher, n, within, false).await
}

async fn consume_with(
    topic: &rmq::Topic,
    finisher: &Finisher,
    n: usize,
    within: Duration,
    linger: bool,
) -> Vec<Received> {
    let stop = CancellationToken::new();
    let mut deliveries = topic.consumer().concurrency(32).stream(stop.clone());
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    let mut extra_until: Option<Instant> = None;
    loop {
        let until = extra_until.unwrap_or(deadline);
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, deliveries.next()).await {
            Ok(Some(d)) => {
                let m = d.message().clone();
                d.ack().await.unwrap();
                finisher.acked(&m);
                got.push(m);
                if got.len() >= n && !linger {
                    break;
                }
                if got.len() >= n && extra_until.is_none() {
                    extra_until = Some(Instant::now() + Duration::from_millis(500));
                }
            }
            _ => break,
        }
    }
    stop.cancel();
    deliveries.close().await;
    finisher.flush().await;
    got
}

/// Priority messages `m{i}` with keys `k{i}` for `range`.
pub fn numbered(range: std::ops::Range<usize>) -> Vec<rmq::Message> {
    range
        .map(|i| {
            rmq::Message::new(format!("m{i}"))
                .key(format!("k{i}"))
                .priority(1)
        })
        .collect()
}

/// Commits [`numbered`] messages for `range` in transactions of `per_tx`.
pub async fn commit_numbered(
    stored: &StoredTopic,
    app: &mut tokio_postgres::Client,
    range: std::ops::Range<usize>,
    per_tx: usize,
) {
    for start in range.clone().step_by(per_tx) {
        let tx = app.transaction().await.unwrap();
        let batch = numbered(start..(start + per_tx).min(range.end));
        stored.send_batch(&tx, &batch).await.unwrap();
        tx.commit().await.unwrap();
    }
}

impl Setup {
    /// Commits `n` [`numbered`] messages and waits until a relay (started
    /// here, returned running) queued them all.
    pub async fn queued(&self, stored: &StoredTopic, n: usize) -> Running {
        let app = self.app().await;
        stored.send_batch(&app, &numbered(0..n)).await.unwrap();
        let relay = self.relay(fast("r")).await;
        let name = stored.name().to_string();
        eventually(Duration::from_secs(10), "all queued", || async {
            self.store.counts(&name).await.unwrap().queued == n as u64
        })
        .await;
        relay
    }
}

/// Waits until `f` holds (polling every 50 ms) or panics after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
