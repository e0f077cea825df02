//! I3 Priority and I4 Time: pops follow the kind's order; time-based
//! messages are never delivered before their due time (server clock).
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{ErrorKind, Message, TopicKind};

#[tokio::test]
async fn priority_pops_highest_first_and_fifo_among_equals() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 1).await;
    let sends = [("a", 1), ("b", 5), ("c", 5), ("d", 9), ("e", 1), ("f", 5)];
    for (k, p) in sends {
        topic.send(Message::new(k).priority(p)).await.unwrap();
    }
    let (mut s, _stop) = stream(&topic, 1);
    let mut got = Vec::new();
    for _ in 0..sends.len() {
        let d = next(&mut s, 5).await.unwrap();
        got.push(text(&d.key));
        d.ack().await.unwrap();
    }
    assert_eq!(got, ["d", "b", "c", "f", "a", "e"]);
}

#[tokio::test]
async fn a_single_consumer_serves_the_best_slot_first_across_slots() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 16).await;
    let msgs: Vec<_> = (0..64u32)
        .map(|i| Message::new(format!("m{i}")).priority(i % 8))
        .collect();
    topic.send_batch(&msgs).await.unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    let mut prios = Vec::new();
    for _ in 0..64 {
        let d = next(&mut s, 5).await.unwrap();
        prios.push(d.priority.unwrap());
        d.ack().await.unwrap();
    }
    let mut sorted = prios.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(
        prios, sorted,
        "one consumer, nothing sent meanwhile: global priority order"
    );
}

#[tokio::test]
async fn time_based_messages_are_never_delivered_early() {
    for kind in [TopicKind::FixedTime, TopicKind::RangeMerge] {
        let (_s, _c, topic) = setup(kind, 4).await;
        let msgs: Vec<_> = (0..40u64)
            .map(|i| {
                let m = Message::new(format!("m{i}"));
                match kind {
                    TopicKind::FixedTime => m.delay(Duration::from_millis(20 + i * 10)),
                    _ => m.range(Duration::from_millis(20 + i * 10)),
                }
            })
            .collect();
        topic.send_batch(&msgs).await.unwrap();
        let (mut s, _stop) = stream(&topic, 8);
        let mut last_due = 0;
        for _ in 0..40 {
            let d = next(&mut s, 5).await.unwrap();
            let due = d.due_ms.unwrap();
            assert!(
                d.taken_ms >= due,
                "{kind}: taken at {} before due {}",
                d.taken_ms,
                due
            );
            assert!(
                due >= last_due - 100,
                "roughly oldest due first: {} due {due} taken {} after {last_due}",
                text(&d.payload),
                d.taken_ms
            );
            last_due = last_due.max(due);
            d.ack().await.unwrap();
        }
    }
}

#[tokio::test]
async fn overdue_messages_come_oldest_due_first() {
    let (_s, _c, topic) = setup(TopicKind::FixedTime, 1).await;
    topic
        .send(Message::new("x").delay(Duration::from_millis(0)))
        .await
        .unwrap();
    let now = topic.peek(1).await.unwrap()[0].due_ms.unwrap();
    for (k, off) in [("late", 300), ("early", 100), ("mid", 200)] {
        topic.send(Message::new(k).at_ms(now + off)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (mut s, _stop) = stream(&topic, 1);
    let mut got = Vec::new();
    for _ in 0..4 {
        let d = next(&mut s, 5).await.unwrap();
        got.push(text(&d.key));
        d.ack().await.unwrap();
    }
    assert_eq!(got, ["x", "early", "mid", "late"]);
}

#[tokio::test]
async fn past_due_times_are_refused_beyond_the_tolerance() {
    let (_s, _c, topic) = setup(TopicKind::FixedTime, 1).await;
    topic
        .send(Message::new("probe").delay(Duration::ZERO))
        .await
        .unwrap();
    let now = topic.peek(1).await.unwrap()[0].due_ms.unwrap();
    let e = topic
        .send(Message::new("old").at_ms(now - 60_000))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PastDue);
    assert!(e.to_string().contains("past"), "{e}");
    // Within the 1 s tolerance: accepted, due at once.
    topic
        .send(Message::new("skewed").at_ms(now - 500))
        .await
        .unwrap();
    let st = topic.stats().await.unwrap().total;
    assert_eq!(
        (st.pending, st.due_now, st.sent),
        (2, 2, 2),
        "the refused one wrote nothing"
    );
}
