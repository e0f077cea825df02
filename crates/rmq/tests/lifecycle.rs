//! Two-phase consumption, retries and dead letters (I1, I6): every end of a
//! delivery, leases that run out, stale acks, and retries that keep their
//! kind's ordering.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{
    CancellationToken, DeadSelection, ErrorKind, Message, Outcome, Settled, TopicKind, TopicSpec,
};

fn spec(kind: TopicKind) -> TopicSpec {
    TopicSpec::new("t", kind)
        .slots(2)
        .max_attempts(3)
        .lease(Duration::from_millis(300))
        .backoff(Duration::from_millis(20), Duration::from_millis(50))
}

#[tokio::test]
async fn nack_retries_then_dead_letter_keeps_last_error() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic
        .send(Message::new("job").key("k").priority(100))
        .await
        .unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    for attempt in 1..=3 {
        let d = next(&mut s, 5).await.unwrap();
        assert_eq!(d.attempt, attempt);
        assert_eq!(d.priority, Some(100), "a retry keeps its priority");
        let end = d.nack(None, &format!("boom {attempt}")).await.unwrap();
        assert_eq!(
            end,
            if attempt == 3 {
                Settled::Dead
            } else {
                Settled::Done
            }
        );
    }
    let dead = topic.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (
            dead[0].attempts,
            dead[0].error.as_str(),
            dead[0].payload.as_slice()
        ),
        (3, "boom 3", &b"job"[..])
    );
    let st = topic.stats().await.unwrap().total;
    assert_eq!(
        (
            st.pending,
            st.in_flight,
            st.dead,
            st.retried,
            st.dead_lettered
        ),
        (0, 0, 1, 2, 1)
    );

    // Requeue: a fresh start with its priority.
    assert_eq!(
        topic.requeue_dead(DeadSelection::All).await.unwrap(),
        (1, 0)
    );
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!((d.attempt, d.priority), (1, Some(100)));
    d.dead("no way").await.unwrap();
    assert_eq!(
        topic
            .purge_dead(DeadSelection::Key(b"k".to_vec()))
            .await
            .unwrap(),
        1
    );
    assert!(topic.dead_letters(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_retry_waits_its_backoff_and_then_goes_before_lower_priorities() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority).slots(1)).await;
    topic.send(Message::new("hi").priority(9)).await.unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    let d = next(&mut s, 5).await.unwrap();
    d.nack(Some(Duration::from_millis(300)), "later")
        .await
        .unwrap();
    topic.send(Message::new("lo").priority(1)).await.unwrap();
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!(d.payload, b"lo", "hi waits out its backoff");
    topic.send(Message::new("lo2").priority(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    d.ack().await.unwrap();
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!(
        (d.payload.as_slice(), d.attempt),
        (&b"hi"[..], 2),
        "after the backoff, priority 9 first"
    );
    d.ack().await.unwrap();
}

#[tokio::test]
async fn a_time_based_retry_is_due_after_its_backoff() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::FixedTime)).await;
    topic
        .send(Message::new("m").delay(Duration::ZERO))
        .await
        .unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    let d = next(&mut s, 5).await.unwrap();
    let taken = d.taken_ms;
    d.nack(Some(Duration::from_millis(200)), "x").await.unwrap();
    let d = next(&mut s, 5).await.unwrap();
    assert!(d.due_ms.unwrap() >= taken + 200);
    assert!(d.taken_ms >= d.due_ms.unwrap());
    d.ack().await.unwrap();
}

#[tokio::test]
async fn an_expired_lease_is_rolled_back_and_redelivered() {
    // The consumer "crashes": it takes a message and never ends it.
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic.send(Message::new("m")).await.unwrap();
    let (mut crashed, stop) = stream(&topic, 1);
    let d = next(&mut crashed, 5).await.unwrap();
    let token = d.token;
    std::mem::forget(d); // no ack, no nack: like a process killed mid-message
    stop.cancel();
    drop(crashed);
    let (mut s, _stop2) = stream(&topic, 1);
    let d = next(&mut s, 5).await.expect("redelivered after the lease");
    assert_eq!(d.attempt, 2);
    assert_ne!(d.token, token);
    d.ack().await.unwrap();
    let st = topic.stats().await.unwrap().total;
    assert_eq!(
        (st.pending, st.in_flight, st.acked, st.retried),
        (0, 0, 1, 1)
    );
}

