//! Recovery after Redis lost its data: nothing committed and not yet acked
//! is lost, and what Redis still has is not doubled.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use rmq::{Message, State, TopicKind, TopicSpec};

async fn flushall(redis: &RedisServer) {
    let c = redis::Client::open(redis.url()).unwrap();
    let mut conn = c.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_flushall_the_relay_recovers_every_message_not_acked() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await;
    let relay = s.queued(&stored, 1_000).await;
    // 400 are consumed and acked (and reported) before Redis loses all.
    let finisher = s.store.finisher().await.unwrap();
    let first = consume_exactly(&topic, &finisher, 400, Duration::from_secs(10)).await;
    let acked: HashSet<Vec<u8>> = first.iter().map(|m| m.key.clone()).collect();
    assert_eq!(first.len(), 400);
    flushall(&s.redis).await;
    // The relay sees the topic gone, defines it again and recovers.
    eventually(Duration::from_secs(10), "topic defined again", || async {
        s.client.topic("t").await.is_ok()
    })
    .await;
    let topic = s.client.topic("t").await.unwrap();
    let rest = consume(
        &topic,
        &finisher,
        1_000 - acked.len(),
        Duration::from_secs(20),
    )
    .await;
    let report = relay.stop().await;
    let again: HashSet<Vec<u8>> = rest.iter().map(|m| m.key.clone()).collect();
    assert_eq!(again.len(), rest.len(), "each recovered message once");
    assert!(acked.is_disjoint(&again), "an acked message came back");
    assert_eq!(
        acked.len() + again.len(),
        1_000,
        "every message not acked came back"
    );
    assert_eq!(
        report.recovered.requeued as usize,
        1_000 - acked.len(),
        "{report:?}"
    );
    let c = s.store.counts("t").await.unwrap();
    assert_eq!((c.stored, c.queued, c.done), (0, 0, 1_000), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_requeues_only_what_redis_lost_and_never_doubles_what_it_kept() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(4))
        .await;
    let relay = s.queued(&stored, 300).await;
    relay.stop().await;
    // A failover that lost some writes: 100 keys vanish, the topic stays.
    for i in 0..100 {
        let key = format!("k{i}");
        let out = topic.cancel(&[key.as_bytes()]).await.unwrap();
        assert!(
            matches!(out[0], rmq::CancelOutcome::Cancelled(_)),
            "{out:?}"
        );
    }
    // One is in flight when recovery runs: it must not be doubled.
    let stop = rmq::CancellationToken::new();
    let mut deliveries = topic
        .consumer()
        .concurrency(1)
        .batch(1)
        .stream(stop.clone());
    let held = futures::StreamExt::next(&mut deliveries).await.unwrap();
    assert_eq!(
        topic.get(&held.message().key).await.unwrap().state,
        State::InFlight
    );
    let r = s.store.recover(&s.client, Some("t")).await.unwrap();
    assert_eq!(
        (r.checked, r.requeued, r.still_in_redis),
        (300, 100, 200),
        "{r:?}"
    );
    held.ack().await.unwrap();
    stop.cancel();
    deliveries.close().await;
    let relay = s.relay(fast("r")).await;
    let finisher = s.store.finisher().await.unwrap();
    let got = consume(&topic, &finisher, 299, Duration::from_secs(20)).await;
    relay.stop().await;
    let keys: HashSet<Vec<u8>> = got.iter().map(|m| m.key.clone()).collect();
    assert_eq!(keys.len(), got.len(), "nothing doubled");
    assert_eq!(
        keys.len(),
        299,
        "the 100 lost ones came back, the in-flight one was not re-sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_finished_by_recovery_but_an_older_one_does_not_hide_a_lost_message() {
    let s = setup().await;
    let (stored, topic) = s
        .define(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(2)
                .max_attempts(1),
        )
        .await;
    let app = s.app().await;
    let relay = s.relay(fast("r")).await;
    // "old" dies in Redis, and nobody tells the store.
    stored
        .send(&app, &Message::new("v").key("old").priority(1))
        .await
        .unwrap();
    let stop = rmq::CancellationToken::new();
    let mut deliveries = topic.consumer().stream(stop.clone());
    let d = futures::StreamExt::next(&mut deliveries).await.unwrap();
    assert_eq!(d.nack(None, "boom").await.unwrap(), rmq::Settled::Dead);
    stop.cancel();
    deliveries.close().await;
    // "again" died once before; its new message is queued, then lost.
    stored
        .send(&app, &Message::new("v").key("again").priority(1))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "queued", || async {
        topic.get(b"again").await.unwrap().state == State::Pending
    })
    .await;
    relay.stop().await;
    let stop = rmq::CancellationToken::new();
    let mut deliveries = topic.consumer().stream(stop.clone());
    let d = futures::StreamExt::next(&mut deliveries).await.unwrap();
    assert_eq!(d.message().key, b"again");
    assert_eq!(d.nack(None, "boom").await.unwrap(), rmq::Settled::Dead);
    stop.cancel();
    deliveries.close().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    stored
        .send(&app, &Message::new("v2").key("again").priority(1))
        .await
        .unwrap();
    let relay = s.relay(fast("r")).await;
    eventually(Duration::from_secs(10), "the new one queued", || async {
        topic.get(b"again").await.unwrap().state == State::Pending
    })
    .await;
    relay.stop().await;
    let out = topic.cancel(&[b"again"]).await.unwrap();
    assert!(
        matches!(out[0], rmq::CancelOutcome::Cancelled(_)),
        "{out:?}"
    );
    assert_eq!(
        topic.get(b"again").await.unwrap().state,
        State::Dead,
        "only the old dead letter left"
    );
    let r = s.store.recover(&s.client, Some("t")).await.unwrap();
    // "old" and the first "again": dead letters the store had not heard of;
    // the second "again": lost, back to stored.
    assert_eq!((r.checked, r.dead, r.requeued), (3, 2, 1), "{r:?}");
    let c = s.store.counts("t").await.unwrap();
    assert_eq!((c.stored, c.queued, c.dead), (1, 0, 2), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_that_a_dead_relay_began_is_finished_by_the_next_relay() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await;
    let app = s.app().await;
    let relay = s.queued(&stored, 50).await;
    relay.stop().await;
    // A relay saw the topic gone, marked it and defined it again, then
    // died before recovering: Redis has the topic, empty.
    flushall(&s.redis).await;
    s.client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    app.execute(
        "UPDATE rmq_topics SET needs_recovery = true WHERE name = 't'",
        &[],
    )
    .await
    .unwrap();
    let relay = s.relay(fast("next")).await;
    eventually(Duration::from_secs(10), "the 50 back in Redis", || async {
        topic.stats().await.unwrap().total.pending == 50
    })
    .await;
    let report = relay.stop().await;
    assert_eq!(report.recovered.requeued, 50, "{report:?}");
    let left: bool = app
        .query_one(
            "SELECT needs_recovery FROM rmq_topics WHERE name = 't'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!left, "the mark is cleared once recovered");
}

/// Queued rows of `topic` (sent to Redis, as the store believes), made in
/// one statement: what a recovery has to look up one by one.
async fn queued_rows(app: &tokio_postgres::Client, topic: &str, n: i64) {
    app.execute(
        "INSERT INTO rmq_messages (topic, slot, merge_key, payload, priority, load_ms, status, queued_ms)
         SELECT $1, 0, convert_to('q' || i, 'UTF8'), '\\x00'::bytea, 1, 0, 'queued', rmq_now_ms()
         FROM generate_series(1, $2::int8) AS i",
        &[&topic, &n],
    )
    .await
    .unwrap();
    app.batch_execute("ANALYZE rmq_messages").await.unwrap();
}

async fn needs_recovery(app: &tokio_postgres::Client, topic: &str) -> bool {
    app.query_one(
        "SELECT needs_recovery FROM rmq_topics WHERE name = $1",
        &[&topic],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_recovery_does_not_hold_back_the_other_topics() {
    const LOST: i64 = 20_000;
    let s = setup().await;
    // "big" is in the store only, with many rows the store believes are in
    // Redis: the relay defines it and recovers every row, one lookup each.
    let big = TopicSpec::new("big", TopicKind::Priority).slots(1);
    s.store.define_topic(&big).await.unwrap();
    let app = s.app().await;
    queued_rows(&app, "big", LOST).await;
    let (small, small_topic) = s
        .define(TopicSpec::new("small", TopicKind::Priority).slots(1))
        .await;
    small
        .send_batch(&app, &[Message::new("now").key("now").priority(1)])
        .await
        .unwrap();
    let relay = s.relay(fast("r")).await;
    eventually(
        Duration::from_secs(20),
        "small's message in Redis",
        || async { small_topic.get(b"now").await.unwrap().state == State::Pending },
    )
    .await;
    assert!(
        needs_recovery(&app, "big").await,
        "small's message waited for big's recovery to end"
    );
    let t0 = std::time::Instant::now();
    eventually(Duration::from_secs(120), "big recovered", || async {
        !needs_recovery(&app, "big").await
    })
    .await;
    eprintln!("recovered in {:?}", t0.elapsed());
    let big_topic = s.client.topic("big").await.unwrap();
    eventually(
        Duration::from_secs(30),
        "big's rows back in Redis",
        || async { big_topic.stats().await.unwrap().total.pending == LOST as u64 },
    )
    .await;
    let report = relay.stop().await;
    assert_eq!(report.recovered.requeued, LOST as u64, "{report:?}");
    let c = s.store.counts("big").await.unwrap();
    assert_eq!((c.stored, c.queued), (0, LOST as u64), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_stopped_mid_recovery_leaves_it_marked_for_the_next() {
    const LOST: i64 = 50_000;
    let s = setup().await;
    let big = TopicSpec::new("big", TopicKind::Priority).slots(1);
    s.store.define_topic(&big).await.unwrap();
    let app = s.app().await;
    queued_rows(&app, "big", LOST).await;
    let relay = s.relay(fast("r")).await;
    eventually(Duration::from_secs(20), "big defined again", || async {
        s.client.topic("big").await.is_ok()
    })
    .await;
    let started = std::time::Instant::now();
    relay.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a stop waits for a recovery only briefly: {:?}",
        started.elapsed()
    );
    if needs_recovery(&app, "big").await {
        // Cut short: the next relay does it all (what the first requeued
        // is stored, and moves; nothing is lost).
        let relay = s.relay(fast("next")).await;
        eventually(Duration::from_secs(120), "big recovered", || async {
            !needs_recovery(&app, "big").await
        })
        .await;
        relay.stop().await;
    }
    let relay = s.relay(fast("last")).await;
    let big_topic = s.client.topic("big").await.unwrap();
    eventually(
        Duration::from_secs(60),
        "every row back in Redis",
        || async { big_topic.stats().await.unwrap().total.pending == LOST as u64 },
    )
    .await;
    relay.stop().await;
    let c = s.store.counts("big").await.unwrap();
    assert_eq!((c.stored, c.queued), (0, LOST as u64), "{c:?}");
}
