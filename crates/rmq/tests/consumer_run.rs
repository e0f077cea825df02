//! The handler API: concurrency, outcomes, graceful shutdown, and no busy
//! polling when idle.
#![allow(clippy::unwrap_used)]
mod common;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rmq::{CancellationToken, Message, Outcome, TopicKind, TopicSpec};

#[tokio::test]
async fn run_handles_everything_with_bounded_concurrency() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(8)
            .max_attempts(2)
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    let msgs: Vec<_> = (0..300).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let (r, p, st) = (running.clone(), peak.clone(), stop.clone());
    let topic2 = topic.clone();
    let watcher = tokio::spawn(async move {
        loop {
            let s = topic2.stats().await.unwrap().total;
            if s.acked + s.dead_lettered == 300 {
                st.cancel();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let report = topic
        .consumer()
        .concurrency(8)
        .run(stop, move |m| {
            let (r, p) = (r.clone(), p.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                // Every 10th message is poison.
                if m.payload.ends_with(b"0") {
                    Outcome::Dead {
                        error: "poison".into(),
                    }
                } else {
                    Outcome::Ack
                }
            }
        })
        .await
        .unwrap();
    watcher.await.unwrap();
    assert_eq!((report.acked, report.dead), (270, 30));
    assert!(peak.load(Ordering::SeqCst) <= 8);
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.in_flight, st.dead), (0, 0, 30));
}

#[tokio::test]
async fn shutdown_finishes_running_handlers_and_leaves_nothing_in_flight() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 4).await;
    let msgs: Vec<_> = (0..50).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    let stop = CancellationToken::new();
    let st = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        st.cancel();
    });
    let report = topic
        .consumer()
        .concurrency(4)
        .run(stop, |_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Outcome::Ack
        })
        .await
        .unwrap();
    let s = topic.stats().await.unwrap().total;
    assert_eq!(s.in_flight, 0, "nothing left behind in flight");
    assert_eq!(s.pending + s.acked, 50);
    assert_eq!(report.acked, s.acked);
}

#[tokio::test]
async fn a_long_handler_gets_its_lease_extended() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .lease(Duration::from_millis(200)),
    )
    .await;
    topic.send(Message::new("slow")).await.unwrap();
    let stop = CancellationToken::new();
    let st = stop.clone();
    let report = topic
        .consumer()
        .run(stop, move |_| {
            let st = st.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(700)).await;
                st.cancel();
                Outcome::Ack
            }
        })
        .await
        .unwrap();
    assert_eq!(report.acked, 1);
    let s = topic.stats().await.unwrap().total;
    assert_eq!(
        (s.delivered, s.acked, s.retried),
        (1, 1, 0),
        "no redelivery"
    );
}

#[tokio::test]
async fn an_idle_consumer_does_not_poll() {
    let (server, _c, topic) = setup(TopicKind::FixedTime, 16).await;
    let (mut s, _stop) = {
        let stop = CancellationToken::new();
        // The 5 s safety-net rescan is not what is measured here.
        let s = topic.consumer().rescan(Duration::from_secs(30));
        (s.stream(stop.clone()), stop)
    };
    // Let start-up settle (subscribe, then one look at every slot): wait
    // until no script call happened for 300 ms (on a loaded machine the
    // first look can come late).
    let mut before = calls(&server).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = calls(&server).await;
        if now == before {
            break;
        }
        before = now;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = calls(&server).await - before;
    assert!(idle <= 4, "{idle} script calls in 2 s of idling");
    // ...yet a new message wakes it at once.
    topic
        .send(Message::new("wake").delay(Duration::ZERO))
        .await
        .unwrap();
    let d = next(&mut s, 2).await.expect("woken by the notice");
    d.ack().await.unwrap();
}

