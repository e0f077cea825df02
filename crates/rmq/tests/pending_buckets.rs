//! A slot's pending messages live in one sorted set while few, and in
//! small sorted sets chosen by a hash of the merge key, under an index of
//! their heads, once many, on a topic whose layout is compact
//! (`pending.lua`, issue 21 item 5; flat topics: `pending_layout.rs`). These tests fill
//! one slot far past one set, so that it turns into buckets and splits many
//! times, and hold the invariants the single sorted set gave for free:
//! consumption order across buckets (priority, FIFO among equals;
//! time-based: due time, then key bytes on equal due times), exact counts,
//! every bucket in Redis' compact encoding, the set flat again and no
//! bucket left when the slot empties, and a slot written by the version
//! before buckets read and taken as it was.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use rmq::{
    Client, Delivery, Message, PendingLayout, Reschedule, State, Topic, TopicKind, TopicSpec,
};

/// A topic whose deep slots are compact (the layout these tests are about).
async fn compact(kind: TopicKind, slots: u32) -> (Backend, Client, Topic) {
    setup_with(
        TopicSpec::new("t", kind)
            .slots(slots)
            .backoff(
                std::time::Duration::from_millis(20),
                std::time::Duration::from_millis(100),
            )
            .pending_layout(PendingLayout::Compact),
    )
    .await
}

/// Sends in batches of 500.
async fn send_all(topic: &Topic, messages: Vec<Message>) {
    for chunk in messages.chunks(500) {
        topic.send_batch(chunk).await.unwrap();
    }
}

/// Takes everything due, in calls of varied sizes (1, 7, 100, 1000), and
/// holds the deliveries (a dropped one goes back to the slot).
async fn take_all(topic: &Topic) -> (Vec<String>, Vec<Delivery>) {
    let mut held = Vec::new();
    for round in 0.. {
        let max = [1, 7, 100, 1000][round % 4];
        let got = topic.take(max).await.unwrap();
        if got.is_empty() {
            break;
        }
        held.extend(got);
    }
    (held.iter().map(|d| text(&d.key)).collect(), held)
}

/// The same sequence, or where they part.
fn assert_same_order(got: &[String], expected: &[String]) {
    if let Some(i) = (0..got.len().min(expected.len())).find(|&i| got[i] != expected[i]) {
        panic!(
            "order differs at {i}: got {:?}, expected {:?}",
            &got[i..(i + 5).min(got.len())],
            &expected[i..(i + 5).min(expected.len())]
        );
    }
    assert_eq!(got.len(), expected.len(), "how many");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn keys_of(value: redis::Value) -> Vec<String> {
    match value {
        redis::Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
                v => panic!("unexpected {v:?}"),
            })
            .collect(),
        v => panic!("unexpected {v:?}"),
    }
}

/// The slot's bucket keys (`<q>:<b>`).
async fn buckets(backend: &Backend, topic: &Topic) -> Vec<String> {
    let q = topic.keys_of_slot(0)[0].clone();
    let mut keys = keys_of(raw(backend, &["KEYS", &format!("{q}:*")]).await);
    keys.retain(|k| !k.ends_with(":h"));
    keys
}

async fn encodings(backend: &Backend, keys: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        match raw(backend, &["OBJECT", "ENCODING", k]).await {
            redis::Value::BulkString(b) => out.push(String::from_utf8(b).unwrap()),
            v => panic!("unexpected {v:?}"),
        }
    }
    out
}

/// Pairs of a `... WITHSCORES` reply.
fn pairs_of(value: redis::Value) -> Vec<(String, String)> {
    let flat = keys_of(value);
    flat.chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect()
}

/// The set's own invariants, read from Redis: a flat set has no bucket
/// keys; a bucketed one has each bucket's head (its first member in
/// consumption order) in the index with its score and in `<q>:h`, nothing
/// else in the index, and `qn` counting the members of all buckets.
async fn assert_consistent(backend: &Backend, topic: &Topic, highest_first: bool) {
    let keys = topic.keys_of_slot(0);
    let (q, m) = (&keys[0], &keys[4]);
    let count = |v: redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
        redis::Value::Int(i) => i as u64,
        redis::Value::Nil => 0,
        v => panic!("unexpected {v:?}"),
    };
    let n = count(raw(backend, &["HGET", m, "qb"]).await);
    if n == 0 {
        // Flat: q is the whole set, and no bucket key is left.
        assert!(
            buckets(backend, topic).await.is_empty(),
            "a flat set has no buckets"
        );
        assert_eq!(count(raw(backend, &["HGET", m, "qn"]).await), 0);
        return;
    }
    let mut heads = Vec::new();
    let mut members = 0;
    for b in 0..n {
        let bk = format!("{q}:{b}");
        members += count(raw(backend, &["ZCARD", &bk]).await);
        let first = if highest_first {
            raw(backend, &["ZRANGE", &bk, "0", "0", "REV", "WITHSCORES"]).await
        } else {
            raw(backend, &["ZRANGE", &bk, "0", "0", "WITHSCORES"]).await
        };
        if let Some((k, s)) = pairs_of(first).pop() {
            heads.push((b, k, s));
        }
    }
    assert_eq!(count(raw(backend, &["HGET", m, "qn"]).await), members, "qn");
    let mut index = pairs_of(raw(backend, &["ZRANGE", q, "0", "-1", "WITHSCORES"]).await);
    index.sort();
    let mut expected: Vec<(String, String)> = heads
        .iter()
        .map(|(_, k, s)| (k.clone(), s.clone()))
        .collect();
    expected.sort();
    assert_eq!(index, expected, "the index holds each bucket's head");
    let mut kept = pairs_of(raw(backend, &["HGETALL", &format!("{q}:h")]).await);
    kept.sort();
    let mut want: Vec<(String, String)> = heads
        .iter()
        .map(|(b, k, s)| (b.to_string(), format!("{s}|{k}")))
        .collect();
    want.sort();
    assert_eq!(kept, want, "<q>:h holds each bucket's head");
}