#[tokio::test]
async fn a_stale_ack_is_refused_and_changes_nothing() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority).max_attempts(5)).await;
    topic.send(Message::new("m")).await.unwrap();
    let (mut s, _stop) = stream(&topic, 2);
    let slow = next(&mut s, 5).await.unwrap();
    let fresh = next(&mut s, 5).await.expect("redelivered after the lease");
    assert_eq!(fresh.attempt, 2);
    let e = slow.ack().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleDelivery);
    assert_eq!(
        topic.stats().await.unwrap().total.in_flight,
        1,
        "the fresh delivery is untouched"
    );
    fresh.ack().await.unwrap();
}

#[tokio::test]
async fn extend_keeps_a_long_handler_from_redelivery() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic.send(Message::new("m")).await.unwrap();
    let (mut s, _stop) = stream(&topic, 2);
    let d = next(&mut s, 5).await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        d.extend(Duration::from_millis(300)).await.unwrap();
    }
    // 600 ms of handling under a 300 ms lease, extended: no second delivery.
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.delivered, st.in_flight, st.retried), (1, 1, 0));
    d.ack().await.unwrap();
    assert_eq!(topic.stats().await.unwrap().total.acked, 1);
}

#[tokio::test]
async fn dropping_a_delivery_counts_as_a_failed_attempt() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic.send(Message::new("m")).await.unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    drop(next(&mut s, 5).await.unwrap());
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!(d.attempt, 2);
    d.ack().await.unwrap();
}

#[tokio::test]
async fn release_gives_back_without_counting_an_attempt() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic.send(Message::new("m")).await.unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    next(&mut s, 5).await.unwrap().release().await.unwrap();
    let d = next(&mut s, 5).await.unwrap();
    assert_eq!(d.attempt, 1);
    d.ack().await.unwrap();
}

#[tokio::test]
async fn a_priority_retry_wakes_the_consumer_when_its_backoff_ends() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority)).await;
    topic.send(Message::new("m")).await.unwrap();
    // Default rescan (5 s): only the retry notice can wake it sooner.
    let stop = rmq::CancellationToken::new();
    let mut s = topic.consumer().concurrency(1).stream(stop.clone());
    let d = next(&mut s, 5).await.unwrap();
    d.nack(Some(Duration::from_millis(100)), "again")
        .await
        .unwrap();
    let t = std::time::Instant::now();
    let d = next(&mut s, 5).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "woke after {:?}",
        t.elapsed()
    );
    assert_eq!(d.attempt, 2);
    d.ack().await.unwrap();
}

