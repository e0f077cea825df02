//! The tools on a topic of 65,536 slots (issue 22 item 4): stats, peek and
//! the dead-letter operations cost a bounded number of calls whatever the
//! slot count (on a single node a reading covers 128 slots per call; peek
//! and the dead-letter listing fetch only from slots that can hold what
//! they show), and they still show exactly what a reading of every slot
//! would. On a cluster (RMQ_TEST_CLUSTER=1) the same checks run on 1,024
//! slots, one call per slot, without the call budget.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{DeadSelection, Message, Topic, TopicKind, TopicSpec};

fn single_node() -> bool {
    std::env::var("RMQ_TEST_CLUSTER").map_or(true, |v| v != "1")
}

/// 65,536 slots on a single node; 1,024 on a cluster.
fn slots() -> u32 {
    if single_node() {
        65_536
    } else {
        1_024
    }
}

/// Script calls a reading of every slot may make: one per 128 slots, and
/// `extra` for what it fetches after that.
fn budget(extra: u64) -> u64 {
    u64::from(slots()).div_ceil(128) + extra
}

/// Script calls made by `f`, checked against `max` on a single node.
async fn calls_within<T>(
    backend: &Backend,
    max: u64,
    what: &str,
    f: impl std::future::Future<Output = T>,
) -> T {
    let before = calls(backend).await;
    let out = f.await;
    let made = calls(backend).await - before;
    if single_node() {
        assert!(made <= max, "{what}: {made} script calls (at most {max})");
    }
    out
}

/// Sends `n` messages with distinct due times an hour or more from now, in
/// a shuffled order; returns (key, due ms) sorted by due time.
async fn send_scheduled(topic: &Topic, n: u64) -> Vec<(String, i64)> {
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 3_600_000;
    let mut sent: Vec<(String, i64)> = (0..n)
        .map(|i| (format!("k{i}"), base + ((i * 7_919) % n) as i64 * 1_000))
        .collect();
    let messages: Vec<Message> = sent
        .iter()
        .map(|(k, due)| Message::new(format!("p-{k}")).key(k.as_str()).at_ms(*due))
        .collect();
    topic.send_batch(&messages).await.unwrap();
    sent.sort_by_key(|(_, due)| *due);
    sent
}

#[tokio::test]
async fn stats_of_every_slot_cost_one_call_per_128_slots_and_count_every_message() {
    let (backend, _c, topic) = setup(TopicKind::FixedTime, slots()).await;
    let sent = send_scheduled(&topic, 500).await;
    let stats = calls_within(&backend, budget(2), "stats", topic.stats())
        .await
        .unwrap();
    assert_eq!(stats.slots.len(), slots() as usize);
    assert_eq!(
        (stats.total.pending, stats.total.scheduled, stats.total.sent),
        (500, 500, 500)
    );
    // Each message counted in its own slot, and nowhere else.
    let mut per_slot = vec![0u64; slots() as usize];
    for (key, _) in &sent {
        per_slot[topic.slot_of(key.as_bytes()) as usize] += 1;
    }
    let counted: Vec<u64> = stats.slots.iter().map(|s| s.pending).collect();
    assert_eq!(counted, per_slot);
    assert!(stats.server_ms > 0);
}

#[tokio::test]
async fn peek_shows_the_next_messages_of_all_slots_in_order_from_few_calls() {
    let (backend, _c, topic) = setup(TopicKind::FixedTime, slots()).await;
    let sent = send_scheduled(&topic, 500).await;
    for limit in [1usize, 20, 499, 500, 600] {
        let extra = if limit <= 20 { 60 } else { 2_000 };
        let got = calls_within(&backend, budget(extra), "peek", topic.peek(limit))
            .await
            .unwrap();
        let keys: Vec<(String, Option<i64>)> =
            got.iter().map(|p| (text(&p.key), p.due_ms)).collect();
        let want: Vec<(String, Option<i64>)> = sent
            .iter()
            .take(limit)
            .map(|(k, due)| (k.clone(), Some(*due)))
            .collect();
        assert_eq!(keys, want, "peek {limit}");
        assert!(got.iter().all(|p| p.slot == topic.slot_of(&p.key)));
    }
    assert!(topic.peek(0).await.unwrap().is_empty());
}

