//! No thundering herd on a Redis Cluster: parallel consumers split the
//! slots among the live ones (slot affinity), and a notice of a slot is
//! acted on by that slot's consumer only. Work is never stranded with a
//! consumer that does not take it: one that dies hands its slots to the
//! others when its heartbeat times out, one that stops or waits a second
//! for room leaves the split, and work that stays due in a slot whose
//! consumer does not take it is taken by the others' rescans.
//!
//! These run in the cluster pass (`RMQ_TEST_CLUSTER=1`); on a single node
//! the marks do this (`herd.rs`).
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use metrics_util::debugging::DebuggingRecorder;
use rmq::{CancellationToken, Message, TopicKind, TopicSpec};

fn on_a_cluster() -> bool {
    std::env::var("RMQ_TEST_CLUSTER").is_ok_and(|v| v == "1")
}

/// How long a consumer's heartbeat lasts, and how often it beats
/// (`consumer/affinity.rs`).
const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_secs(3);

/// Who got what, and when: payload -> (consumer, when it was handled).
type Seen = Arc<Mutex<HashMap<String, Vec<(usize, Instant)>>>>;

/// A consumer on its own connections (as another process would be) that
/// acks everything it takes and notes who got what and when; with
/// `hold`, it keeps its first delivery forever (and has no room after it:
/// concurrency 1).
async fn spawn_consumer(
    server: &Backend,
    topic: &str,
    id: usize,
    rescan: Duration,
    hold: bool,
    seen: Seen,
    stop: CancellationToken,
) {
    let client = server.connect().await;
    let topic = client.topic(topic).await.unwrap();
    let mut s = topic
        .consumer()
        .concurrency(if hold { 1 } else { 8 })
        .rescan(rescan)
        .stream(stop);
    tokio::spawn(async move {
        let _client = client;
        let mut held = Vec::new();
        while let Some(d) = s.next().await {
            seen.lock()
                .unwrap()
                .entry(text(&d.payload))
                .or_default()
                .push((id, Instant::now()));
            if hold {
                held.push(d);
            } else {
                d.ack().await.unwrap();
            }
        }
    });
}

