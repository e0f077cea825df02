//! `--store`: the PostgreSQL message store under the queue (`rmq-store`),
//! on a throwaway PostgreSQL (fsync on, as in production) and a throwaway
//! Redis.
//!
//! - **outbox**: sends committed by the application: one message per
//!   transaction (1 and 8 connections), 100 sends per transaction, and a
//!   batch of 100 per transaction.
//! - **relay**: rows already committed moved into Redis by 1 and by 2
//!   relays (batch 500).
//! - **latency**: commit to handler, one message every 5 ms with a relay
//!   and a consumer running (p50, p99).
//! - **far future**: messages due uniformly over the next 30 days, through
//!   the store (relay window 10 minutes), then to Redis alone (in that
//!   order: deleting the big topic frees memory lazily): Redis memory of
//!   each, and the store's table size.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use futures::StreamExt;
use rmq::{CancellationToken, Message, TopicKind, TopicSpec};
use rmq_store::{tokio_postgres, Relay, RelayOptions, Store};
use rmq_test_support::{PostgresServer, RedisServer};
use serde_json::json;

use crate::redis_stats::settled_used_memory;
use crate::report::{round, table, Row};

async fn pg(conninfo: &str) -> Result<tokio_postgres::Client> {
    let (c, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(c)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

fn order(i: usize) -> Message {
    Message::new(format!(
        "{{\"order\":{i},\"pad\":\"0123456789abcdef0123456789abcdef\"}}"
    ))
    .key(format!("order-{i:012}"))
    .priority(1)
}

fn emit(rows: &mut Vec<Row>, row: Row) {
    println!("{}", row.to_json());
    rows.push(row);
}

pub(crate) async fn measure(scale: f64) -> Result<()> {
    let postgres = PostgresServer::start_durable();
    let redis = RedisServer::start();
    let conninfo = postgres.conninfo();
    let store = Store::connect_unchecked(&conninfo).await?;
    store.migrate().await?;
    let client = rmq::Client::connect(&redis.url()).await?;
    let mut rows = Vec::new();
    let n = |base: f64| ((base * scale) as usize).max(100);

    // Outbox sends.
    let spec = TopicSpec::new("orders", TopicKind::Priority).slots(16);
    let orders = store.define_topic(&spec).await?;
    client.define_topic(spec).await?;
    for connections in [1usize, 8] {
        let total = n(5_000.0);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..connections {
            let (orders, conninfo) = (orders.clone(), conninfo.clone());
            tasks.push(tokio::spawn(async move {
                let mut app = pg(&conninfo).await?;
                for i in (c..total).step_by(connections) {
                    let tx = app.transaction().await?;
                    orders.send(&tx, &order(i)).await?;
                    tx.commit().await?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let row = Row::new(
            "outbox",
            TopicKind::Priority,
            json!({"per_tx": 1, "connections": connections}),
            total as u64,
            started.elapsed().as_secs_f64(),
        );
        emit(&mut rows, row);
        clear(&conninfo).await?;
    }
    for (label, batched) in [("100 sends", false), ("batch of 100", true)] {
        let total = n(100_000.0);
        let mut app = pg(&conninfo).await?;
        let started = Instant::now();
        for start in (0..total).step_by(100) {
            let tx = app.transaction().await?;
            let batch: Vec<Message> = (start..(start + 100).min(total)).map(order).collect();
            if batched {
                orders.send_batch(&tx, &batch).await?;
            } else {
                for m in &batch {
                    orders.send(&tx, m).await?;
                }
            }
            tx.commit().await?;
        }
        let row = Row::new(
            "outbox",
            TopicKind::Priority,
            json!({"per_tx": 100, "how": label}),
            total as u64,
            started.elapsed().as_secs_f64(),
        );
        emit(&mut rows, row);
        if batched {
            // These rows are the relay's work below.
            break;
        }
        clear(&conninfo).await?;
    }

    // Relay throughput: the rows committed above, then as many again for
    // two relays.
    for relays in [1usize, 2] {
        let total = store.counts("orders").await?.stored;
        let started = Instant::now();
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for r in 0..relays {
            let options = RelayOptions {
                name: format!("bench-{r}"),
                poll: Duration::from_millis(50),
                ..RelayOptions::default()
            };
            let relay = Relay::connect(&conninfo, client.clone(), options).await?;
            tasks.push(tokio::spawn(relay.run(stop.clone())));
        }
        while store.counts("orders").await?.stored > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let secs = started.elapsed().as_secs_f64();
        stop.cancel();
        for t in tasks {
            t.await?;
        }
        emit(
            &mut rows,
            Row::new(
                "relay",
                TopicKind::Priority,
                json!({"relays": relays, "batch": 500}),
                total,
                secs,
            ),
        );
        if relays == 1 {
            clear(&conninfo).await?;
            let mut app = pg(&conninfo).await?;
            for start in (0..total as usize).step_by(1_000) {
                let tx = app.transaction().await?;
                let batch: Vec<Message> = (start..(start + 1_000).min(total as usize))
                    .map(|i| order(i + 10_000_000))
                    .collect();
                orders.send_batch(&tx, &batch).await?;
                tx.commit().await?;
            }
        }
    }
    clear(&conninfo).await?;

    // Commit to handler.
    let samples = n(2_000.0);
    let lat = latency(&conninfo, &client, &store, samples).await?;
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    emit(
        &mut rows,
        Row::new(
            "latency",
            TopicKind::Priority,
            json!({"every_ms": 5}),
            samples as u64,
            0.0,
        )
        .with("commit_to_handler_p50_ms", round(p50, 2))
        .with("commit_to_handler_p99_ms", round(p99, 2)),
    );
    clear(&conninfo).await?;

    // Far future: 30 days of timers.
    let timers = n(10_000_000.0);
    let far = far_future(&conninfo, &store, &client, &redis, timers).await?;
    for row in far {
        emit(&mut rows, row);
    }
    eprintln!("\n{}", table(&rows));
    Ok(())
}

/// Empties the messages table (between measures).
async fn clear(conninfo: &str) -> Result<()> {
    pg(conninfo)
        .await?
        .batch_execute("TRUNCATE rmq_messages")
        .await?;
    Ok(())
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Commits one message every 5 ms (its payload: the commit time) with a
/// relay and a consumer running; returns each commit-to-handler time (ms),
/// sorted.
async fn latency(
    conninfo: &str,
    client: &rmq::Client,
    store: &Store,
    samples: usize,
) -> Result<Vec<f64>> {
    let orders = store
        .define_topic(&TopicSpec::new("latency", TopicKind::Priority).slots(16))
        .await?;
    let stop = CancellationToken::new();
    let relay = Relay::connect(
        conninfo,
        client.clone(),
        RelayOptions {
            name: "latency".into(),
            ..RelayOptions::default()
        },
    )
    .await?;
    let relay = tokio::spawn(relay.run(stop.clone()));
    client
        .define_topic(TopicSpec::new("latency", TopicKind::Priority).slots(16))
        .await?;
    let topic = client.topic("latency").await?;
    let mut deliveries = crate::env::consumer(&topic)
        .concurrency(16)
        .stream(stop.clone());
    let consumer = tokio::spawn(async move {
        let mut got = Vec::with_capacity(samples);
        while got.len() < samples {
            let Some(d) = deliveries.next().await else {
                break;
            };
            let sent: f64 = std::str::from_utf8(&d.message().payload)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0.0);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
            got.push(now - sent);
            let _ = d.ack().await;
        }
        deliveries.close().await;
        got
    });
    let mut app = pg(conninfo).await?;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    for i in 0..samples {
        tick.tick().await;
        let tx = app.transaction().await?;
        tx.execute("SELECT 1", &[]).await?;
        // The commit time is taken just before COMMIT: the payload is
        // written in the transaction, so it is the time before it.
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        orders
            .send(
                &tx,
                &Message::new(format!("{at:.3}"))
                    .key(format!("lat-{i}"))
                    .priority(1),
            )
            .await?;
        tx.commit().await?;
    }
    let mut got = tokio::time::timeout(Duration::from_secs(60), consumer)
        .await
        .context("latency: not every message arrived")??;
    stop.cancel();
    relay.await?;
    got.sort_by(f64::total_cmp);
    Ok(got)
}

/// `total` timers due uniformly over 30 days: Redis memory holding them
/// all in Redis, and through the store (window 10 minutes).
async fn far_future(
    conninfo: &str,
    store: &Store,
    client: &rmq::Client,
    redis: &RedisServer,
    total: usize,
) -> Result<Vec<Row>> {
    let span_ms = 30 * 86_400_000i64;
    let start_ms = now_ms() + 60_000;
    let due = |i: usize| start_ms + (i as i64 * span_ms) / total as i64;
    let timer = |i: usize| {
        Message::new(format!("{{\"close_order\":{i}}}"))
            .key(format!("order-{i:012}"))
            .at_ms(due(i))
    };
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let mut out = Vec::new();

    // Through the store.
    let spec = TopicSpec::new("timers", TopicKind::FixedTime).slots(16);
    let timers = store.define_topic(&spec).await?;
    client.define_topic(spec).await?;
    let before = settled_used_memory(&mut conn).await?;
    let mut app = pg(conninfo).await?;
    let started = Instant::now();
    for start in (0..total).step_by(1_000) {
        let tx = app.transaction().await?;
        let batch: Vec<Message> = (start..(start + 1_000).min(total)).map(timer).collect();
        timers.send_batch(&tx, &batch).await?;
        tx.commit().await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut relay = Relay::connect(
        conninfo,
        client.clone(),
        RelayOptions {
            name: "far".into(),
            ..RelayOptions::default()
        },
    )
    .await?;
    while relay.round().await? {}
    let after = settled_used_memory(&mut conn).await?;
    let in_redis = store.counts("timers").await?.queued;
    let table_bytes: i64 = app
        .query_one("SELECT pg_total_relation_size('rmq_messages')", &[])
        .await?
        .get(0);
    out.push(
        Row::new(
            "far future",
            TopicKind::FixedTime,
            json!({"where": "store, window 10 min", "days": 30}),
            total as u64,
            secs,
        )
        .with("in_redis", in_redis)
        .with("redis_mb", round((after - before) / 1e6, 2))
        .with("postgres_mb", round(table_bytes as f64 / 1e6, 1))
        .with(
            "postgres_bytes_per_msg",
            round(table_bytes as f64 / total as f64, 1),
        ),
    );
    // Redis alone.
    let alone = client
        .define_topic(TopicSpec::new("timers-redis", TopicKind::FixedTime).slots(16))
        .await?;
    let before = settled_used_memory(&mut conn).await?;
    let started = Instant::now();
    for start in (0..total).step_by(1_000) {
        let batch: Vec<Message> = (start..(start + 1_000).min(total)).map(timer).collect();
        alone.send_batch(&batch).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let after = settled_used_memory(&mut conn).await?;
    out.push(
        Row::new(
            "far future",
            TopicKind::FixedTime,
            json!({"where": "Redis alone", "days": 30}),
            total as u64,
            secs,
        )
        .with("redis_mb", round((after - before) / 1e6, 1))
        .with(
            "redis_bytes_per_msg",
            round((after - before) / total as f64, 1),
        ),
    );
    client.delete_topic("timers-redis", true).await?;

    Ok(out)
}