#[tokio::test]
async fn a_priority_slot_of_many_buckets_gives_highest_first_and_fifo_among_equals() {
    let (backend, _c, topic) = compact(TopicKind::Priority, 1).await;
    let n = 6_000u32;
    let priority = |i: u32| (i * 7_919) % 10;
    send_all(
        &topic,
        (0..n)
            .map(|i| {
                Message::new(format!("p{i}"))
                    .key(format!("k{i}"))
                    .priority(priority(i))
            })
            .collect(),
    )
    .await;
    // Cancelled messages leave the set wherever they are.
    let cancelled: Vec<String> = (0..n).step_by(10).map(|i| format!("k{i}")).collect();
    let refs: Vec<&[u8]> = cancelled.iter().map(|k| k.as_bytes()).collect();
    topic.cancel(&refs).await.unwrap();

    // Rescheduled to priority 9: at the back of its FIFO, in this order.
    let moved: Vec<u32> = (0..1_000).filter(|i| i % 10 == 5).rev().collect();
    for &i in &moved {
        topic
            .reschedule(format!("k{i}").as_bytes(), Reschedule::Priority(9))
            .await
            .unwrap();
    }
    // Merged duplicates: found by key in whatever bucket holds them.
    let merged: Vec<u32> = (0..500).filter(|i| i % 10 == 3).collect();
    let again: Vec<Message> = merged
        .iter()
        .map(|i| {
            Message::new(format!("again{i}"))
                .key(format!("k{i}"))
                .priority(8)
        })
        .collect();
    topic.send_batch(&again).await.unwrap();
    for &i in &merged {
        let found = topic.get(format!("k{i}").as_bytes()).await.unwrap();
        assert_eq!(
            (found.state, found.priority, found.payload),
            (
                State::Pending,
                Some(8),
                Some(format!("again{i}").into_bytes())
            )
        );
    }

    let mut expected: Vec<u32> = (0..n)
        .filter(|i| i % 10 != 0 && !moved.contains(i))
        .collect();
    expected.sort_by_key(|&i| (std::cmp::Reverse(priority(i)), i));
    let first_below_9 = expected.iter().position(|&i| priority(i) < 9).unwrap();
    expected.splice(first_below_9..first_below_9, moved.iter().copied());
    let expected: Vec<String> = expected.iter().map(|i| format!("k{i}")).collect();

    assert_consistent(&backend, &topic, true).await;
    let st = topic.stats().await.unwrap().total;
    assert_eq!(st.pending, expected.len() as u64);
    let b = buckets(&backend, &topic).await;
    assert!(b.len() >= 64, "the set split: {} buckets", b.len());
    assert!(
        encodings(&backend, &b)
            .await
            .iter()
            .all(|e| e == "listpack"),
        "every bucket stays compact"
    );
    let peeked: Vec<String> = topic
        .peek(50)
        .await
        .unwrap()
        .iter()
        .map(|p| text(&p.key))
        .collect();
    assert_eq!(peeked, expected[..50]);

    let (taken, _held) = take_all(&topic).await;
    // The merged keys' places depend on the merge rule, not on buckets:
    // every one is taken, and the rest keep their order.
    let merged_keys: Vec<String> = merged.iter().map(|i| format!("k{i}")).collect();
    let unmerged = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|k| !merged_keys.contains(k))
            .cloned()
            .collect()
    };
    assert_same_order(&unmerged(&taken), &unmerged(&expected));
    assert_eq!(taken.len(), expected.len());
    assert_eq!(topic.stats().await.unwrap().total.pending, 0);
    assert_consistent(&backend, &topic, true).await;
    assert!(
        buckets(&backend, &topic).await.is_empty(),
        "an empty slot keeps no bucket"
    );
}

