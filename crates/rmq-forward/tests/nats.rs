//! Forwarding into NATS JetStream, against a `nats-server -js` the test
//! starts: every message arrives once with its headers, a server killed
//! mid-stream loses nothing and the stream still holds each message once
//! (its `Nats-Msg-Id` is the message's stable id), a full stream's refusals
//! become dead letters with the server's reason, serial mode keeps each
//! entity's order, and a bad target is refused at start.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use async_nats::jetstream::stream::DiscardPolicy;
use common::*;
use rmq::{Message, TopicKind, TopicSpec};
use rmq_forward::{Forwarder, Target, TargetError};

const STREAM: &str = "DUE";
const SUBJECT: &str = "due.jobs";

fn target(nats: &NatsServer) -> Target {
    Target::parse(&format!("{}?subject={SUBJECT}", nats.url())).unwrap()
}

#[tokio::test]
async fn every_message_reaches_the_stream_once_with_its_headers() {
    let (_redis, _client, topic) =
        redis_topic(TopicSpec::new("jobs", TopicKind::Priority).slots(8)).await;
    let nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let mut batch: Vec<Message> = (0..2000)
        .map(|i| {
            Message::new(format!("payload {i}"))
                .key(format!("k{i}"))
                .priority(i % 7)
        })
        .collect();
    batch.push(
        Message::new(vec![0u8, 0xff, b'\n'])
            .key(vec![0xffu8, 0x00])
            .priority(1),
    );
    topic.send_batch(&batch).await.unwrap();

    let sink = target(&nats).connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(eventually(30, || async { nats_count(&js, STREAM).await >= 2001 }).await);
    assert!(
        eventually(10, || async {
            topic.stats().await.unwrap().total.in_flight == 0
        })
        .await
    );
    let report = running.finish().await;
    assert_eq!(
        (report.forwarded, report.duplicates, report.dead),
        (2001, 0, 0)
    );

    let arrived = nats_read(&js, STREAM).await;
    assert_eq!(arrived.len(), 2001);
    let n = copies(&arrived);
    assert!(n.values().all(|&c| c == 1), "each message once");
    let k7 = arrived
        .iter()
        .find(|a| a.header("rmq-key") == "k7")
        .unwrap();
    assert_eq!(k7.payload, b"payload 7");
    assert_eq!(k7.header("rmq-topic"), "jobs");
    assert_eq!(k7.header("rmq-kind"), "priority");
    assert_eq!(k7.header("rmq-priority"), "0");
    assert_eq!(k7.header("rmq-attempt"), "1");
    assert_eq!(k7.header("rmq-slot"), rmq::slot_of(b"k7", 8).to_string());
    assert_eq!(k7.header("Nats-Msg-Id"), k7.header("rmq-id"));
    let binary = arrived
        .iter()
        .find(|a| a.header("rmq-key-hex") == "ff00")
        .unwrap();
    assert_eq!(
        binary.payload,
        vec![0u8, 0xff, b'\n'],
        "payload bytes untouched"
    );
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.in_flight, st.dead), (0, 0, 0));
}

#[tokio::test]
async fn a_server_killed_mid_stream_loses_nothing_and_the_stream_keeps_each_message_once() {
    let spec = TopicSpec::new("jobs", TopicKind::FixedTime)
        .slots(16)
        .lease(Duration::from_secs(2))
        .max_attempts(1000)
        .backoff(Duration::from_millis(100), Duration::from_millis(500));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let mut nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let total = 3000;
    let batch: Vec<Message> = (0..total)
        .map(|i| {
            Message::new(format!("p{i}"))
                .key(format!("k{i}"))
                .delay(Duration::from_millis(i * 3))
        })
        .collect();
    let sink = target(&nats).connect().await.unwrap();
    // Sent once the server is up: the messages fall due over the run,
    // however long the server took to start.
    topic.send_batch(&batch).await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink).concurrency(64));
    assert!(eventually(30, || async { nats_count(&js, STREAM).await >= total / 6 }).await);
    nats.kill();
    // Down for longer than a publish waits for its ack: the publishes in
    // flight fail and are retried (a short outage is bridged by the client,
    // which replays them after reconnecting).
    tokio::time::sleep(rmq_forward::nats::ACK_TIMEOUT + Duration::from_secs(1)).await;
    nats.restart();

    let js = nats_stream_again(&nats).await;
    let all = eventually(90, || all_ended(&topic)).await;
    let report = running.finish().await;
    assert!(
        all,
        "rmq still holds messages: {:?}",
        topic.stats().await.unwrap().total
    );
    let arrived = nats_read(&js, STREAM).await;
    let n = copies(&arrived);
    eprintln!("after the kill: {report:?}");
    assert_eq!(n.len(), total as usize, "every message arrived");
    assert!(
        n.values().all(|&c| c == 1),
        "JetStream kept each message once"
    );
    assert_eq!(report.dead, 0);
    assert!(
        report.retried > 0,
        "the outage made publishes fail: {report:?}"
    );
    assert_eq!(report.forwarded, total, "{report:?}");
}

async fn nats_stream_again(nats: &NatsServer) -> async_nats::jetstream::Context {
    let client = async_nats::connect(nats.url()).await.unwrap();
    async_nats::jetstream::new(client)
}

