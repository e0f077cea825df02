//! I2 Merge: per topic and key at most one pending entry, and each kind's
//! merge rule (due time / priority / payload) holds.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{Message, TopicKind};

#[tokio::test]
async fn range_merge_keeps_first_due_time_and_newest_payload() {
    let (_s, _c, topic) = setup(TopicKind::RangeMerge, 4).await;
    let first = topic
        .send(
            Message::new("v1")
                .key("sku")
                .range(Duration::from_millis(400)),
        )
        .await
        .unwrap();
    assert!(!first.merged);
    let due1 = topic.peek(1).await.unwrap()[0].due_ms.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = topic
        .send(
            Message::new("v2")
                .key("sku")
                .range(Duration::from_millis(5_000)),
        )
        .await
        .unwrap();
    assert!(second.merged);
    let p = topic.peek(10).await.unwrap();
    assert_eq!(p.len(), 1, "one pending entry per key");
    assert_eq!(p[0].due_ms.unwrap(), due1, "the window is not extended");
    assert_eq!(p[0].payload, b"v2", "the newest payload wins");
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.sent, st.merged, st.pending), (2, 1, 1));
}

#[tokio::test]
async fn priority_merge_last_priority_and_payload_win() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 1).await;
    topic
        .send(Message::new("a1").key("a").priority(5))
        .await
        .unwrap();
    topic
        .send(Message::new("b").key("b").priority(7))
        .await
        .unwrap();
    let m = topic
        .send(Message::new("a2").key("a").priority(9))
        .await
        .unwrap();
    assert!(m.merged);
    let p = topic.peek(10).await.unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(
        (text(&p[0].key), p[0].priority, text(&p[0].payload)),
        ("a".into(), Some(9), "a2".into())
    );
    // Lowering the priority moves it back behind b.
    topic
        .send(Message::new("a3").key("a").priority(1))
        .await
        .unwrap();
    let p = topic.peek(10).await.unwrap();
    assert_eq!(text(&p[0].key), "b");
    assert_eq!((p[1].priority, text(&p[1].payload)), (Some(1), "a3".into()));
}

#[tokio::test]
async fn fixed_time_merge_last_due_time_and_payload_win() {
    let (_s, _c, topic) = setup(TopicKind::FixedTime, 2).await;
    topic
        .send(Message::new("p1").key("k").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let d1 = topic.peek(1).await.unwrap()[0].due_ms.unwrap();
    let m = topic
        .send(Message::new("p2").key("k").at_ms(d1 + 5_000))
        .await
        .unwrap();
    assert!(m.merged);
    let p = topic.peek(10).await.unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].due_ms, Some(d1 + 5_000));
    assert_eq!(p[0].payload, b"p2");
}

#[tokio::test]
async fn without_a_key_the_payload_is_the_key() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 8).await;
    let r = topic
        .send_batch(&[
            Message::new("same"),
            Message::new("same"),
            Message::new("other"),
        ])
        .await
        .unwrap();
    assert_eq!((r.new_count(), r.merged_count()), (2, 1));
    assert_eq!(topic.stats().await.unwrap().total.pending, 2);
}

#[tokio::test]
async fn slot_is_crc32_of_the_basis() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 16).await;
    let a = topic
        .send(Message::new("x").key("k1").slot_basis("entity-7"))
        .await
        .unwrap();
    let b = topic
        .send(Message::new("y").key("k2").slot_basis("entity-7"))
        .await
        .unwrap();
    let c = topic.send(Message::new("z").key("k3")).await.unwrap();
    assert_eq!(a.slot, rmq::slot_of(b"entity-7", 16));
    assert_eq!(a.slot, b.slot);
    assert_eq!(c.slot, rmq::slot_of(b"k3", 16));
}

#[tokio::test]
async fn a_send_tells_the_place_the_merge_gave_the_message_as_redis_holds_it() {
    // Priority: the newest priority, pending and behind an in-flight delivery.
    let (_s, _c, topic) = setup(TopicKind::Priority, 1).await;
    let a = topic
        .send(Message::new("a1").key("a").priority(5))
        .await
        .unwrap();
    assert_eq!((a.priority, a.due_ms, a.merged), (Some(5), None, false));
    assert!(a.server_ms > 0);
    let a = topic
        .send(Message::new("a2").key("a").priority(9))
        .await
        .unwrap();
    assert_eq!((a.priority, a.merged), (Some(9), true));
    assert_eq!(topic.get(b"a").await.unwrap().priority, Some(9));
    let taken = topic.take(1).await.unwrap();
    assert_eq!(taken.len(), 1);
    let behind = topic
        .send(Message::new("a3").key("a").priority(3))
        .await
        .unwrap();
    assert_eq!(
        (behind.priority, behind.behind_in_flight, behind.merged),
        (Some(3), true, false)
    );
    let behind = topic
        .send(Message::new("a4").key("a").priority(4))
        .await
        .unwrap();
    assert_eq!(
        (behind.priority, behind.behind_in_flight, behind.merged),
        (Some(4), true, true)
    );
    let parked = topic.get(b"a").await.unwrap().parked.unwrap();
    assert_eq!(parked.priority, Some(4));

    // Fixed time: the due time counted from the server's clock.
    let (_s, _c, topic) = setup(TopicKind::FixedTime, 2).await;
    let f = topic
        .send(Message::new("f").key("f").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(f.due_ms, Some(f.server_ms + 60_000));
    assert_eq!(f.priority, None);
    assert_eq!(topic.get(b"f").await.unwrap().due_ms, f.due_ms);
}