#[tokio::test]
async fn peek_of_a_priority_topic_takes_a_crowded_slot_as_far_as_it_goes() {
    let (backend, _c, topic) = setup(TopicKind::Priority, slots()).await;
    // 300 messages in one slot (even priorities), 200 spread over the
    // others (odd ones), some between them and some above them.
    let hot: Vec<Message> = (0..300u32)
        .map(|i| {
            Message::new(format!("hot{i}"))
                .key(format!("hot{i}"))
                .slot_basis("hot")
                .priority(10_000 + 2 * i)
        })
        .collect();
    let spread: Vec<Message> = (0..200u32)
        .map(|i| {
            Message::new(format!("s{i}"))
                .key(format!("s{i}"))
                .priority(10_001 + 6 * i)
        })
        .collect();
    topic.send_batch(&hot).await.unwrap();
    topic.send_batch(&spread).await.unwrap();
    let mut all: Vec<(u32, String)> = (0..300u32)
        .map(|i| (10_000 + 2 * i, format!("hot{i}")))
        .chain((0..200u32).map(|i| (10_001 + 6 * i, format!("s{i}"))))
        .collect();
    all.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
    for limit in [5usize, 250, 500] {
        let got = calls_within(&backend, budget(400), "peek", topic.peek(limit))
            .await
            .unwrap();
        let seen: Vec<(u32, String)> = got
            .iter()
            .map(|p| (p.priority.unwrap_or(0), text(&p.key)))
            .collect();
        assert_eq!(seen, all[..limit].to_vec(), "peek {limit}");
    }
}

/// Kills `n` messages (one attempt each) spread over the slots, a few ms
/// apart; returns their keys, first death first.
async fn kill(topic: &Topic, n: usize) -> Vec<String> {
    let messages: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("d{i}")).key(format!("d{i}")))
        .collect();
    topic.send_batch(&messages).await.unwrap();
    let (mut s, stop) = stream(topic, 1);
    let mut order = Vec::new();
    for _ in 0..n {
        let d = next(&mut s, 10).await.expect("a message to kill");
        order.push(text(&d.key));
        d.nack(None, "boom").await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop.cancel();
    order
}

#[tokio::test]
async fn dead_letters_are_listed_oldest_first_and_handled_in_the_slots_that_hold_them() {
    let (backend, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(slots())
            .max_attempts(1),
    )
    .await;
    let died = kill(&topic, 40).await;
    let everything = topic.dead_letters(1_000).await.unwrap();
    let keys: Vec<String> = everything.iter().map(|d| text(&d.key)).collect();
    assert_eq!(keys, died, "every dead letter, oldest death first");
    for limit in [1usize, 7, 39] {
        let got = calls_within(
            &backend,
            budget(2 * limit as u64 + 10),
            "dead letters",
            topic.dead_letters(limit),
        )
        .await
        .unwrap();
        let keys: Vec<String> = got.iter().map(|d| text(&d.key)).collect();
        assert_eq!(keys, died[..limit].to_vec(), "dead letters {limit}");
    }
    // One key requeued, none old enough to purge, then the rest purged:
    // each reads where dead letters are, then calls only those slots.
    let one = DeadSelection::Key(died[3].clone().into_bytes());
    let requeued = calls_within(&backend, budget(45), "requeue", topic.requeue_dead(one))
        .await
        .unwrap();
    assert_eq!(requeued, (1, 0));
    let old = DeadSelection::OlderThan(Duration::from_secs(3_600));
    let purged = calls_within(&backend, budget(0), "purge old", topic.purge_dead(old))
        .await
        .unwrap();
    assert_eq!(purged, 0);
    let purged = calls_within(
        &backend,
        budget(45),
        "purge",
        topic.purge_dead(DeadSelection::All),
    )
    .await
    .unwrap();
    assert_eq!(purged, 39);
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.dead, st.pending), (0, 1));
}

#[tokio::test]
async fn taking_by_hand_calls_only_the_slots_with_work_due() {
    let (backend, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::FixedTime)
            .slots(slots())
            .lease(Duration::from_millis(200))
            .backoff(Duration::from_millis(1), Duration::from_millis(1)),
    )
    .await;
    send_scheduled(&topic, 300).await;
    let due: Vec<Message> = (0..5)
        .map(|i| {
            Message::new(format!("now{i}"))
                .key(format!("now{i}"))
                .delay(Duration::ZERO)
        })
        .collect();
    topic.send_batch(&due).await.unwrap();
    let taken = calls_within(&backend, budget(5), "take", topic.take(100))
        .await
        .unwrap();
    let mut keys: Vec<String> = taken.iter().map(|d| text(&d.key)).collect();
    keys.sort();
    assert_eq!(keys, ["now0", "now1", "now2", "now3", "now4"]);
    // A lease that ran out is work due too: its message is taken again.
    let mut taken = taken.into_iter();
    let kept = taken.next().unwrap();
    let (key, attempt) = (text(&kept.key), kept.attempt);
    for d in taken {
        d.ack().await.unwrap();
    }
    // `kept` is left unsettled while its lease runs out.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The take that finds the lease run out puts the message back after
    // its backoff (1 ms); a take after that gets it.
    let mut again = Vec::new();
    for _ in 0..3 {
        let taken = calls_within(
            &backend,
            budget(1),
            "take after a lease ran out",
            topic.take(100),
        )
        .await
        .unwrap();
        again.extend(taken.iter().map(|d| (text(&d.key), d.attempt)));
        if !again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(again, [(key, attempt + 1)]);
    assert!(
        kept.ack().await.is_err(),
        "an ack after the lease ran out is stale"
    );
}
