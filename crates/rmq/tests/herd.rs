//! No thundering herd (a single node): a new message wakes one idle
//! parallel consumer, not every one, because idle consumers wait on the
//! topic's marks, which Redis hands to one waiting client at a time. And
//! what a consumer took a mark for is never stranded with it: a busy one
//! hands its due marks back, one that stops hands back all it holds, and
//! one that dies leaves the work in the head index, where the others'
//! rescans find it once it is due. A backlog in one slot still draws in
//! every idle consumer (a pop that leaves work behind marks it again).
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use metrics_util::debugging::DebuggingRecorder;
use rmq::{CancellationToken, Message, Topic, TopicKind, TopicSpec};

fn single_node() -> bool {
    std::env::var("RMQ_TEST_CLUSTER").map_or(true, |v| v != "1")
}

/// Who got what: payload -> the consumers that got it.
type Seen = Arc<Mutex<HashMap<String, Vec<usize>>>>;

/// A consumer on its own connections (as another process would be) that
/// acks everything, after `work` of handling, and notes who got what.
async fn spawn_consumer(
    server: &Backend,
    topic: &str,
    id: usize,
    concurrency: usize,
    work: Duration,
    seen: Seen,
    stop: CancellationToken,
) -> Topic {
    let client = server.connect().await;
    let topic = client.topic(topic).await.unwrap();
    // No rescan within a test: what these consumers do, the marks made
    // them do.
    let mut s = topic
        .consumer()
        .concurrency(concurrency)
        .rescan(Duration::from_secs(600))
        .stream(stop.clone());
    tokio::spawn(async move {
        let _client = client;
        while let Some(d) = s.next().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                tokio::time::sleep(work).await;
                seen.lock()
                    .unwrap()
                    .entry(text(&d.payload))
                    .or_default()
                    .push(id);
                d.ack().await.unwrap();
            });
        }
    });
    topic
}

