//! Flow control: a topic's rate limit and its in-flight cap hold across
//! every consumer, are followed when they change, and cost nothing on a
//! topic without them; a cap's permits come back however a delivery ends,
//! and after their lease when its consumer vanished.
//!
//! Bounds are checked on the server's clock (`Received::taken_ms`): over
//! any span of W ms a topic delivers at most `burst + rate * W / 1000`,
//! plus what a take→pop round trip can shift into the span (tokens are
//! granted when taken; messages are stamped when popped, one round trip
//! later): allowed for as 200 ms of the rate.
#![allow(clippy::unwrap_used)]
mod common;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rmq::{CancellationToken, Message, Outcome, TopicKind, TopicSpec};
use rmq_test_support::densest;

/// The allowance for a span: burst + rate over the span and 200 ms more.
fn allowed(rate: f64, burst: f64, span_ms: i64) -> usize {
    (burst + rate * (span_ms as f64 + 200.0) / 1000.0).floor() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_consumers_and_follows_a_change_at_once() {
    let (_b, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(8)
            .rate_limit(200, 20),
    )
    .await;
    let batch: Vec<Message> = (0..4000)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    let taken: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = CancellationToken::new();
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (topic, stop, taken) = (topic.clone(), stop.clone(), taken.clone());
            tokio::spawn(async move {
                topic
                    .consumer()
                    .concurrency(16)
                    .run(stop, move |m| {
                        let taken = taken.clone();
                        async move {
                            taken.lock().unwrap().push(m.taken_ms);
                            Outcome::Ack
                        }
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    client
        .update_topic("t", |s| s.rate_limit(50, 20))
        .await
        .unwrap();
    let changed_ms = topic.stats().await.unwrap().server_ms;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    for c in consumers {
        c.await.unwrap();
    }
    let mut times = taken.lock().unwrap().clone();
    times.sort();
    let first = times[0];
    let before: Vec<i64> = times.iter().copied().filter(|&t| t < changed_ms).collect();
    let after: Vec<i64> = times
        .iter()
        .copied()
        .filter(|&t| t >= changed_ms + 1_000)
        .collect();
    eprintln!(
        "{} delivered at 200/s in {} ms, {} at 50/s in the last {} ms",
        before.len(),
        changed_ms - first,
        after.len(),
        times.last().unwrap() - changed_ms - 1_000
    );
    // Never above the limit in any span, at either rate.
    for span in [100, 500, 1_000, 2_000] {
        let d = densest(&before, span);
        assert!(d <= allowed(200.0, 20.0, span), "{d} in {span} ms at 200/s");
        let d = densest(&after, span);
        assert!(d <= allowed(50.0, 20.0, span), "{d} in {span} ms at 50/s");
    }
    // And close to it while there is a backlog: within 10% of rate x time + burst.
    let expected = 20.0 + 200.0 * (changed_ms - first) as f64 / 1000.0;
    let got = before.len() as f64;
    assert!(
        got >= expected * 0.9 && got <= expected * 1.05 + 40.0,
        "{got} delivered at 200/s, expected about {expected}"
    );
    // A second after the change, the new rate holds (its bucket is read at
    // every take, before the consumers' definitions refresh).
    let span = *times.last().unwrap() - (changed_ms + 1_000);
    assert!(
        after.len() <= allowed(50.0, 20.0, span),
        "{} after the change in {span} ms",
        after.len()
    );
}

#[tokio::test]
async fn takes_by_hand_get_what_the_bucket_holds_and_give_back_what_they_did_not_use() {
    let (b, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .rate_limit(2, 5),
    )
    .await;
    let batch: Vec<Message> = (0..3)
        .map(|i| Message::new("v").key(format!("a{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    // Five tokens, three messages: three taken, two given back.
    let got = topic.take(100).await.unwrap();
    assert_eq!(got.len(), 3);
    for d in got {
        d.ack().await.unwrap();
    }
    let batch: Vec<Message> = (0..10)
        .map(|i| Message::new("v").key(format!("b{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut again = Vec::new();
    while again.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the unused tokens never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        again = topic.take(100).await.unwrap();
    }
    // The two given back (and perhaps one more, refilled meanwhile at 2/s).
    assert!((2..=3).contains(&again.len()), "{}", again.len());
    let mut left = 10 - again.len();
    for d in again {
        d.ack().await.unwrap();
    }
    // Empty now; the next token is half a second away.
    assert!(topic.take(100).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let one = topic.take(100).await.unwrap();
    assert_eq!(one.len(), 1);
    left -= 1;
    // Removing the limit removes the bucket; a topic without one never
    // makes one (no extra call per round).
    let bucket = "rmq:rate:{t}";
    let exists = |v: redis::Value| redis::from_redis_value::<i64>(v).unwrap();
    assert_eq!(exists(raw(&b, &["EXISTS", bucket]).await), 1);
    client
        .update_topic("t", |s| s.rate_limit(0, 0))
        .await
        .unwrap();
    assert_eq!(exists(raw(&b, &["EXISTS", bucket]).await), 0);
    let rest = topic.take(100).await.unwrap();
    assert_eq!(rest.len(), left, "all at once without a limit");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(topic.take(100).await.unwrap().is_empty());
    assert_eq!(exists(raw(&b, &["EXISTS", bucket]).await), 0);
}

#[tokio::test]
async fn a_rate_limit_is_checked_like_every_setting() {
    let (_b, client, _t) = setup(TopicKind::Priority, 1).await;
    for bad in [
        TopicSpec::new("x", TopicKind::Priority).rate_limit(rmq::MAX_RATE + 1, 1),
        TopicSpec {
            rate_burst: 5,
            ..TopicSpec::new("x", TopicKind::Priority)
        },
    ] {
        let e = client.define_topic(bad).await.unwrap_err();
        assert_eq!(e.kind(), rmq::ErrorKind::InvalidArgument, "{e}");
    }
    // A burst of 0 with a rate means 1.
    let s = TopicSpec::new("x", TopicKind::Priority).rate_limit(10, 0);
    assert_eq!((s.rate_per_sec, s.rate_burst), (10, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_consumers_keep_the_rate_limit_and_one_at_a_time_per_slot() {
    let (_b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(4)
            .rate_limit(50, 5),
    )
    .await;
    let batch: Vec<Message> = (0..400)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    let seen: Arc<Mutex<Vec<(u32, i64)>>> = Arc::default();
    let busy: Arc<Mutex<std::collections::HashSet<u32>>> = Arc::default();
    let overlaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let run = {
        let (topic, stop, seen, busy) = (topic.clone(), stop.clone(), seen.clone(), busy.clone());
        let overlaps = overlaps.clone();
        tokio::spawn(async move {
            topic
                .consumer()
                .concurrency(8)
                .serial("g")
                .run(stop, move |m| {
                    let (seen, busy, overlaps) = (seen.clone(), busy.clone(), overlaps.clone());
                    async move {
                        if !busy.lock().unwrap().insert(m.slot) {
                            overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        busy.lock().unwrap().remove(&m.slot);
                        seen.lock().unwrap().push((m.slot, m.taken_ms));
                        Outcome::Ack
                    }
                })
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    run.await.unwrap();
    let mut times: Vec<i64> = seen.lock().unwrap().iter().map(|s| s.1).collect();
    times.sort();
    let span = times.last().unwrap() - times[0];
    assert!(
        times.len() <= allowed(50.0, 5.0, span),
        "{} in {span} ms at 50/s",
        times.len()
    );
    assert!(densest(&times, 1_000) <= allowed(50.0, 5.0, 1_000));
    assert!(times.len() >= 60, "only {} in {span} ms", times.len());
    assert_eq!(
        overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "two at once in a slot"
    );
}

/// Runs `consumers` consumers of `topic` until every message in it has
/// ended, each handler marking itself running for `work`; returns the most
/// that ran at once and how each message ended (by the handler's choice:
/// a third acked, a third failed once then acked, a third dead-lettered).
async fn run_counting(
    topic: &rmq::Topic,
    consumers: usize,
    concurrency: usize,
    work: Duration,
    messages: usize,
) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let tasks: Vec<_> = (0..consumers)
        .map(|_| {
            let (topic, stop) = (topic.clone(), stop.clone());
            let (running, most, ended) = (running.clone(), most.clone(), ended.clone());
            tokio::spawn(async move {
                topic
                    .consumer()
                    .concurrency(concurrency)
                    .run(stop, move |m| {
                        let (running, most, ended) = (running.clone(), most.clone(), ended.clone());
                        async move {
                            let now = running.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            tokio::time::sleep(work).await;
                            running.fetch_sub(1, SeqCst);
                            let n: usize = text(&m.key)[1..].parse().unwrap();
                            match (n % 3, m.attempt) {
                                (0, _) | (1, 2..) => {
                                    ended.fetch_add(1, SeqCst);
                                    Outcome::Ack
                                }
                                (1, _) => Outcome::Retry {
                                    after: Some(Duration::from_millis(1)),
                                    error: "once".into(),
                                },
                                _ => {
                                    ended.fetch_add(1, SeqCst);
                                    Outcome::Dead { error: "no".into() }
                                }
                            }
                        }
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.load(SeqCst) < messages {
        assert!(
            Instant::now() < deadline,
            "{} of {messages} ended",
            ended.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for t in tasks {
        t.await.unwrap();
    }
    most.load(SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_cap_holds_across_consumers_and_every_end_frees_its_permit() {
    let (_b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(8)
            .max_in_flight(5),
    )
    .await;
    let batch: Vec<Message> = (0..300)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    // 3 consumers of 16 would run 48 at once; the cap lets 5.
    let most = run_counting(&topic, 3, 16, Duration::from_millis(5), 300).await;
    eprintln!("at most {most} handlers at once under a cap of 5");
    assert!(most <= 5, "{most} at once under a cap of 5");
    assert_eq!(most, 5, "the cap should be reached with a backlog");
    // Acks, retries and dead letters all gave their permits back.
    let s = topic.stats().await.unwrap().total;
    assert_eq!((s.acked, s.dead_lettered, s.in_flight), (200, 100, 0));
    assert_eq!(topic.in_flight_permits().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cap_the_same_consumers_run_many_at_once() {
    let (_b, _c, topic) = setup_with(TopicSpec::new("t", TopicKind::Priority).slots(8)).await;
    let batch: Vec<Message> = (0..300)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    // The control for the test above: it is the cap that held them to 5.
    let most = run_counting(&topic, 3, 16, Duration::from_millis(5), 300).await;
    assert!(most > 5, "only {most} at once without a cap");
    assert_eq!(topic.in_flight_permits().await.unwrap(), 0);
}

#[tokio::test]
async fn permits_of_a_vanished_consumer_come_back_after_their_lease_and_extend_with_it() {
    let (_b, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .lease(Duration::from_millis(800))
            .backoff(Duration::from_millis(1), Duration::from_millis(1))
            .max_in_flight(3),
    )
    .await;
    let batch: Vec<Message> = (0..10)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    let held = topic.take(10).await.unwrap();
    assert_eq!(held.len(), 3, "three permits, three deliveries");
    assert!(
        topic.take(10).await.unwrap().is_empty(),
        "the cap is reached"
    );
    assert_eq!(topic.in_flight_permits().await.unwrap(), 3);
    // One delivery's lease is extended (and its permit with it); the other
    // two vanish as with a consumer killed: no end, no free.
    let mut held = held.into_iter();
    let kept = held.next().unwrap();
    kept.extend(Duration::from_secs(5)).await.unwrap();
    for d in held {
        std::mem::forget(d);
    }
    // Their permits run out with their leases (plus a second's margin).
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(topic.in_flight_permits().await.unwrap(), 1);
    let again = topic.take(10).await.unwrap();
    assert_eq!(
        again.len(),
        2,
        "the two lost permits came back, the kept one did not"
    );
    // A larger cap, live: one more fits, and no more.
    client
        .update_topic("t", |s| s.max_in_flight(4))
        .await
        .unwrap();
    let one = topic.take(10).await.unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(topic.in_flight_permits().await.unwrap(), 4);
    for d in again.into_iter().chain(one) {
        d.ack().await.unwrap();
    }
    kept.ack().await.unwrap();
    // Frees go out after the acks are recorded, in the background.
    let deadline = Instant::now() + Duration::from_secs(5);
    while topic.in_flight_permits().await.unwrap() != 0 {
        assert!(Instant::now() < deadline, "permits not freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Removing the cap frees everything; a cap above the maximum is refused.
    client
        .update_topic("t", |s| s.max_in_flight(0))
        .await
        .unwrap();
    assert_eq!(topic.take(10).await.unwrap().len(), 6);
    let e = client
        .define_topic(
            TopicSpec::new("x", TopicKind::Priority).max_in_flight(rmq::MAX_IN_FLIGHT + 1),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), rmq::ErrorKind::InvalidArgument, "{e}");
}