#[tokio::test]
async fn a_full_streams_refusals_become_dead_letters_with_the_servers_reason() {
    let spec = TopicSpec::new("jobs", TopicKind::Priority)
        .slots(2)
        .max_attempts(2)
        .backoff(Duration::from_millis(20), Duration::from_millis(40));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |c| {
        c.max_messages = 5;
        c.discard = DiscardPolicy::New;
    })
    .await;
    let batch: Vec<Message> = (0..8)
        .map(|i| Message::new(format!("p{i}")).key(format!("k{i}")))
        .collect();
    topic.send_batch(&batch).await.unwrap();

    let sink = target(&nats).connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink).concurrency(1));
    assert!(
        eventually(30, || async {
            topic.stats().await.unwrap().total.dead == 3
        })
        .await
    );
    let report = running.finish().await;
    assert_eq!((report.forwarded, report.dead), (5, 3));
    assert_eq!(nats_count(&js, STREAM).await, 5);
    for dead in topic.dead_letters(10).await.unwrap() {
        assert_eq!(dead.attempts, 2);
        assert!(
            dead.error.starts_with("the broker refused the message:")
                && dead.error.contains("maximum messages"),
            "{}",
            dead.error
        );
    }
}

#[tokio::test]
async fn serial_mode_keeps_each_entitys_order_into_the_stream() {
    let (_redis, _client, topic) =
        redis_topic(TopicSpec::new("jobs", TopicKind::FixedTime).slots(4)).await;
    let nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let (entities, each) = (8, 40u64);
    let batch = entity_messages(entities, each);
    topic.send_batch(&batch).await.unwrap();

    let sink = target(&nats).connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink).serial("fwd"));
    let total = entities * each;
    assert!(eventually(60, || async { nats_count(&js, STREAM).await >= total }).await);
    running.finish().await;
    let arrived = nats_read(&js, STREAM).await;
    assert_eq!(arrived.len() as u64, total);
    assert_entity_order(&arrived);
    assert!(
        arrived.iter().all(|a| !a.header("rmq-fence").is_empty()),
        "serial deliveries carry their fence"
    );
}

#[tokio::test]
async fn a_serial_forwarder_coordinated_by_zookeeper_keeps_each_entitys_order() {
    let (_redis, _client, topic) =
        redis_topic(TopicSpec::new("jobs", TopicKind::FixedTime).slots(4)).await;
    let nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let zk = rmq_test_support::ZooKeeperServer::start();
    let (entities, each) = (8, 40u64);
    topic
        .send_batch(&entity_messages(entities, each))
        .await
        .unwrap();

    let coordinator = rmq_zk::ZooKeeper::connect(&zk.address("rmq"), Duration::from_secs(6))
        .await
        .unwrap();
    let sink = target(&nats).connect().await.unwrap();
    let running = Running::start(
        Forwarder::new(topic.clone(), sink)
            .serial("fwd")
            .coordinator(std::sync::Arc::new(coordinator)),
    );
    let total = entities * each;
    assert!(eventually(60, || async { nats_count(&js, STREAM).await >= total }).await);
    let member_znodes = zk.monitor().get("zk_ephemerals_count").cloned();
    running.finish().await;
    assert_eq!(
        member_znodes.as_deref(),
        Some("1"),
        "the forwarder joined through ZooKeeper"
    );
    let arrived = nats_read(&js, STREAM).await;
    assert_eq!(arrived.len() as u64, total);
    assert_entity_order(&arrived);
}

#[tokio::test]
async fn a_bad_target_is_refused_at_start_with_the_reason() {
    let nats = NatsServer::start();
    let _js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let missing = Target::parse(&format!("{}?subject=other.subject", nats.url())).unwrap();
    match missing.connect().await {
        Err(TargetError::Missing(e)) => assert!(e.contains("other.subject"), "{e}"),
        other => panic!("{:?}", other.err()),
    }
    let port = rmq_test_support::free_port();
    let nobody = Target::parse(&format!("nats://127.0.0.1:{port}?subject={SUBJECT}")).unwrap();
    assert!(matches!(
        nobody.connect().await,
        Err(TargetError::Unreachable(_))
    ));
}

/// The forwarder's own retries: every first confirm is lost, so every
/// message is published twice with the same `Nats-Msg-Id`; JetStream says
/// the second is a duplicate and the stream holds each message once.
#[tokio::test]
async fn a_retry_after_a_lost_confirm_is_dropped_by_jetstream_as_a_duplicate() {
    let spec = TopicSpec::new("jobs", TopicKind::Priority)
        .slots(4)
        .backoff(Duration::from_millis(10), Duration::from_millis(20));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let nats = NatsServer::start();
    let js = nats_stream(&nats.url(), STREAM, SUBJECT, |_| {}).await;
    let batch: Vec<Message> = (0..300)
        .map(|i| Message::new(format!("p{i}")).key(format!("k{i}")))
        .collect();
    topic.send_batch(&batch).await.unwrap();

    let sink = LoseFirstConfirm(target(&nats).connect().await.unwrap());
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(eventually(30, || all_ended(&topic)).await);
    let report = running.finish().await;
    assert_eq!(
        (report.forwarded, report.retried, report.duplicates),
        (300, 300, 300)
    );
    let arrived = nats_read(&js, STREAM).await;
    assert_eq!(arrived.len(), 300, "each message stored once");
    assert!(copies(&arrived).values().all(|&c| c == 1));
}