#[tokio::test]
async fn dead_letters_of_messages_with_a_slot_basis_can_be_requeued_by_key() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority).slots(8)).await;
    // Find a basis whose slot differs from the key's own.
    let basis = (0..)
        .map(|i| format!("b{i}"))
        .find(|b| topic.slot_of(b.as_bytes()) != topic.slot_of(b"k"))
        .unwrap();
    topic
        .send(Message::new("m").key("k").slot_basis(basis))
        .await
        .unwrap();
    topic
        .take(1)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .dead("bad")
        .await
        .unwrap();
    assert_eq!(
        topic
            .requeue_dead(DeadSelection::Key(b"k".to_vec()))
            .await
            .unwrap(),
        (1, 0)
    );
    topic
        .take(1)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .dead("bad again")
        .await
        .unwrap();
    assert_eq!(
        topic
            .purge_dead(DeadSelection::Key(b"k".to_vec()))
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn requeued_dead_letters_wait_behind_their_key_in_flight_and_merge_into_it_pending() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority).slots(1)).await;
    topic.send(Message::new("old").key("k")).await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    d.dead("bad").await.unwrap();

    // The same key is in flight again: the requeued letter parks behind it.
    topic.send(Message::new("new").key("k")).await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    assert_eq!(d.payload, b"new");
    assert_eq!(
        topic.requeue_dead(DeadSelection::All).await.unwrap(),
        (1, 0)
    );
    assert!(
        topic.take(1).await.unwrap().is_empty(),
        "nothing of k while k is in flight"
    );
    d.ack().await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    assert_eq!((d.payload.as_slice(), d.attempt), (&b"old"[..], 1));
    d.dead("bad again").await.unwrap();

    // The same key is pending: the requeued letter merges into it.
    topic.send(Message::new("pending").key("k")).await.unwrap();
    assert_eq!(
        topic.requeue_dead(DeadSelection::All).await.unwrap(),
        (0, 1)
    );
    let d = topic.take(1).await.unwrap().pop().unwrap();
    assert_eq!(d.payload, b"pending");
    d.ack().await.unwrap();
    assert!(topic.take(1).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_requeue_says_what_became_of_each_letter_as_redis_holds_it() {
    let (_s, _c, topic) = setup_with(spec(TopicKind::Priority).slots(1)).await;
    for (key, priority) in [("a", 7), ("b", 2), ("c", 4)] {
        topic
            .send(Message::new(key).key(key).priority(priority))
            .await
            .unwrap();
    }
    for d in topic.take(3).await.unwrap() {
        d.dead("bad").await.unwrap();
    }
    // b in flight again, c pending again with another priority.
    topic
        .send(Message::new("b2").key("b").priority(1))
        .await
        .unwrap();
    let b = topic.take(1).await.unwrap().pop().unwrap();
    assert_eq!(b.payload, b"b2");
    topic
        .send(Message::new("c2").key("c").priority(9))
        .await
        .unwrap();

    let mut letters = topic.requeue_dead_each(DeadSelection::All).await.unwrap();
    letters.sort_by(|x, y| x.key.cmp(&y.key));
    let told: Vec<(&[u8], bool, bool, Option<u32>)> = letters
        .iter()
        .map(|l| (l.key.as_slice(), l.merged, l.behind_in_flight, l.priority))
        .collect();
    assert_eq!(
        told,
        [
            (&b"a"[..], false, false, Some(7)),
            (&b"b"[..], false, true, Some(2)),
            (&b"c"[..], true, false, Some(9)),
        ]
    );
    assert!(letters
        .iter()
        .all(|l| l.due_ms.is_none() && l.server_ms > 0));
    assert_eq!(topic.get(b"a").await.unwrap().priority, Some(7));
    let parked = topic.get(b"b").await.unwrap().parked.unwrap();
    assert_eq!(
        (parked.payload.as_slice(), parked.priority),
        (&b"b"[..], Some(2))
    );
    assert_eq!(topic.get(b"c").await.unwrap().priority, Some(9));
    assert_eq!(topic.stats().await.unwrap().total.dead, 0);

    // A time-based letter is due at once, by the server's clock.
    let (_s, _c, topic) = setup_with(spec(TopicKind::FixedTime)).await;
    topic
        .send(Message::new("f").key("f").delay(Duration::ZERO))
        .await
        .unwrap();
    topic
        .take(1)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .dead("bad")
        .await
        .unwrap();
    let letters = topic
        .requeue_dead_each(DeadSelection::Key(b"f".to_vec()))
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(
        (l.merged, l.priority, l.due_ms),
        (false, None, Some(l.server_ms))
    );
    assert_eq!(topic.get(b"f").await.unwrap().due_ms, l.due_ms);
    assert_eq!(l.slot, topic.slot_of(b"f"));
}

#[tokio::test]
async fn requeue_all_takes_what_was_dead_when_it_started_each_at_most_once() {
    // A consumer dead-letters everything it gets (a poison topic), so a
    // requeued message dies again at once: requeueing "all" must end, and
    // must requeue each letter that was dead at its start exactly once.
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_attempts(1),
    )
    .await;
    let n = 6_000;
    let msgs: Vec<_> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    let mut killed = 0;
    while killed < n {
        for d in topic.take(1_000).await.unwrap() {
            d.dead("poison").await.unwrap();
            killed += 1;
        }
    }
    assert_eq!(topic.stats().await.unwrap().total.dead, n as u64);
    let stop = CancellationToken::new();
    let killer = topic
        .consumer()
        .concurrency(256)
        .batch(256)
        .run(stop.clone(), |_| async {
            Outcome::Dead {
                error: "poison again".into(),
            }
        });
    let killer = tokio::spawn(killer);
    let (requeued, merged) = tokio::time::timeout(
        Duration::from_secs(60),
        topic.requeue_dead(DeadSelection::All),
    )
    .await
    .expect("requeue all ends")
    .unwrap();
    stop.cancel();
    killer.await.unwrap().unwrap();
    assert_eq!((requeued, merged), (n as u64, 0), "each dead letter once");
}

