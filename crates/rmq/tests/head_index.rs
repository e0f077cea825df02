//! The head index (a single node): an idle consumer reads one key instead
//! of looking at every slot, so what it costs Redis does not grow with the
//! slot count, and what it learns from that key is enough: new messages,
//! a notice lost with the pub/sub connection, a crashed consumer's lease.
//! On a cluster a consumer still looks at every slot (these tests run on
//! one node only).
#![allow(clippy::unwrap_used)]
mod common;

use std::time::{Duration, Instant};

use common::*;
use rmq::{Message, Topic, TopicKind, TopicSpec};

/// Script calls made until none came for 500 ms (start-up), then over
/// `idle` of idling.
async fn start_up_and_idle_calls(server: &Backend, idle: Duration) -> (u64, u64) {
    let first = calls(server).await;
    let mut before = first;
    let quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = calls(server).await;
        if now == before || quiet_since.elapsed() > Duration::from_secs(20) {
            break;
        }
        before = now;
    }
    tokio::time::sleep(idle).await;
    (before - first, calls(server).await - before)
}

fn head_index_of(topic: &Topic) -> String {
    let slot_key = &topic.keys_of_slot(0)[0];
    let prefix = slot_key.split(":{").next().unwrap();
    format!("{prefix}:heads:{}", topic.name())
}

fn single_node() -> bool {
    std::env::var("RMQ_TEST_CLUSTER").map_or(true, |v| v != "1")
}

#[tokio::test]
async fn an_idle_consumer_costs_a_few_calls_whether_its_topic_has_one_slot_or_65536() {
    if !single_node() {
        return;
    }
    for slots in [1, 65_536] {
        let (server, _c, topic) = setup(TopicKind::FixedTime, slots).await;
        let before = calls(&server).await;
        let stop = rmq::CancellationToken::new();
        // The default rescan (5 s): one index read and a sweep of four
        // slots each time.
        let mut s = topic.consumer().stream(stop.clone());
        let (start_up, idle) = start_up_and_idle_calls(&server, Duration::from_secs(10)).await;
        assert!(
            start_up <= 10,
            "{slots} slots: {start_up} script calls to start ({} before)",
            before
        );
        assert!(
            idle <= 20,
            "{slots} slots: {idle} script calls in 10 s of idling"
        );
        // ...and a message still wakes it at once.
        topic
            .send(Message::new("wake").delay(Duration::ZERO))
            .await
            .unwrap();
        let d = next(&mut s, 2).await.expect("woken by the notice");
        d.ack().await.unwrap();
        stop.cancel();
    }
}

#[tokio::test]
async fn a_topic_without_a_complete_index_is_looked_at_once_then_read_through_it() {
    if !single_node() {
        return;
    }
    // A topic written before the index existed: its messages are there,
    // its index is not marked complete.
    let (server, _c, topic) = setup(TopicKind::Priority, 1024).await;
    for i in 0..50 {
        topic.send(Message::new(format!("m{i}"))).await.unwrap();
    }
    let index = head_index_of(&topic);
    raw(&server, &["DEL", &index]).await;
    let stop = rmq::CancellationToken::new();
    let mut s = topic.consumer().stream(stop.clone());
    let mut got = 0;
    while let Some(d) = next(&mut s, 3).await {
        d.ack().await.unwrap();
        got += 1;
    }
    assert_eq!(got, 50, "every message found by looking at every slot");
    stop.cancel();
    let marked = raw(&server, &["ZSCORE", &index, "*"]).await;
    assert_ne!(
        marked,
        redis::Value::Nil,
        "the index is marked complete after the look"
    );
    // A second consumer starts through the index.
    let stop = rmq::CancellationToken::new();
    let _s2 = topic.consumer().stream(stop.clone());
    let (start_up, _) = start_up_and_idle_calls(&server, Duration::ZERO).await;
    assert!(
        start_up <= 10,
        "{start_up} script calls to start on 1024 slots"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_notice_lost_with_the_pubsub_connection_is_made_up_for_at_once() {
    if !single_node() {
        return;
    }
    let (server, _c, topic) = setup(TopicKind::Priority, 1024).await;
    let stop = rmq::CancellationToken::new();
    // No rescan within the test: only the look after reconnecting can
    // find the message.
    let mut s = topic
        .consumer()
        .rescan(Duration::from_secs(600))
        .stream(stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..5 {
        raw(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        topic.send(Message::new(format!("lost {i}"))).await.unwrap();
        let d = next(&mut s, 3).await.expect("found after the reconnection");
        assert_eq!(text(&d.payload), format!("lost {i}"));
        d.ack().await.unwrap();
    }
    stop.cancel();
}

#[tokio::test]
async fn a_crashed_consumers_delivery_is_retaken_at_its_lease_end_by_a_consumer_started_later() {
    if !single_node() {
        return;
    }
    let (_server, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1024)
            .lease(Duration::from_millis(1_500))
            .backoff(Duration::ZERO, Duration::ZERO),
    )
    .await;
    topic.send(Message::new("crashes")).await.unwrap();
    let taken = topic.take(1).await.unwrap();
    assert_eq!(taken.len(), 1);
    let crashed_at = Instant::now();
    // The taker dies: no settle, no release, no notice.
    std::mem::forget(taken);
    // A consumer started now learns the lease deadline from the index
    // alone (no rescan within the test, and nothing is announced).
    let stop = rmq::CancellationToken::new();
    let mut s = topic
        .consumer()
        .rescan(Duration::from_secs(600))
        .stream(stop.clone());
    let d = next(&mut s, 6)
        .await
        .expect("taken again at the lease's end");
    assert_eq!((text(&d.payload).as_str(), d.attempt), ("crashes", 2));
    assert!(crashed_at.elapsed() >= Duration::from_millis(1_400));
    d.ack().await.unwrap();
    stop.cancel();
}
