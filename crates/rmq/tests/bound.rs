//! Bounded topics (`max_pending`): a send that would add a new message
//! beyond the bound is refused with a typed, retryable `Full` and writes
//! nothing; a merge into a message the topic holds always succeeds; a batch
//! reports per message; every way a message ends gives its room back, so
//! the count against the bound stays the number of messages the topic
//! holds; producers racing each other and consumers never take the topic
//! beyond its bound.
#![allow(clippy::unwrap_used)]
mod common;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rmq::{
    CancelOutcome, CancellationToken, DeadSelection, ErrorKind, Message, Outcome, Settled, Topic,
    TopicKind, TopicSpec,
};

fn msg(key: &str) -> Message {
    Message::new(format!("payload of {key}"))
        .key(key)
        .priority(1)
}

fn keys(prefix: &str, n: usize) -> Vec<Message> {
    (0..n).map(|i| msg(&format!("{prefix}{i}"))).collect()
}

/// Messages the topic holds by its slots, and by the bound's count.
async fn held(topic: &Topic) -> (u64, u64) {
    let by_slots = topic.stats().await.unwrap().total.held();
    let counted = topic.bound_usage().await.unwrap().map_or(0, |(h, _)| h);
    (by_slots, counted)
}

/// Waits until the bound's count agrees with the slots (room comes back
/// after a settle, in the background) and returns it.
async fn settled_count(topic: &Topic) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (by_slots, counted) = held(topic).await;
        if by_slots == counted {
            return counted;
        }
        assert!(
            Instant::now() < deadline,
            "the bound counts {counted}, the topic holds {by_slots}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_full_topic_refuses_new_messages_but_always_takes_merges() {
    let (_b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(4)
            .max_pending(5),
    )
    .await;
    // A batch of eight new messages: the first five fit, the rest are
    // refused one by one, each with the typed, retryable error.
    let report = topic.send_batch(&keys("k", 8)).await.unwrap();
    for (i, r) in report.results.iter().enumerate() {
        match r {
            Ok(s) => assert!(i < 5 && !s.merged, "message {i}: {s:?}"),
            Err(e) => {
                assert!(i >= 5, "message {i}: {e}");
                assert_eq!(e.kind(), ErrorKind::Full, "{e}");
                assert!(e.is_retryable(), "{e}");
                assert!(e.to_string().contains("bound of 5"), "{e}");
            }
        }
    }
    assert_eq!((report.new_count(), report.refused_count()), (5, 3));
    assert_eq!(held(&topic).await, (5, 5));
    // A refused message wrote nothing.
    assert_eq!(topic.get(b"k6").await.unwrap().state, rmq::State::Absent);
    let e = topic.send(msg("z")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Full, "{e}");
    assert_eq!(topic.get(b"z").await.unwrap().state, rmq::State::Absent);
    // Merges add nothing: they succeed on a full topic, alone or in a
    // batch beside a refused new message.
    let merged = topic
        .send(Message::new("newer").key("k0").priority(9))
        .await
        .unwrap();
    assert!(merged.merged);
    let mixed = topic
        .send_batch(&[msg("k1"), msg("z"), msg("k2")])
        .await
        .unwrap();
    assert!(matches!(&mixed.results[0], Ok(s) if s.merged));
    assert_eq!(
        mixed.results[1].as_ref().unwrap_err().kind(),
        ErrorKind::Full
    );
    assert!(matches!(&mixed.results[2], Ok(s) if s.merged));
    assert_eq!(held(&topic).await, (5, 5));
    let stats = topic.stats().await.unwrap().total;
    assert_eq!(
        stats.sent, 8,
        "5 new and 3 merges accepted, refusals not counted"
    );
    // A merge behind an in-flight delivery adds nothing either; a new
    // message behind it is one more message, refused while full.
    let d = topic.take(1).await.unwrap().pop().unwrap();
    let key = d.key.clone();
    let e = topic.send(msg(&text(&key))).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Full,
        "a duplicate behind in-flight is new"
    );
    d.ack().await.unwrap();
    assert_eq!(settled_count(&topic).await, 4);
    let again = topic.send(msg(&text(&key))).await.unwrap();
    assert!(!again.merged);
    assert_eq!(held(&topic).await, (5, 5));
}