#[tokio::test]
async fn a_parallel_consumer_sleeps_while_a_serial_owner_leases_the_slot() {
    // A serial owner that crashed leaves its slot leased (here for 2.5 s);
    // live owners hold it between deliveries too. A parallel consumer may
    // take nothing from it meanwhile, and must not ask again and again.
    let (server, _c, topic) = setup(TopicKind::Priority, 1).await;
    topic.send(Message::new("waits")).await.unwrap();
    let ttl = Duration::from_millis(2_500);
    let planted = std::time::Instant::now();
    let lease = topic
        .slot_lease(0, "acquire", "crashed", 0, ttl)
        .await
        .unwrap();
    assert!(lease.granted);
    let stop = CancellationToken::new();
    let mut s = topic
        .consumer()
        .rescan(Duration::from_secs(30))
        .stream(stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = calls(&server).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let polled = calls(&server).await - before;
    assert!(
        polled <= 3,
        "{polled} script calls in 1.5 s on a leased slot"
    );
    // Once the lease has run out, the message is taken.
    let d = next(&mut s, 5).await.expect("taken after the lease ended");
    assert!(planted.elapsed() >= ttl, "taken while the slot was leased");
    d.ack().await.unwrap();
    stop.cancel();
}

/// Sets its flag when dropped: the handler's future was dropped.
struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs `topic`'s consumer (as `configure` makes it) until `done` holds
/// for the topic's totals; every first attempt hangs (its future holds a
/// drop flag), later ones ack. Returns the report and the flags dropped.
async fn hang_first_attempts(
    topic: &rmq::Topic,
    configure: impl FnOnce(rmq::ConsumerBuilder) -> rmq::ConsumerBuilder,
    done: fn(&rmq::Stats) -> bool,
) -> (rmq::RunReport, usize) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let (t, st) = (topic.clone(), stop.clone());
    let watcher = tokio::spawn(async move {
        while !done(&t.stats().await.unwrap().total) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        st.cancel();
    });
    let d = dropped.clone();
    let report = configure(topic.consumer())
        .run(stop, move |m| {
            let flag = DropFlag(d.clone());
            async move {
                if m.attempt == 1 {
                    let _held = flag;
                    std::future::pending::<()>().await;
                }
                Outcome::Ack
            }
        })
        .await
        .unwrap();
    watcher.await.unwrap();
    (report, dropped.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_handler_past_the_topics_timeout_is_dropped_and_its_message_retried() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_attempts(1)
            .handler_timeout(Duration::from_millis(300)),
    )
    .await;
    topic.send(Message::new("hangs").key("h")).await.unwrap();
    let (report, dropped) = hang_first_attempts(&topic, |c| c, |s| s.dead == 1).await;
    assert_eq!(report.dead, 1, "{report:?}");
    assert!(dropped >= 1, "the hung handler's future was dropped");
    let dead = topic.dead_letters(10).await.unwrap();
    assert_eq!(dead[0].error, "timed out after 300ms");
}

#[tokio::test]
async fn a_consumers_own_timeout_comes_before_the_topics() {
    // The topic has none: the consumer's own limit retries the hung one.
    let (_s, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    topic.send(Message::new("hangs once")).await.unwrap();
    let (report, _) = hang_first_attempts(
        &topic,
        |c| c.handler_timeout(Duration::from_millis(300)),
        |s| s.acked == 1,
    )
    .await;
    assert_eq!((report.retried, report.acked), (1, 1), "{report:?}");
    // The topic has one; the consumer turns it off: a slow handler finishes.
    let topic = client
        .update_topic("t", |s| s.handler_timeout(Duration::from_millis(100)))
        .await
        .unwrap();
    topic.send(Message::new("slow")).await.unwrap();
    let stop = CancellationToken::new();
    let st = stop.clone();
    let report = topic
        .consumer()
        .handler_timeout(Duration::ZERO)
        .run(stop, move |_| {
            let st = st.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                st.cancel();
                Outcome::Ack
            }
        })
        .await
        .unwrap();
    assert_eq!((report.acked, report.retried), (1, 0), "{report:?}");
}