/// A message keeps one stable id across its deliveries (a retry after a
/// nack, a redelivery after its lease ran out, a release after a failed
/// attempt), while a new message of the same key, or a retry whose payload a
/// merge replaced, gets another: a downstream system that drops repeated ids
/// drops only true repeats.
#[tokio::test]
async fn a_message_keeps_its_stable_id_across_deliveries_and_a_new_payload_gets_a_new_one() {
    for kind in [TopicKind::Priority, TopicKind::FixedTime] {
        let spec = spec(kind).max_attempts(10);
        let (_s, _c, topic) = setup_with(spec).await;
        let msg = || match kind {
            TopicKind::Priority => Message::new("v1").key("k").priority(5),
            _ => Message::new("v1").key("k").delay(Duration::ZERO),
        };
        topic.send(msg()).await.unwrap();
        // Two: the forgotten delivery below keeps its place for good.
        let (mut s, _stop) = stream(&topic, 2);
        let first = next(&mut s, 5).await.unwrap();
        let id = first.stable_id();
        assert_eq!(first.origin, first.token, "{kind:?}");
        let first_token = first.token;
        first.nack(Some(Duration::ZERO), "boom").await.unwrap();

        let second = next(&mut s, 5).await.unwrap();
        assert_eq!(
            (second.attempt, second.stable_id()),
            (2, id.clone()),
            "{kind:?} after a nack"
        );
        assert_ne!(second.token, first_token);
        second.release().await.unwrap();
        let released = next(&mut s, 5).await.unwrap();
        assert_eq!(
            (released.attempt, released.stable_id()),
            (2, id.clone()),
            "{kind:?} after a release"
        );
        // Neither ended nor dropped (a drop would nack): its lease runs out.
        let token = released.token;
        std::mem::forget(released);
        let third = next(&mut s, 5).await.unwrap();
        assert_ne!(third.token, token);
        assert_eq!(
            (third.attempt, third.stable_id()),
            (3, id.clone()),
            "{kind:?} after a lease expiry"
        );

        // A merge that brings a new payload while the message waits for a retry.
        third
            .nack(Some(Duration::from_millis(300)), "boom")
            .await
            .unwrap();
        let merged = match kind {
            TopicKind::Priority => Message::new("v2").key("k").priority(5),
            _ => Message::new("v2")
                .key("k")
                .delay(Duration::from_millis(300)),
        };
        topic.send(merged).await.unwrap();
        let fourth = next(&mut s, 5).await.unwrap();
        assert_eq!((fourth.attempt, text(&fourth.payload).as_str()), (4, "v2"));
        assert_ne!(
            fourth.stable_id(),
            id,
            "{kind:?}: a new payload is a new message downstream"
        );
        let fourth_id = fourth.stable_id();
        fourth.ack().await.unwrap();

        // The same key and payload sent again after the ack: a new message.
        topic.send(msg()).await.unwrap();
        let again = next(&mut s, 5).await.unwrap();
        assert_eq!(again.attempt, 1);
        assert_ne!(again.stable_id(), id, "{kind:?}");
        assert_ne!(again.stable_id(), fourth_id, "{kind:?}");
        again.ack().await.unwrap();
    }
}

/// A merge that brings the same payload to a priority retry waiting out its
/// backoff keeps the message's stable id (nothing new to deliver), and a
/// topic deleted and defined again does not hand out its old ids: the same
/// key and payload sent to the new topic is a new message.
#[tokio::test]
async fn a_same_payload_merge_keeps_the_id_and_a_redefined_topic_never_repeats_one() {
    let spec = spec(TopicKind::Priority).max_attempts(10);
    let (_s, client, topic) = setup_with(spec.clone()).await;
    topic
        .send(Message::new("v").key("k").priority(1))
        .await
        .unwrap();
    let (mut s, stop) = stream(&topic, 1);
    let first = next(&mut s, 5).await.unwrap();
    let id = first.stable_id();
    first
        .nack(Some(Duration::from_millis(300)), "boom")
        .await
        .unwrap();
    topic
        .send(Message::new("v").key("k").priority(1))
        .await
        .unwrap();
    let again = next(&mut s, 5).await.unwrap();
    assert_eq!((again.attempt, again.stable_id()), (2, id.clone()));
    again.ack().await.unwrap();
    stop.cancel();
    drop(s);

    client.delete_topic(spec.name.as_str(), true).await.unwrap();
    let topic = client.define_topic(spec).await.unwrap();
    topic
        .send(Message::new("v").key("k").priority(1))
        .await
        .unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    let fresh = next(&mut s, 5).await.unwrap();
    assert_eq!(fresh.attempt, 1);
    assert_ne!(
        fresh.stable_id(),
        id,
        "a new topic's message is a new message"
    );
    fresh.ack().await.unwrap();
}
