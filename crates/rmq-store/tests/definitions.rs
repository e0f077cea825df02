//! Topic definitions in the store: one unreadable definition is reported
//! and skipped, never stopping the other topics; the store's copy follows
//! `rmq topic update`, so a topic Redis lost comes back with its current
//! settings.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use rmq::{TopicKind, TopicSpec};

async fn flushall(redis: &RedisServer) {
    let c = redis::Client::open(redis.url()).unwrap();
    let mut conn = c.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_topic_definition_is_reported_and_the_others_still_move() {
    let s = setup().await;
    let (good, good_t) = s
        .define(TopicSpec::new("good", TopicKind::Priority).slots(2))
        .await;
    let (bad, _) = s
        .define(TopicSpec::new("bad", TopicKind::Priority).slots(2))
        .await;
    let mut app = s.app().await;
    commit_numbered(&bad, &mut app, 0..5, 5).await;
    // A definition this rmq cannot read (written by hand, or by another
    // version).
    app.execute(
        "UPDATE rmq_topics SET spec = spec - 'kind' WHERE name = 'bad'",
        &[],
    )
    .await
    .unwrap();
    let relay = s.relay(fast("r")).await;
    commit_numbered(&good, &mut app, 0..100, 50).await;
    eventually(
        Duration::from_secs(20),
        "the good topic's rows in Redis",
        || async { good_t.stats().await.unwrap().total.pending == 100 },
    )
    .await;
    relay.stop().await;
    assert_eq!(
        s.store.counts("bad").await.unwrap().stored,
        5,
        "left stored"
    );

    // Stats show every topic, the bad one with what is wrong with it.
    let stats = s.store.stats().await.unwrap();
    let names: Vec<&str> = stats.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["bad", "good"]);
    let problem = stats[0].problem.as_deref().unwrap_or_default();
    assert!(problem.contains("kind"), "{stats:?}");
    assert_eq!(stats[0].counts.stored, 5);
    assert_eq!(
        (stats[1].problem.as_deref(), stats[1].counts.queued),
        (None, 100)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_update_survives_redis_losing_its_data() {
    let s = setup().await;
    let (stored, _) = s
        .define(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(2)
                .max_attempts(7)
                .max_pending(100_000),
        )
        .await;
    let relay = s.relay(fast("r")).await;
    s.client
        .update_topic("t", |spec| spec.max_attempts(1).max_pending(10))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the store's copy follows the update",
        || async {
            let spec = s.store.topic("t").await.unwrap().spec().clone();
            (spec.max_attempts, spec.max_pending) == (1, 10)
        },
    )
    .await;
    let app = s.app().await;
    stored.send_batch(&app, &numbered(0..5)).await.unwrap();
    flushall(&s.redis).await;
    eventually(
        Duration::from_secs(20),
        "the topic defined again",
        || async { s.client.topic("t").await.is_ok() },
    )
    .await;
    let spec = s.client.topic("t").await.unwrap().spec();
    assert_eq!(
        (spec.max_attempts, spec.max_pending),
        (1, 10),
        "defined again with the updated settings: {spec:?}"
    );
    relay.stop().await;
}