async fn wait_for(seen: &Seen, n: usize, within: Duration) {
    let start = Instant::now();
    while seen.lock().unwrap().len() < n && start.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Long enough for every consumer to have beaten once after the last one
/// joined, and to have read the index again with the split it computed.
async fn until_the_split_settles() {
    tokio::time::sleep(TICK + Duration::from_millis(1_500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_wakes_its_slots_consumer_not_all_twenty() {
    if !on_a_cluster() {
        return;
    }
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder.install().unwrap();
    for kind in [TopicKind::FixedTime, TopicKind::Priority] {
        let (server, _c, topic) = setup_with(TopicSpec::new("herd", kind).slots(256)).await;
        let seen: Seen = Arc::default();
        let stop = CancellationToken::new();
        let never = Duration::from_secs(600); // no rescan: only notices tell
        for id in 0..20 {
            spawn_consumer(
                &server,
                "herd",
                id,
                never,
                false,
                seen.clone(),
                stop.clone(),
            )
            .await;
        }
        until_the_split_settles().await;
        pops_since_last(&snap, "herd");
        let n = 40;
        for i in 0..n {
            let m = Message::new(format!("m{i}")).key(format!("k{i}"));
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
        let helpers: std::collections::HashSet<usize> =
            seen.values().flatten().map(|&(id, _)| id).collect();
        assert!(
            helpers.len() >= 5,
            "{kind:?}: the work spreads over the consumers ({helpers:?})"
        );
    }
}

/// Messages `m0..m<n>` due now, with keys spread over the slots.
async fn send_due_now(topic: &rmq::Topic, n: usize) -> Instant {
    let batch: Vec<Message> = (0..n)
        .map(|i| {
            Message::new(format!("m{i}"))
                .key(format!("k{i}"))
                .delay(Duration::ZERO)
        })
        .collect();
    let at = Instant::now();
    topic.send_batch(&batch).await.unwrap();
    at
}

/// How long after `from` each message was first handled, sorted.
fn delays(seen: &Seen, from: Instant) -> Vec<Duration> {
    let mut d: Vec<Duration> = seen
        .lock()
        .unwrap()
        .values()
        .map(|who| who[0].1.saturating_duration_since(from))
        .collect();
    d.sort();
    d
}

/// A (consumer 0) is killed once the split has settled, without leaving
/// it; B (consumer 1) rescans every `b_rescan`. 64 messages due now are
/// sent right after: how long each waited for B, sorted (each delivered
/// once), waiting `within` at most.
fn after_a_dies(b_rescan: Duration, within: Duration) -> Vec<Duration> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (server, _c, topic) = rt.block_on(setup(TopicKind::FixedTime, 16));
    let seen: Seen = Arc::default();
    let never = Duration::from_secs(600);
    // A runs on a runtime of its own, dropped without a stop: its tasks
    // and connections go at once, as when its process is killed, and it
    // never leaves the membership.
    let doomed = tokio::runtime::Runtime::new().unwrap();
    doomed.block_on(spawn_consumer(
        &server,
        "t",
        0,
        never,
        false,
        seen.clone(),
        CancellationToken::new(),
    ));
    let stop = CancellationToken::new();
    rt.block_on(async {
        spawn_consumer(&server, "t", 1, b_rescan, false, seen.clone(), stop.clone()).await;
        until_the_split_settles().await;
    });
    doomed.shutdown_background();
    let n = 64;
    let sent = rt.block_on(async {
        let sent = send_due_now(&topic, n).await;
        wait_for(&seen, n, within).await;
        sent
    });
    let delays = delays(&seen, sent);
    assert_eq!(delays.len(), n, "every message delivered: {delays:?}");
    assert!(seen.lock().unwrap().values().all(|who| who.len() == 1));
    stop.cancel();
    delays
}

/// Those of `delays` under a second (B's own slots') and the others.
fn at_once_and_later(delays: &[Duration]) -> (Vec<Duration>, Vec<Duration>) {
    delays.iter().partition(|&&d| d < Duration::from_secs(1))
}

#[test]
fn a_consumer_that_dies_hands_its_slots_to_the_others_within_the_member_timeout() {
    if !on_a_cluster() {
        return;
    }
    // No rescan: the membership hands over.
    let never = Duration::from_secs(600);
    let delays = after_a_dies(never, MEMBER_TIMEOUT + TICK + Duration::from_secs(6));
    let (at_once, later) = at_once_and_later(&delays);
    // B took its own slots' messages at once, and A's only once A was
    // gone from the membership: it did not hear their notices.
    assert!(!at_once.is_empty(), "B's own: {delays:?}");
    assert!(
        !later.is_empty(),
        "A's slots waited for the handover: {delays:?}"
    );
    let last = delays.last().copied().unwrap_or_default();
    assert!(
        last <= MEMBER_TIMEOUT + TICK + Duration::from_secs(4),
        "the last message waited {last:?}: more than the member timeout and a heartbeat"
    );
}

#[test]
fn a_dead_consumers_overdue_work_is_taken_at_anothers_rescan_before_its_member_timeout() {
    if !on_a_cluster() {
        return;
    }
    // A rescan a second: work due a second ago in A's slots is B's to take.
    let rescan = Duration::from_secs(1);
    let delays = after_a_dies(rescan, Duration::from_secs(8));
    let (_, later) = at_once_and_later(&delays);
    assert!(!later.is_empty(), "A's slots waited a while: {delays:?}");
    let last = delays.last().copied().unwrap_or_default();
    assert!(
        last <= Duration::from_secs(5),
        "the last message waited {last:?}: a rescan and a second, not the member timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_stops_hands_its_slots_over_at_the_others_next_heartbeat() {
    if !on_a_cluster() {
        return;
    }
    let (server, _c, topic) = setup(TopicKind::FixedTime, 16).await;
    let seen: Seen = Arc::default();
    let never = Duration::from_secs(600);
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    spawn_consumer(&server, "t", 0, never, false, seen.clone(), stop_a.clone()).await;
    spawn_consumer(&server, "t", 1, never, false, seen.clone(), stop_b.clone()).await;
    until_the_split_settles().await;
    stop_a.cancel(); // A leaves the membership as it stops
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = 64;
    let sent = send_due_now(&topic, n).await;
    wait_for(&seen, n, TICK + Duration::from_secs(6)).await;
    let delays = delays(&seen, sent);
    assert_eq!(delays.len(), n, "every message delivered: {delays:?}");
    let last = delays.last().copied().unwrap_or_default();
    assert!(
        last <= TICK + Duration::from_secs(4),
        "the last message waited {last:?}, not the member timeout"
    );
    assert!(seen
        .lock()
        .unwrap()
        .values()
        .all(|who| who.len() == 1 && who[0].0 == 1));
    stop_b.cancel();
}

/// A holds its first delivery and then has no room; B, with `rescan`
/// (never: only the split hands over), takes the rest of `kind`'s 64
/// messages. How long the last one waited.
async fn busy_a_and_idle_b(kind: TopicKind, rescan: Duration) -> Duration {
    let (server, _c, topic) = setup(kind, 16).await;
    let seen: Seen = Arc::default();
    let stop = CancellationToken::new();
    let never = Duration::from_secs(600);
    spawn_consumer(&server, "t", 0, never, true, seen.clone(), stop.clone()).await;
    spawn_consumer(&server, "t", 1, rescan, false, seen.clone(), stop.clone()).await;
    until_the_split_settles().await;
    let n = 64;
    let batch: Vec<Message> = (0..n)
        .map(|i| {
            let m = Message::new(format!("m{i}")).key(format!("k{i}"));
            match kind {
                TopicKind::Priority => m.priority(1),
                _ => m.delay(Duration::ZERO),
            }
        })
        .collect();
    let sent = Instant::now();
    topic.send_batch(&batch).await.unwrap();
    wait_for(&seen, n, Duration::from_secs(12)).await;
    let delays = delays(&seen, sent);
    stop.cancel();
    assert_eq!(
        delays.len(),
        n,
        "{kind:?}: every message delivered: {delays:?}"
    );
    let by_a = seen
        .lock()
        .unwrap()
        .values()
        .filter(|who| who[0].0 == 0)
        .count();
    assert_eq!(by_a, 1, "{kind:?}: A took one and held it");
    delays.last().copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_without_room_leaves_the_split_and_the_others_take_its_slots() {
    if !on_a_cluster() {
        return;
    }
    // No rescans: A leaves after a second without room, and B takes its
    // slots at its next heartbeat.
    let never = Duration::from_secs(600);
    for kind in [TopicKind::FixedTime, TopicKind::Priority] {
        let last = busy_a_and_idle_b(kind, never).await;
        assert!(
            last <= Duration::from_secs(1) + TICK + Duration::from_secs(3),
            "{kind:?}: the last message waited {last:?}"
        );
    }
}