#[tokio::test]
async fn every_way_a_message_ends_gives_its_room_back() {
    let (b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .max_attempts(2)
            .lease(Duration::from_secs(5))
            .backoff(Duration::from_millis(1), Duration::from_millis(1))
            .max_pending(8),
    )
    .await;
    topic.send_batch(&keys("k", 8)).await.unwrap();
    assert_eq!(held(&topic).await, (8, 8));
    let mut taken = topic.take(8).await.unwrap();
    assert_eq!(taken.len(), 8);
    // Ack: ends.
    taken.pop().unwrap().ack().await.unwrap();
    assert_eq!(settled_count(&topic).await, 7);
    // A nack that retries keeps the message (attempt 1 of 2) ...
    let retried = taken.pop().unwrap();
    let retried_key = retried.key.clone();
    assert_eq!(retried.nack(None, "again").await.unwrap(), Settled::Done);
    assert_eq!(settled_count(&topic).await, 7);
    // ... a straight dead letter ends it.
    assert_eq!(
        taken.pop().unwrap().dead("poison").await.unwrap(),
        Settled::Dead
    );
    assert_eq!(settled_count(&topic).await, 6);
    // A release gives the message back: it stays.
    taken.pop().unwrap().release().await.unwrap();
    assert_eq!(settled_count(&topic).await, 6);
    // Superseded: a duplicate behind an in-flight delivery is one more
    // message; the nack lets the newer one win and ends the older.
    let d = taken.pop().unwrap();
    topic.send(msg(&text(&d.key))).await.unwrap();
    assert_eq!(settled_count(&topic).await, 7);
    assert_eq!(d.nack(None, "x").await.unwrap(), Settled::Superseded);
    assert_eq!(settled_count(&topic).await, 6);
    // A cancel in flight ends the message at its delivery's end.
    let d = taken.pop().unwrap();
    let out = topic.cancel(&[&d.key]).await.unwrap();
    assert!(matches!(out[0], CancelOutcome::WillNotRetry { .. }));
    assert_eq!(settled_count(&topic).await, 6);
    assert_eq!(d.nack(None, "x").await.unwrap(), Settled::Cancelled);
    assert_eq!(settled_count(&topic).await, 5);
    // A cancel of a waiting message ends it at once.
    let out = topic.cancel(&[&retried_key]).await.unwrap();
    assert!(out[0].cancelled(), "{:?}", out[0]);
    assert_eq!(settled_count(&topic).await, 4);
    // Lease expiry after the last attempt: the next pop rolls it back into
    // the dead letters, and the room comes back. The other lease expires
    // into a retry and stays.
    let (last, other) = (taken.pop().unwrap(), taken.pop().unwrap());
    assert!(taken.is_empty());
    let last_key = last.key.clone();
    last.nack(Some(Duration::ZERO), "once").await.unwrap();
    let again = loop {
        let mut got = topic.take(8).await.unwrap();
        if let Some(i) = got.iter().position(|d| d.key == last_key) {
            break got.swap_remove(i);
        }
        for d in got {
            d.release().await.unwrap();
        }
    };
    assert_eq!(again.attempt, 2);
    std::mem::forget(again);
    std::mem::forget(other);
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for d in topic.take(8).await.unwrap() {
            d.release().await.unwrap();
        }
        let (by_slots, counted) = held(&topic).await;
        if by_slots == 3 && counted == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{by_slots} held, {counted} counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Requeued dead letters count again, even beyond the bound.
    topic.send_batch(&keys("fill", 5)).await.unwrap();
    assert_eq!(held(&topic).await, (8, 8));
    let (requeued, _) = topic.requeue_dead(DeadSelection::All).await.unwrap();
    assert_eq!(requeued, 2);
    assert_eq!(held(&topic).await, (10, 10));
    assert_eq!(
        topic.send(msg("over")).await.unwrap_err().kind(),
        ErrorKind::Full
    );
    // Deleting the topic deletes its count.
    let client = b.connect().await;
    client.delete_topic("t", true).await.unwrap();
    assert_no_room_key(&b).await;
}

