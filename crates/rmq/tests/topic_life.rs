//! A topic's life after its definition: settings updated while consumers
//! run (they follow within seconds), a delete that refuses while the topic
//! is in use and, forced under traffic, stops its consumers (parallel and
//! serial) and producers and leaves no key behind, groups included; dead letters that expire by age.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::{Duration, Instant};

use common::*;
use rmq::{DeadSelection, ErrorKind, Message, Outcome, Settled, TopicKind, TopicSpec};

/// Longer than a handle's reading interval of the definition (2 s).
const FOLLOW: Duration = Duration::from_millis(2_600);

#[tokio::test]
async fn a_running_consumer_follows_an_update_within_seconds() {
    let (_b, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .max_attempts(5)
            .backoff(Duration::ZERO, Duration::ZERO),
    )
    .await;
    let (mut s, _stop) = stream(&topic, 1);
    topic.send(Message::new("v").key("k")).await.unwrap();
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!(
        d.nack(None, "x").await.unwrap(),
        Settled::Done,
        "5 attempts: a retry"
    );
    let d = next(&mut s, 5).await.unwrap();
    let updated = client
        .update_topic("t", |s| s.max_attempts(1))
        .await
        .unwrap();
    assert_eq!(updated.spec().max_attempts, 1);
    // The consumer holds the second delivery while it reads the change.
    tokio::time::sleep(FOLLOW).await;
    d.release().await.unwrap();
    let started = Instant::now();
    let d = loop {
        let d = next(&mut s, 5).await.unwrap();
        if topic.spec().max_attempts == 1 || started.elapsed() > Duration::from_secs(10) {
            break d;
        }
        d.release().await.unwrap();
    };
    assert_eq!(topic.spec().max_attempts, 1, "the handle read the update");
    assert_eq!(
        d.nack(None, "x").await.unwrap(),
        Settled::Dead,
        "1 attempt now: dead"
    );
    // Sends follow too: a smaller payload limit refuses what it allowed.
    client
        .update_topic("t", |s| s.max_payload_bytes(4))
        .await
        .unwrap();
    tokio::time::sleep(FOLLOW).await;
    let e = topic
        .send(Message::new("too long").key("k2"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PayloadTooLarge);
}

#[tokio::test]
async fn an_update_never_changes_kind_or_slots_and_is_validated() {
    let (_b, client, topic) = setup(TopicKind::FixedTime, 4).await;
    let before = (*topic.spec()).clone();
    for change in [
        Box::new(|s: TopicSpec| s.slots(8)) as Box<dyn Fn(TopicSpec) -> TopicSpec>,
        Box::new(|s: TopicSpec| TopicSpec {
            kind: TopicKind::Priority,
            ..s
        }),
        Box::new(|s: TopicSpec| s.lease(Duration::ZERO)),
    ] {
        let e = client.update_topic("t", change).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    let e = client.update_topic("nope", |s| s).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopic);
    assert_eq!(
        *client.topic("t").await.unwrap().spec(),
        before,
        "nothing changed"
    );
}

#[tokio::test]
async fn a_delete_refuses_while_the_topic_holds_messages_or_has_consumers() {
    let (_b, client, topic) = setup(TopicKind::Priority, 4).await;
    topic.send(Message::new("v").key("k")).await.unwrap();
    let e = client.delete_topic("t", false).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TopicInUse, "{e}");
    let (mut s, stop) = stream(&topic, 1);
    next(&mut s, 5).await.unwrap().ack().await.unwrap();
    // A consumer is seen by its wake-up subscription, which its listener
    // makes beside the fetch loop: on a loaded host (and a cluster, one
    // SSUBSCRIBE per hash tag) it can come after the first delivery.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while topic.consumers().await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let e = client.delete_topic("t", false).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TopicInUse, "a live consumer: {e}");
    assert!(e.to_string().contains("1 live consumers"), "{e}");
    stop.cancel();
    s.close().await;
    // Its subscription ends with it.
    let mut deleted = None;
    for _ in 0..50 {
        match client.delete_topic("t", false).await {
            Ok(d) => {
                deleted = Some(d);
                break;
            }
            Err(e) if e.kind() == ErrorKind::TopicInUse => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(deleted.unwrap().messages, 0);
    let e = client.topic("t").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopic);
}

#[tokio::test]
async fn a_forced_delete_under_traffic_stops_everyone_and_leaves_no_key() {
    let (backend, client, topic) = setup(TopicKind::Priority, 8).await;
    let producer = {
        let topic = topic.clone();
        tokio::spawn(async move {
            let mut i = 0u64;
            loop {
                i += 1;
                match topic.send(Message::new(format!("m{i}"))).await {
                    Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                    Err(e) => return (i, e),
                }
            }
        })
    };
    let consumer = {
        let topic = topic.clone();
        tokio::spawn(async move {
            topic
                .consumer()
                .concurrency(4)
                .run(rmq::CancellationToken::new(), |_| async {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Outcome::Ack
                })
                .await
        })
    };
    let serial = {
        let topic = topic.clone();
        tokio::spawn(async move {
            topic
                .consumer()
                .serial("g")
                .run(rmq::CancellationToken::new(), |_| async { Outcome::Ack })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    if let Backend::Single(_) = backend {
        // A member that died without leaving: its entry would stay.
        raw(
            &backend,
            &["HSET", "rmq:group:t:g", "gone-member", "99999999999999"],
        )
        .await;
    }
    let deleted = client.delete_topic("t", true).await.unwrap();
    assert_eq!(deleted.slots, 8);
    let (sent, e) = tokio::time::timeout(Duration::from_secs(10), producer)
        .await
        .expect("the producer stops")
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::UnknownTopic, "after {sent} sends: {e}");
    let run = tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .expect("the consumer stops")
        .unwrap();
    assert_eq!(run.unwrap_err().kind(), ErrorKind::UnknownTopic);
    let run = tokio::time::timeout(Duration::from_secs(10), serial)
        .await
        .expect("the serial consumer stops")
        .unwrap();
    assert_eq!(run.unwrap_err().kind(), ErrorKind::UnknownTopic);
    // Its group's membership hash goes with the topic.
    // On a cluster every node is asked (the head index lies on all of them).
    let urls = match &backend {
        Backend::Single(s) => vec![s.url()],
        Backend::Cluster(c) => c.urls(),
    };
    for url in urls {
        let node = redis::Client::open(url.as_str()).unwrap();
        let mut conn = node.get_multiplexed_async_connection().await.unwrap();
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("rmq:*")
            .query_async(&mut conn)
            .await
            .unwrap();
        // A cluster's memoized answers expire on their own.
        let left: Vec<&String> = left.iter().filter(|k| !k.contains(":req:")).collect();
        assert!(left.is_empty(), "keys left behind on {url}: {left:?}");
    }
    // The name is free again, for any definition.
    client
        .define_topic(TopicSpec::new("t", TopicKind::FixedTime).slots(2))
        .await
        .unwrap();
}

#[tokio::test]
async fn dead_letters_expire_by_age_without_a_sweeper() {
    let (_b, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_attempts(1)
            .dead_letter_ttl(Duration::from_millis(300)),
    )
    .await;
    topic.send(Message::new("v").key("a")).await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    d.dead("boom").await.unwrap();
    assert_eq!(topic.stats().await.unwrap().total.dead, 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The next pop of the slot trims it.
    assert!(topic.take(1).await.unwrap().is_empty());
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.dead, t.dead_dropped), (0, 1));
    // And by hand, by age: only the old ones go.
    client
        .update_topic("t", |s| s.dead_letter_ttl(Duration::ZERO))
        .await
        .unwrap();
    tokio::time::sleep(FOLLOW).await;
    for key in ["old", "new"] {
        topic.send(Message::new("v").key(key)).await.unwrap();
        let d = topic.take(1).await.unwrap().pop().unwrap();
        d.dead("boom").await.unwrap();
        if key == "old" {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let purged = topic
        .purge_dead(DeadSelection::OlderThan(Duration::from_millis(250)))
        .await
        .unwrap();
    assert_eq!(purged, 1);
    let left = topic.dead_letters(10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key, b"new");
}
