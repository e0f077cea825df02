//! The head index: an idle consumer reads one key (on a cluster, one per
//! hash tag of its topic, in a call per master) instead of looking at
//! every slot, so what it costs Redis does not grow with the slot count,
//! and what it learns from it is enough: new messages, connections cut
//! while a consumer waits, a crashed consumer's lease. The test that turns
//! the index off runs on a single node only.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::{Duration, Instant};

use common::*;
use rmq::{Message, Topic, TopicKind, TopicSpec};

/// Script calls made until none came for 500 ms (start-up), then over
/// `idle` of idling.
async fn start_up_and_idle_calls(server: &Backend, idle: Duration) -> (u64, u64) {
    let first = calls(server).await;
    let mut before = first;
    let quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = calls(server).await;
        if now == before || quiet_since.elapsed() > Duration::from_secs(20) {
            break;
        }
        before = now;
    }
    tokio::time::sleep(idle).await;
    (before - first, calls(server).await - before)
}

fn head_index_of(topic: &Topic) -> String {
    head_indexes_of(topic).swap_remove(0)
}

/// The keys of the topic's head index: one on a single node; on a cluster
/// one per hash tag of its slots (`<prefix>:{<tag>}:heads#<topic>`).
fn head_indexes_of(topic: &Topic) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for slot in 0..topic.spec().slots {
        let slot_key = &topic.keys_of_slot(slot)[0];
        let (prefix, rest) = slot_key.split_once(":{").unwrap();
        let key = match single_node() {
            true => format!("{prefix}:heads#{}", topic.name()),
            false => {
                let tag = rest.split_once('}').unwrap().0;
                format!("{prefix}:{{{tag}}}:heads#{}", topic.name())
            }
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// A consumer of `topic` that acks whatever comes until nothing came for
/// `quiet_secs`; the payloads it got, sorted.
async fn consume_all(topic: &Topic, quiet_secs: u64) -> Vec<String> {
    let stop = rmq::CancellationToken::new();
    let mut s = topic.consumer().stream(stop.clone());
    let mut got = Vec::new();
    while let Some(d) = next(&mut s, quiet_secs).await {
        got.push(text(&d.payload));
        d.ack().await.unwrap();
    }
    stop.cancel();
    got.sort();
    got
}

/// Sends `n` messages due now ("m0", "m1", ...).
async fn send_due_now(topic: &Topic, n: usize) {
    for i in 0..n {
        topic
            .send(Message::new(format!("m{i}")).delay(Duration::ZERO))
            .await
            .unwrap();
    }
}

/// Script calls a consumer may make to start, whatever the slot count:
/// a look at start and, unless the two meet, another once its wake-up
/// channels are subscribed (each an index read, one per master on a
/// three-master cluster, and direct looks: four on one node, two of its
/// own slots on a cluster); then on one node the first wait on the marks,
/// on a cluster its first heartbeat of slot affinity and the note of the
/// membership in the topic registry.
fn start_budget() -> u64 {
    let (reads, looks, after) = if single_node() { (1, 4, 1) } else { (3, 2, 2) };
    2 * (reads + looks) + after
}

fn single_node() -> bool {
    std::env::var("RMQ_TEST_CLUSTER").map_or(true, |v| v != "1")
}

#[tokio::test]
async fn an_idle_consumer_costs_a_few_calls_whether_its_topic_has_one_slot_or_65536() {
    for slots in [1, 65_536] {
        let (server, _c, topic) = setup(TopicKind::FixedTime, slots).await;
        let before = calls(&server).await;
        let stop = rmq::CancellationToken::new();
        // The default rescan (5 s): one index read (on a cluster, one per
        // master) and a sweep of four slots (on a cluster, two) each time;
        // on one node a wait on the marks every 2 s, on a cluster a
        // heartbeat every 3 s. A 15 s window holds up to four rescans.
        let mut s = topic.consumer().stream(stop.clone());
        let (start_up, idle) = start_up_and_idle_calls(&server, Duration::from_secs(15)).await;
        assert!(
            start_up <= start_budget(),
            "{slots} slots: {start_up} script calls to start ({} before)",
            before
        );
        assert!(
            idle <= 30,
            "{slots} slots: {idle} script calls in 15 s of idling (at most 2 a second)"
        );
        // ...and a message still wakes it at once.
        topic
            .send(Message::new("wake").delay(Duration::ZERO))
            .await
            .unwrap();
        let d = next(&mut s, 2).await.expect("woken by the notice");
        d.ack().await.unwrap();
        stop.cancel();
    }
}

#[tokio::test]
async fn a_topic_without_a_complete_index_is_looked_at_once_then_read_through_it() {
    // A topic written before the index existed: its messages are there,
    // its index is not marked complete.
    let (server, _c, topic) = setup(TopicKind::Priority, 1024).await;
    for i in 0..50 {
        topic.send(Message::new(format!("m{i}"))).await.unwrap();
    }
    let indexes = head_indexes_of(&topic);
    for index in &indexes {
        raw(&server, &["DEL", index]).await;
    }
    let got = consume_all(&topic, 3).await;
    assert_eq!(
        got.len(),
        50,
        "every message found by looking at every slot"
    );
    for index in &indexes {
        let marked = raw(&server, &["ZSCORE", index, "*"]).await;
        assert_ne!(
            marked,
            redis::Value::Nil,
            "{index} is marked complete after the look"
        );
    }
    // A second consumer starts through the index, once the first one's
    // last calls (handing back what it held as it stopped) are done.
    start_up_and_idle_calls(&server, Duration::ZERO).await;
    let stop = rmq::CancellationToken::new();
    let _s2 = topic.consumer().stream(stop.clone());
    let (start_up, _) = start_up_and_idle_calls(&server, Duration::ZERO).await;
    assert!(
        start_up <= start_budget(),
        "{start_up} script calls to start on 1024 slots"
    );
    stop.cancel();
}

/// Kills the connections a consumer waits on, on every node: its pub/sub
/// connections and (a parallel consumer on one node) the one blocked on
/// the marks.
async fn cut_waiting_connections(server: &Backend) {
    let urls = match server {
        Backend::Single(s) => vec![s.url()],
        Backend::Cluster(c) => c.urls(),
    };
    let mut cut = 0;
    for url in urls {
        let node = redis::Client::open(url.as_str()).unwrap();
        let mut conn = node.get_multiplexed_async_connection().await.unwrap();
        let mut kill = redis::cmd("CLIENT");
        kill.arg("KILL").arg("TYPE").arg("pubsub");
        let killed: i64 = kill.query_async(&mut conn).await.unwrap();
        cut += killed;
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await
            .unwrap();
        for line in list.lines() {
            if line.contains("cmd=bzmpop") {
                let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
                let mut kill = redis::cmd("CLIENT");
                kill.arg("KILL").arg("ID").arg(id);
                let _: redis::Value = kill.query_async(&mut conn).await.unwrap();
            }
        }
    }
    assert!(cut >= 1, "no pub/sub connection was cut");
}

#[tokio::test]
async fn a_consumer_whose_waiting_connections_are_cut_still_gets_each_message_at_once() {
    let (server, _c, topic) = setup(TopicKind::Priority, 1024).await;
    let stop = rmq::CancellationToken::new();
    // No rescan within the test: only what the consumer does when it
    // connects again (a look after subscribing again; a wait on the marks,
    // which stay in Redis) can find the message.
    let mut s = topic
        .consumer()
        .rescan(Duration::from_secs(600))
        .stream(stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..5 {
        cut_waiting_connections(&server).await;
        topic.send(Message::new(format!("lost {i}"))).await.unwrap();
        let d = next(&mut s, 3).await.expect("found after the reconnection");
        assert_eq!(text(&d.payload), format!("lost {i}"));
        d.ack().await.unwrap();
    }
    stop.cancel();
}

#[tokio::test]
async fn a_crashed_consumers_delivery_is_retaken_after_its_lease_end_by_a_consumer_started_later() {
    let (_server, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1024)
            .lease(Duration::from_millis(1_500))
            .backoff(Duration::ZERO, Duration::ZERO),
    )
    .await;
    topic.send(Message::new("crashes")).await.unwrap();
    let taken = topic.take(1).await.unwrap();
    assert_eq!(taken.len(), 1);
    let crashed_at = Instant::now();
    // The taker dies: no settle, no release, no notice.
    std::mem::forget(taken);
    // A consumer started now learns of it from the index alone (nothing
    // is announced): at the first rescan after the lease's end, when the
    // index says the slot's work is overdue. (Earlier, a consumer that
    // waits on the marks takes it as someone else's: the popper's.)
    let stop = rmq::CancellationToken::new();
    let rescan = Duration::from_secs(1);
    let mut s = topic.consumer().rescan(rescan).stream(stop.clone());
    let d = next(&mut s, 6)
        .await
        .expect("taken again after the lease's end");
    assert_eq!((text(&d.payload).as_str(), d.attempt), ("crashes", 2));
    let after = crashed_at.elapsed();
    assert!(after >= Duration::from_millis(1_400), "{after:?}");
    assert!(
        after <= Duration::from_millis(1_500) + rescan + Duration::from_millis(1_000),
        "retaken {after:?} after the crash: within a rescan of the lease's end"
    );
    d.ack().await.unwrap();
    stop.cancel();
}

#[tokio::test]
async fn a_foreign_key_at_the_head_index_costs_looks_and_changes_nothing_else() {
    let (server, _c, topic) = setup(TopicKind::FixedTime, 64).await;
    let index = head_index_of(&topic);
    raw(&server, &["DEL", &index]).await;
    raw(&server, &["SET", &index, "oops"]).await;
    send_due_now(&topic, 20).await;
    let got = consume_all(&topic, 3).await;
    assert_eq!(got.len(), 20, "every message sent, taken and acked");
    assert_eq!(
        raw(&server, &["GET", &index]).await,
        redis::Value::BulkString(b"oops".to_vec()),
        "the foreign key is left alone"
    );
}

#[tokio::test]
async fn with_the_index_turned_off_nothing_keeps_it_and_a_consumer_looks_at_every_slot() {
    if !single_node() {
        return;
    }
    let server = RedisServer::start();
    let options = rmq::ClientOptions::default().head_index(false);
    let client = rmq::Client::connect_with(&server.url(), options)
        .await
        .unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::FixedTime).slots(64))
        .await
        .unwrap();
    let backend = Backend::Single(server);
    send_due_now(&topic, 10).await;
    let before = calls(&backend).await;
    let got = consume_all(&topic, 2).await;
    assert_eq!(got.len(), 10);
    let looks = calls(&backend).await - before;
    assert!(
        looks >= 64,
        "{looks} script calls: one look per slot at start"
    );
    let index = head_index_of(&topic);
    assert_eq!(
        raw(&backend, &["EXISTS", &index]).await,
        redis::Value::Int(0)
    );
}