/// No bound's count is left in Redis (one node: KEYS sees every key).
async fn assert_no_room_key(b: &Backend) {
    if let Backend::Single(_) = b {
        let left: Vec<String> =
            redis::from_redis_value(raw(b, &["KEYS", "rmq:*:room*"]).await).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_producers_and_consumers_never_take_a_topic_beyond_its_bound() {
    const BOUND: u64 = 300;
    let (_b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_pending(BOUND),
    )
    .await;
    // With nobody consuming, four producers racing with 2,000 new
    // messages get exactly the bound in.
    let admitted = Arc::new(AtomicUsize::new(0));
    let producers = |prefix: &'static str| {
        (0..4)
            .map(|p| {
                let (topic, admitted) = (topic.clone(), admitted.clone());
                tokio::spawn(async move {
                    for round in 0..10 {
                        let batch = keys(&format!("{prefix}{p}-{round}-"), 50);
                        let r = topic.send_batch(&batch).await.unwrap();
                        for e in r.results.iter().filter_map(|r| r.as_ref().err()) {
                            assert_eq!(e.kind(), ErrorKind::Full, "{e}");
                        }
                        admitted.fetch_add(r.new_count(), Ordering::Relaxed);
                    }
                })
            })
            .collect::<Vec<_>>()
    };
    for p in producers("a") {
        p.await.unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), BOUND as usize);
    assert_eq!(held(&topic).await, (BOUND, BOUND));
    // Now with a consumer acking all the while: room comes back as it
    // acks, the producers fill it, and the topic (one slot: a stats
    // reading is one atomic look) never holds more than the bound.
    let stop = CancellationToken::new();
    let acked = Arc::new(AtomicUsize::new(0));
    let consumer = {
        let (topic, stop, acked) = (topic.clone(), stop.clone(), acked.clone());
        tokio::spawn(async move {
            topic
                .consumer()
                .concurrency(8)
                .run(stop, move |_| {
                    let acked = acked.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        acked.fetch_add(1, Ordering::Relaxed);
                        Outcome::Ack
                    }
                })
                .await
                .unwrap()
        })
    };
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (topic, done) = (topic.clone(), done.clone());
        tokio::spawn(async move {
            let mut most = 0;
            while !done.load(Ordering::Relaxed) {
                most = most.max(topic.stats().await.unwrap().total.held());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    for p in producers("b") {
        p.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let most = watcher.await.unwrap();
    assert!(most <= BOUND, "the topic held {most} > {BOUND}");
    assert!(
        admitted.load(Ordering::Relaxed) > BOUND as usize,
        "room came back while consuming"
    );
    // Drained: everything admitted was acked and the count is back to 0.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::Relaxed) < admitted.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline, "not drained");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    consumer.await.unwrap();
    assert_eq!(settled_count(&topic).await, 0);
}

#[tokio::test]
async fn a_bound_set_on_a_live_topic_starts_from_what_it_holds_and_can_be_removed() {
    let (b, client, topic) = setup(TopicKind::Priority, 4).await;
    topic.send_batch(&keys("k", 10)).await.unwrap();
    assert_eq!(topic.bound_usage().await.unwrap(), None);
    client
        .update_topic("t", |s| s.max_pending(12))
        .await
        .unwrap();
    assert_eq!(topic.bound_usage().await.unwrap(), Some((10, 12)));
    // Defining it again the same way (every process does at start) keeps
    // the running count.
    let spec = client.topic("t").await.unwrap().spec();
    client.define_topic((*spec).clone()).await.unwrap();
    assert_eq!(topic.bound_usage().await.unwrap(), Some((10, 12)));
    // A handle opened now sends under the bound: two of five fit. (Open
    // handles follow within their definition's refresh.)
    let fresh = client.topic("t").await.unwrap();
    let report = fresh.send_batch(&keys("n", 5)).await.unwrap();
    assert_eq!((report.new_count(), report.refused_count()), (2, 3));
    assert_eq!(held(&topic).await, (12, 12));
    // Removing the bound removes its count; every send passes again.
    client
        .update_topic("t", |s| s.max_pending(0))
        .await
        .unwrap();
    assert_eq!(topic.bound_usage().await.unwrap(), None);
    assert_no_room_key(&b).await;
    let fresh = client.topic("t").await.unwrap();
    let report = fresh.send_batch(&keys("m", 20)).await.unwrap();
    assert_eq!(report.new_count(), 20);
    // A bound above the maximum is refused like every bad setting.
    let e = client
        .define_topic(TopicSpec::new("x", TopicKind::Priority).max_pending(rmq::MAX_PENDING + 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_of_handles_that_have_not_seen_a_new_bound_are_counted_by_the_update() {
    let (_b, client, topic) = setup(TopicKind::Priority, 4).await;
    topic.send_batch(&keys("k", 10)).await.unwrap();
    // A producer on a handle opened before the bound sends all the while:
    // until its definition refreshes, it does not reserve room.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (topic, stop) = (topic.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let _ = topic.send(msg(&format!("s{i}"))).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .update_topic("t", |s| s.max_pending(1_000))
        .await
        .unwrap();
    // (Sending on past a refresh: had the update not waited for every
    // handle, this one's sends until it refreshes would go uncounted.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();
    // The update counted again once every handle had seen the bound: no
    // message goes uncounted (a send during that count may be counted
    // twice: a little too high, never too low).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (by_slots, counted) = held(&topic).await;
    assert!(
        counted >= by_slots && counted <= by_slots + 5,
        "{counted} counted, {by_slots} held"
    );
    assert!(
        by_slots > 60,
        "the producer sent through the update: {by_slots}"
    );
}

#[tokio::test]
async fn a_recount_heals_a_count_left_too_high_by_a_dead_process() {
    let (b, client, topic) = setup(TopicKind::Priority, 2).await;
    let Backend::Single(_) = &b else {
        return; // the count's key is found with KEYS: one node only
    };
    client
        .update_topic("t", |s| s.max_pending(10))
        .await
        .unwrap();
    let topic = client.topic(&topic.spec().name).await.unwrap();
    topic.send_batch(&keys("k", 4)).await.unwrap();
    // A producer that reserved six and died before sending.
    let room: Vec<String> =
        redis::from_redis_value(raw(&b, &["KEYS", "rmq:*:room"]).await).unwrap();
    raw(&b, &["HINCRBY", &room[0], "live", "6"]).await;
    assert_eq!(topic.bound_usage().await.unwrap(), Some((10, 10)));
    assert_eq!(
        topic.send(msg("x")).await.unwrap_err().kind(),
        ErrorKind::Full
    );
    assert_eq!(topic.recount_bound().await.unwrap(), Some((4, 10)));
    topic.send(msg("x")).await.unwrap();
    assert_eq!(held(&topic).await, (5, 5));
    // A recount adds the room of sends between their reserve and their
    // commit, but not a reservation that ran out (a dead process's).
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000)
        .to_string();
    let reservations = format!("{}z", room[0]);
    raw(
        &b,
        &["ZADD", &reservations, &far, "sending:3", "1", "dead:2"],
    )
    .await;
    assert_eq!(topic.recount_bound().await.unwrap(), Some((8, 10)));
    raw(&b, &["ZREM", &reservations, "sending:3"]).await;
    assert_eq!(topic.recount_bound().await.unwrap(), Some((5, 10)));
    let (_b2, _c2, unbounded) = setup(TopicKind::Priority, 1).await;
    assert_eq!(unbounded.recount_bound().await.unwrap(), None);
}
