//! A duplicate that arrives while its key is in flight is not lost: it is
//! delivered after the in-flight delivery ends, whatever the end.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{Delivery, Message, Settled, Topic, TopicKind, TopicSpec};

async fn in_flight_with_duplicate() -> (
    Backend,
    Topic,
    rmq::Deliveries,
    rmq::CancellationToken,
    Delivery,
) {
    let (s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_attempts(2)
            .lease(Duration::from_millis(1000))
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    topic.send(Message::new("v1").key("k")).await.unwrap();
    let (mut st, stop) = stream(&topic, 2);
    let d = next(&mut st, 5).await.unwrap();
    let sent = topic.send(Message::new("v2").key("k")).await.unwrap();
    assert!(sent.behind_in_flight && !sent.merged);
    let again = topic.send(Message::new("v3").key("k")).await.unwrap();
    assert!(
        again.behind_in_flight && again.merged,
        "duplicates behind in flight merge too"
    );
    let early = tokio::time::timeout(
        Duration::from_millis(400),
        futures::StreamExt::next(&mut st),
    )
    .await;
    assert!(early.is_err(), "never two deliveries of one key at once");
    (s, topic, st, stop, d)
}

async fn expect_v3(topic: &Topic, st: &mut rmq::Deliveries) {
    let d = next(st, 5).await.expect("the duplicate is delivered");
    assert_eq!(d.payload, b"v3");
    assert_eq!(d.attempt, 1);
    d.ack().await.unwrap();
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.pending, t.in_flight, t.behind_in_flight), (0, 0, 0));
}

#[tokio::test]
async fn duplicate_in_flight_is_delivered_after_ack() {
    let (_s, topic, mut st, _stop, d) = in_flight_with_duplicate().await;
    d.ack().await.unwrap();
    expect_v3(&topic, &mut st).await;
}

#[tokio::test]
async fn duplicate_in_flight_is_delivered_after_nack() {
    let (_s, topic, mut st, _stop, d) = in_flight_with_duplicate().await;
    assert_eq!(d.nack(None, "fail").await.unwrap(), Settled::Superseded);
    expect_v3(&topic, &mut st).await;
}

#[tokio::test]
async fn duplicate_in_flight_is_delivered_after_lease_expiry() {
    let (_s, topic, mut st, _stop, d) = in_flight_with_duplicate().await;
    std::mem::forget(d);
    expect_v3(&topic, &mut st).await;
}

#[tokio::test]
async fn duplicate_in_flight_is_delivered_after_dead_letter() {
    let (_s, topic, mut st, _stop, d) = in_flight_with_duplicate().await;
    d.dead("poison").await.unwrap();
    expect_v3(&topic, &mut st).await;
    let dead = topic.dead_letters(10).await.unwrap();
    assert_eq!((dead.len(), dead[0].payload.as_slice()), (1, &b"v1"[..]));
}