#[tokio::test]
async fn a_prefix_that_looks_like_a_request_key_keeps_its_index_apart() {
    // A cluster's calls carry a request key ('...:req:...') before the
    // head index, one node's the head index alone: neither may be taken
    // for the other.
    let server = Backend::start();
    let options = rmq::ClientOptions::default().prefix("svc:req");
    let client = match &server {
        Backend::Single(s) => rmq::Client::connect_with(&s.url(), options).await,
        Backend::Cluster(c) => rmq::Client::connect_cluster(&[c.urls()[0].as_str()], options).await,
    }
    .unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    for i in 0..3 {
        topic.send(Message::new(format!("m{i}"))).await.unwrap();
    }
    let got = consume_all(&topic, 2).await;
    assert_eq!(got, ["m0", "m1", "m2"]);
    let stats = topic.stats().await.unwrap().total;
    assert_eq!((stats.sent, stats.acked), (3, 3));
}

#[tokio::test]
async fn a_consumer_started_later_finds_work_on_every_master_through_the_index() {
    // 64 messages spread over a 1,024-slot topic (on a cluster, over
    // every master), sent before any consumer listened: only the index
    // tells a consumer where they are.
    let (server, _c, topic) = setup(TopicKind::Priority, 1024).await;
    for i in 0..64 {
        topic
            .send(Message::new(format!("m{i}")).key(format!("k{i}")))
            .await
            .unwrap();
    }
    let before = calls(&server).await;
    let got = consume_all(&topic, 2).await;
    assert_eq!(got.len(), 64, "every message found");
    let used = calls(&server).await - before;
    // A pop, an ack and (one node) a wait on the marks a message at most,
    // a few index reads and sweeps: far fewer than one look per slot (1,024).
    assert!(used <= 64 * 3 + 40, "{used} script calls for 64 messages");
}