/// Waits (up to 5 s) until no mark of topic "t" is left in Redis: a
/// consumer took it.
async fn until_marks_taken(server: &Backend) {
    let start = Instant::now();
    while raw(server, &["ZCARD", "rmq:marks#t"]).await != redis::Value::Int(0) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no consumer took the mark"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for(seen: &Seen, n: usize, within: Duration) {
    let start = Instant::now();
    while seen.lock().unwrap().len() < n && start.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_wakes_one_of_twenty_idle_consumers_not_all() {
    if !single_node() {
        return;
    }
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder.install().unwrap();
    for kind in [TopicKind::FixedTime, TopicKind::Priority] {
        let (server, _c, topic) = setup_with(TopicSpec::new("herd", kind).slots(256)).await;
        let seen: Seen = Arc::default();
        let stop = CancellationToken::new();
        for id in 0..20 {
            let (seen, stop) = (seen.clone(), stop.clone());
            spawn_consumer(&server, "herd", id, 8, Duration::ZERO, seen, stop).await;
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await; // start-up
        pops_since_last(&snap, "herd");
        let n = 40;
        for i in 0..n {
            let m = Message::new(format!("m{i}"));
            let m = match kind {
                TopicKind::Priority => m,
                _ => m.delay(Duration::ZERO),
            };
            topic.send(m).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_for(&seen, n, Duration::from_secs(10)).await;
        let pops = pops_since_last(&snap, "herd");
        stop.cancel();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), n, "{kind:?}: every message delivered");
        assert!(
            seen.values().all(|who| who.len() == 1),
            "{kind:?}: each once"
        );
        // A herd makes 20 pops a message, 19 of them empty.
        assert!(
            pops as f64 <= 1.5 * n as f64,
            "{kind:?}: {pops} pop calls for {n} messages sent one at a time to 20 idle consumers"
        );
        let helpers: std::collections::HashSet<usize> = seen.values().flatten().copied().collect();
        assert!(
            helpers.len() >= 5,
            "{kind:?}: the work spreads over the idle consumers ({helpers:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_in_one_slot_draws_in_every_idle_consumer() {
    if !single_node() {
        return;
    }
    let (server, _c, topic) = setup(TopicKind::FixedTime, 1).await;
    let seen: Seen = Arc::default();
    let stop = CancellationToken::new();
    for id in 0..4 {
        let work = Duration::from_millis(5);
        spawn_consumer(&server, "t", id, 1, work, seen.clone(), stop.clone()).await;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let n = 400;
    let batch: Vec<Message> = (0..n)
        .map(|i| Message::new(format!("m{i}")).delay(Duration::ZERO))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    wait_for(&seen, n, Duration::from_secs(30)).await;
    stop.cancel();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), n, "every message delivered");
    let mut per_consumer = [0usize; 4];
    for who in seen.values() {
        assert_eq!(who.len(), 1);
        per_consumer[who[0]] += 1;
    }
    // One mark for the batch: without the pop's mark of what it left
    // behind, the consumer that took it would drain the slot alone.
    assert!(
        per_consumer.iter().all(|&c| c >= n / 10),
        "each of 4 consumers at 5 ms a message takes a share: {per_consumer:?}"
    );
}

/// A consumer that takes one message at a time and holds it until told.
async fn holding_consumer(
    server: &Backend,
    rescan: Duration,
    stop: CancellationToken,
) -> rmq::Deliveries {
    let client = server.connect().await;
    let topic = client.topic("t").await.unwrap();
    let s = topic
        .consumer()
        .concurrency(1)
        .batch(1)
        .rescan(rescan)
        .stream(stop);
    // Keep the client alive as long as the stream: leak it into a task.
    tokio::spawn(async move {
        let _client = client;
        std::future::pending::<()>().await;
    });
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_no_room_hands_the_mark_of_due_work_to_an_idle_one() {
    if !single_node() {
        return;
    }
    let (server, _c, topic) = setup(TopicKind::FixedTime, 16).await;
    let never = Duration::from_secs(600); // no rescan: only the marks tell
    let stop_a = CancellationToken::new();
    let mut a = holding_consumer(&server, never, stop_a.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A, idle, takes the mark of a message due in 1.5 s...
    let due = Duration::from_millis(1_500);
    let sent_at = Instant::now();
    topic.send(Message::new("later").delay(due)).await.unwrap();
    until_marks_taken(&server).await;
    // ...then one due now, which it holds: it has no room left.
    topic
        .send(Message::new("now").delay(Duration::ZERO))
        .await
        .unwrap();
    let held = next(&mut a, 3).await.expect("A takes the message due now");
    assert_eq!(text(&held.payload), "now");
    // B starts idle; what it reads of the head index at start is later work,
    // which is not its own.
    let stop_b = CancellationToken::new();
    let mut b = holding_consumer(&server, never, stop_b.clone()).await;
    let d = next(&mut b, 6)
        .await
        .expect("A hands the due mark back, B takes it");
    assert_eq!(text(&d.payload), "later");
    let late = sent_at.elapsed().saturating_sub(due);
    assert!(
        late < Duration::from_secs(1),
        "delivered {late:?} after due"
    );
    d.ack().await.unwrap();
    held.ack().await.unwrap();
    stop_a.cancel();
    stop_b.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_stops_hands_back_the_marks_it_holds() {
    if !single_node() {
        return;
    }
    let (server, _c, topic) = setup(TopicKind::FixedTime, 16).await;
    let never = Duration::from_secs(600);
    let stop_a = CancellationToken::new();
    let a = holding_consumer(&server, never, stop_a.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let due = Duration::from_millis(1_500);
    let sent_at = Instant::now();
    topic.send(Message::new("later").delay(due)).await.unwrap();
    until_marks_taken(&server).await;
    // B starts while A holds the mark, then A stops.
    let stop_b = CancellationToken::new();
    let mut b = holding_consumer(&server, never, stop_b.clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.close().await;
    let d = next(&mut b, 5).await.expect("B takes the mark A gave back");
    assert_eq!(text(&d.payload), "later");
    let late = sent_at.elapsed().saturating_sub(due);
    assert!(
        late < Duration::from_secs(1),
        "delivered {late:?} after due"
    );
    d.ack().await.unwrap();
    stop_b.cancel();
}

#[test]
fn a_consumer_that_dies_holding_a_mark_leaves_the_work_to_the_rescans() {
    if !single_node() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (server, _c, topic) = rt.block_on(setup(TopicKind::FixedTime, 16));
    // A runs on a runtime of its own, dropped without a stop: its tasks and
    // connections go at once, as when its process is killed.
    let doomed = tokio::runtime::Runtime::new().unwrap();
    let a = doomed.block_on(async {
        let a = holding_consumer(&server, Duration::from_secs(600), CancellationToken::new()).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        a
    });
    let due = Duration::from_millis(1_500);
    let sent_at = Instant::now();
    rt.block_on(async {
        topic.send(Message::new("later").delay(due)).await.unwrap();
        until_marks_taken(&server).await; // A took it
    });
    std::mem::forget(a); // no stop, no hand-back
    doomed.shutdown_background();
    let rescan = Duration::from_secs(1);
    rt.block_on(async {
        let stop = CancellationToken::new();
        let mut b = holding_consumer(&server, rescan, stop.clone()).await;
        let d = next(&mut b, 6)
            .await
            .expect("B's rescan finds the overdue work");
        assert_eq!(text(&d.payload), "later");
        let late = sent_at.elapsed().saturating_sub(due);
        assert!(
            late < rescan + Duration::from_secs(1),
            "delivered {late:?} after due, with a rescan every {rescan:?}"
        );
        d.ack().await.unwrap();
        stop.cancel();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_for_later_work_outlives_the_holders_rescans() {
    if !single_node() {
        return;
    }
    // The consumer holding the mark rescans twice before the message is
    // due (at about 2 s and 4 s after its start; it is due at 4.2 s, so the
    // next rescan comes 1.8 s after): each rescan forgets what it knew of
    // the slots, not the mark.
    let (server, _c, topic) = setup(TopicKind::FixedTime, 16).await;
    let stop = CancellationToken::new();
    let mut s = holding_consumer(&server, Duration::from_secs(2), stop.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let due = Duration::from_millis(3_700);
    let sent_at = Instant::now();
    topic.send(Message::new("later").delay(due)).await.unwrap();
    let d = next(&mut s, 8).await.expect("delivered");
    let late = sent_at.elapsed().saturating_sub(due);
    assert!(
        late < Duration::from_millis(500),
        "delivered {late:?} after due"
    );
    d.ack().await.unwrap();
    stop.cancel();
}
