//! A topic's pending layout (`TopicSpec::pending_layout`, `pending.lua`):
//! a flat topic keeps each slot one sorted set however deep, so a backlog
//! costs a take one key instead of about one bucket a message; a compact
//! one turns a slot past 120 into buckets. Both shapes are read and
//! written whatever the layout, so a change applies slot by slot: a flat
//! slot of at most 2,000 turns compact at its next write, a deeper one only
//! once it shrank to that, and buckets turn flat when they shrink to 40.
//! Order and counts hold across every change.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rmq::{Message, PendingLayout, Topic, TopicKind, TopicSpec};

/// A slot's shape as Redis holds it: members of q, the bucket count `qb`
/// of m (0 when flat), and how many bucket keys exist.
async fn shape(backend: &Backend, topic: &Topic, slot: u32) -> (i64, i64, usize) {
    let keys = topic.keys_of_slot(slot);
    let (q, m) = (&keys[0], &keys[4]);
    let card = match raw(backend, &["ZCARD", q]).await {
        redis::Value::Int(n) => n,
        v => panic!("ZCARD: {v:?}"),
    };
    let qb = match raw(backend, &["HGET", m, "qb"]).await {
        redis::Value::Nil => 0,
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse().unwrap(),
        v => panic!("HGET qb: {v:?}"),
    };
    let buckets = match raw(backend, &["KEYS", &format!("{q}:*")]).await {
        redis::Value::Array(items) => items.len(),
        v => panic!("KEYS: {v:?}"),
    };
    (card, qb, buckets)
}

/// What a priority slot holds, in the order it gives: highest priority
/// first, FIFO among equals.
#[derive(Default)]
struct Model {
    seq: usize,
    held: Vec<(u32, usize, String)>,
}

impl Model {
    /// The order of what is held.
    fn order(&mut self) -> Vec<String> {
        self.held
            .sort_by_key(|(p, seq, _)| (std::cmp::Reverse(*p), *seq));
        self.held.iter().map(|(_, _, k)| k.clone()).collect()
    }

    /// The first `n` taken off.
    fn take(&mut self, n: usize) -> Vec<String> {
        let order = self.order();
        self.held.drain(..n);
        order[..n].to_vec()
    }
}

/// Sends `n` messages `<tag><i>` of priority `i % 5`, all in the slot of
/// `basis`, in batches of 500; the model learns them.
async fn fill(topic: &Topic, model: &mut Model, tag: &str, basis: &str, n: usize) {
    let all: Vec<Message> = (0..n)
        .map(|i| {
            let key = format!("{tag}{i}");
            model.seq += 1;
            model.held.push(((i % 5) as u32, model.seq, key.clone()));
            Message::new(key.clone())
                .key(key)
                .slot_basis(basis)
                .priority((i % 5) as u32)
        })
        .collect();
    for chunk in all.chunks(500) {
        for r in topic.send_batch(chunk).await.unwrap().results {
            r.unwrap();
        }
    }
}

/// Takes `n` messages (in calls of 1, 7, 100 and 1,000) and acks them;
/// returns their keys in the order taken.
async fn take_acked(topic: &Topic, n: usize) -> Vec<String> {
    let mut got = Vec::new();
    for round in 0.. {
        if got.len() >= n {
            break;
        }
        let max = [1, 7, 100, 1000][round % 4].min(n - got.len());
        let taken = topic.take(max).await.unwrap();
        assert!(!taken.is_empty(), "ran dry after {} of {n}", got.len());
        for d in taken {
            got.push(text(&d.key));
            d.ack().await.unwrap();
        }
    }
    got
}

/// Two slot bases of a two-slot topic that land in different slots.
fn two_bases(topic: &Topic) -> ((String, u32), (String, u32)) {
    let slot = |b: &str| rmq::slot_of(b.as_bytes(), topic.spec().slots);
    let a = "basis-a".to_string();
    let b = (0..)
        .map(|i| format!("basis-b{i}"))
        .find(|b| slot(b) != slot(&a))
        .unwrap();
    let (sa, sb) = (slot(&a), slot(&b));
    ((a, sa), (b, sb))
}

async fn pending(topic: &Topic) -> u64 {
    topic.stats().await.unwrap().total.pending
}