#[tokio::test]
async fn a_time_slot_of_many_buckets_gives_due_order_then_key_bytes_and_keeps_what_is_not_due() {
    let (backend, _c, topic) = compact(TopicKind::FixedTime, 1).await;
    let now = now_ms();
    let n = 5_000i64;
    // 100 distinct due times, due within ~3 s: 50 keys share each.
    let due = |i: i64| now + 3_000 + (i * 37) % 100;
    let mut messages: Vec<Message> = (0..n)
        .map(|i| Message::new("x").key(format!("k{i}")).at_ms(due(i)))
        .collect();
    messages.extend((0..500).map(|i| {
        Message::new("later")
            .key(format!("later{i}"))
            .at_ms(now + 3_600_000 + i)
    }));
    send_all(&topic, messages).await;

    let mut expected: Vec<i64> = (0..n).collect();
    expected.sort_by(|&a, &b| {
        (due(a), format!("k{a}").into_bytes()).cmp(&(due(b), format!("k{b}").into_bytes()))
    });
    let expected: Vec<String> = expected.iter().map(|i| format!("k{i}")).collect();

    assert_consistent(&backend, &topic, false).await;
    let st = topic.stats().await.unwrap().total;
    assert_eq!(st.pending, 5_500);
    let peeked: Vec<String> = topic
        .peek(40)
        .await
        .unwrap()
        .iter()
        .map(|p| text(&p.key))
        .collect();
    assert_eq!(peeked, expected[..40]);

    // Wait until every first message is due.
    let wait = now + 3_200 - now_ms();
    tokio::time::sleep(std::time::Duration::from_millis(wait.max(0) as u64)).await;
    let (taken, _held) = take_all(&topic).await;
    assert_same_order(&taken, &expected);
    assert_consistent(&backend, &topic, false).await;
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.due_now), (500, 0));
    let left = buckets(&backend, &topic).await;
    assert!(
        !left.is_empty() && left.len() <= 500 * 4 / 48 + 1,
        "the set shrank with the slot: {} buckets for 500 messages",
        left.len()
    );
}

#[tokio::test]
async fn a_slot_written_before_buckets_is_read_and_taken_as_it_was() {
    let (backend, _c, topic) = compact(TopicKind::FixedTime, 1).await;
    let keys = topic.keys_of_slot(0);
    let (q, d) = (&keys[0], &keys[1]);
    // The layout before buckets: every pending message a member of q.
    // One ZADD and one HSET (a cluster test opens a connection per call).
    let now = now_ms();
    let mut zadd = vec!["ZADD".to_string(), q.clone()];
    let mut hset = vec!["HSET".to_string(), d.clone()];
    for i in 0..300i64 {
        let key = format!("old{i:03}");
        zadd.extend([(now + 2_000 + (i * 13) % 300).to_string(), key.clone()]);
        hset.extend([key, format!("payload{i}")]);
    }
    for args in [zadd, hset] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        raw(&backend, &args).await;
    }
    let mut expected: Vec<i64> = (0..300).collect();
    expected.sort_by_key(|&i| ((i * 13) % 300, i));
    let expected: Vec<String> = expected.iter().map(|i| format!("old{i:03}")).collect();

    // Read as it is.
    assert_eq!(topic.stats().await.unwrap().total.pending, 300);
    let peeked: Vec<String> = topic
        .peek(5)
        .await
        .unwrap()
        .iter()
        .map(|p| text(&p.key))
        .collect();
    assert_eq!(peeked, expected[..5]);
    // A new message joins the old ones in order; the first write moved
    // them into buckets.
    topic
        .send(Message::new("new").key("new").at_ms(now + 1_500))
        .await
        .unwrap();
    assert!(!buckets(&backend, &topic).await.is_empty());
    assert_consistent(&backend, &topic, false).await;
    let mut all = vec!["new".to_string()];
    all.extend(expected);
    let wait = now + 2_400 - now_ms();
    tokio::time::sleep(std::time::Duration::from_millis(wait.max(0) as u64)).await;
    let got = topic.take(1000).await.unwrap();
    assert_same_order(&got.iter().map(|d| text(&d.key)).collect::<Vec<_>>(), &all);
    assert_eq!(text(&got[1].payload), "payload0");
    assert_eq!(topic.stats().await.unwrap().total.pending, 0);
}

#[tokio::test]
async fn a_payload_left_without_its_message_is_sent_again_as_new() {
    // A payload in d whose key is neither pending, retry-waiting nor in
    // flight (f empty) is a leftover: a send of the key makes it pending
    // again, as before buckets, instead of parking it behind a delivery
    // that will never end.
    let (backend, _c, topic) = compact(TopicKind::Priority, 1).await;
    let keys = topic.keys_of_slot(0);
    raw(&backend, &["HSET", &keys[1], "k", "old"]).await;
    topic
        .send(Message::new("new").key("k").priority(1))
        .await
        .unwrap();
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.behind_in_flight), (1, 0));
    let got = topic.take(1).await.unwrap();
    assert_eq!(text(&got[0].payload), "new");
}