#[tokio::test]
async fn a_flat_topic_keeps_a_deep_slot_one_sorted_set_and_takes_it_in_order() {
    let (backend, _c, topic) = setup(TopicKind::Priority, 1).await;
    assert_eq!(
        topic.spec().pending_layout,
        PendingLayout::Flat,
        "the default"
    );
    let mut model = Model::default();
    fill(&topic, &mut model, "k", "one", 5_000).await;
    assert_eq!(
        shape(&backend, &topic, 0).await,
        (5_000, 0, 0),
        "one set, no buckets"
    );
    let peeked: Vec<String> = topic
        .peek(3)
        .await
        .unwrap()
        .iter()
        .map(|p| text(&p.key))
        .collect();
    assert_eq!(peeked, model.order()[..3]);
    assert_eq!(take_acked(&topic, 5_000).await, model.take(5_000));
    assert_eq!(shape(&backend, &topic, 0).await, (0, 0, 0));
    assert_eq!(pending(&topic).await, 0);
}

#[tokio::test]
async fn a_compact_topic_turns_a_deep_slot_into_buckets() {
    let (backend, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .pending_layout(PendingLayout::Compact),
    )
    .await;
    let mut model = Model::default();
    fill(&topic, &mut model, "k", "one", 3_000).await;
    let (index, qb, buckets) = shape(&backend, &topic, 0).await;
    assert!(
        qb >= 2 && index == qb && buckets == qb as usize + 1,
        "{index} {qb} {buckets}"
    );
    assert_eq!(take_acked(&topic, 3_000).await, model.take(3_000));
    assert_eq!(
        shape(&backend, &topic, 0).await,
        (0, 0, 0),
        "flat and empty again"
    );
}

#[tokio::test]
async fn a_change_to_compact_turns_a_slot_at_its_next_write_unless_it_is_deeper_than_2000() {
    let (backend, client, flat) = setup(TopicKind::Priority, 2).await;
    let ((small, s_small), (deep, s_deep)) = two_bases(&flat);
    let (mut m_small, mut m_deep) = (Model::default(), Model::default());
    fill(&flat, &mut m_small, "s", &small, 500).await;
    fill(&flat, &mut m_deep, "d", &deep, 2_500).await;
    assert_eq!(shape(&backend, &flat, s_small).await, (500, 0, 0));
    assert_eq!(shape(&backend, &flat, s_deep).await, (2_500, 0, 0));

    let compact = client
        .update_topic("t", |s| s.pending_layout(PendingLayout::Compact))
        .await
        .unwrap();
    fill(&compact, &mut m_small, "s-again", &small, 10).await;
    fill(&compact, &mut m_deep, "d-again", &deep, 10).await;
    let (_, qb, _) = shape(&backend, &compact, s_small).await;
    assert!(qb >= 2, "the small slot is in buckets: {qb}");
    assert_eq!(
        shape(&backend, &compact, s_deep).await,
        (2_510, 0, 0),
        "the deep one is not"
    );

    // Each slot gives its own order, whatever the other's shape.
    let got = take_acked(&compact, 3_020).await;
    let of =
        |tag: char| -> Vec<String> { got.iter().filter(|k| k.starts_with(tag)).cloned().collect() };
    assert_eq!(of('s'), m_small.take(510));
    assert_eq!(of('d'), m_deep.take(2_510));
    assert_eq!(pending(&compact).await, 0);
}

#[tokio::test]
async fn a_change_of_layout_applies_as_a_slot_shrinks_and_keeps_the_order() {
    let (backend, client, flat) = setup(TopicKind::Priority, 1).await;
    let mut model = Model::default();
    fill(&flat, &mut model, "a", "one", 2_500).await;

    // Compact, but deeper than 2,000: one set until it is taken down.
    let compact = client
        .update_topic("t", |s| s.pending_layout(PendingLayout::Compact))
        .await
        .unwrap();
    fill(&compact, &mut model, "b", "one", 10).await;
    assert_eq!(shape(&backend, &compact, 0).await, (2_510, 0, 0));
    assert_eq!(take_acked(&compact, 600).await, model.take(600));
    fill(&compact, &mut model, "c", "one", 1).await;
    let (_, qb, _) = shape(&backend, &compact, 0).await;
    assert!(qb >= 2, "in buckets once at most 2,000: {qb}");

    // Flat again: the buckets stay until the slot shrinks to 40, then it
    // is one set, which stays one set past 120.
    let flat = client
        .update_topic("t", |s| s.pending_layout(PendingLayout::Flat))
        .await
        .unwrap();
    assert_eq!(take_acked(&flat, 1_881).await, model.take(1_881));
    assert_eq!(
        shape(&backend, &flat, 0).await,
        (30, 0, 0),
        "flat once shrunk"
    );
    fill(&flat, &mut model, "e", "one", 300).await;
    assert_eq!(
        shape(&backend, &flat, 0).await,
        (330, 0, 0),
        "a flat topic makes no buckets"
    );
    assert_eq!(take_acked(&flat, 330).await, model.take(330));
}
