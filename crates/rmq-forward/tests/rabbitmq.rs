//! Forwarding into RabbitMQ, against a node of its own that the test
//! starts (its own epmd, ports and database; the machine's RabbitMQ is not
//! touched): every message arrives once with its headers, persistent; a
//! node stopped mid-stream and restarted loses nothing, and duplicates stay
//! within what was in flight (each carries the same `message_id` to
//! deduplicate on); unroutable messages become dead letters with the
//! broker's reason; serial mode keeps each entity's order; a bad target is
//! refused at start.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use rmq::{Message, TopicKind, TopicSpec};
use rmq_forward::{AmqpSink, Forwarder, Target, TargetError};

fn target(rabbit: &RabbitServer, routing_key: &str) -> Target {
    Target::parse(&format!(
        "{}?exchange=due&routing_key={routing_key}",
        rabbit.url()
    ))
    .unwrap()
}

#[tokio::test]
async fn every_message_arrives_once_persistent_with_its_headers() {
    let (_redis, _client, topic) =
        redis_topic(TopicSpec::new("jobs", TopicKind::RangeMerge).slots(8)).await;
    let rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    let mut batch: Vec<Message> = (0..2000)
        .map(|i| {
            Message::new(format!("payload {i}"))
                .key(format!("k{i}"))
                .range(Duration::from_millis(1))
        })
        .collect();
    batch.push(
        Message::new(vec![0u8, 0xff])
            .key(vec![0xffu8, 0x00])
            .range(Duration::from_millis(1)),
    );
    topic.send_batch(&batch).await.unwrap();

    let sink = target(&rabbit, "jobs").connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(eventually(60, || all_ended(&topic)).await);
    let report = running.finish().await;
    assert_eq!(
        (report.forwarded, report.dead, report.retried),
        (2001, 0, 0)
    );

    let arrived = rabbit_drain(&ch).await;
    assert_eq!(arrived.len(), 2001);
    assert!(copies(&arrived).values().all(|&c| c == 1));
    let k7 = arrived
        .iter()
        .find(|a| a.header("rmq-key") == "k7")
        .unwrap();
    assert_eq!(k7.payload, b"payload 7");
    assert_eq!(k7.header("delivery_mode"), "2", "persistent");
    assert_eq!(k7.header("message_id"), k7.header("rmq-id"));
    assert_eq!(k7.header("rmq-kind"), "range-merge");
    assert!(k7.header("rmq-due-ms").parse::<i64>().unwrap() > 0);
    let ids: std::collections::BTreeSet<_> = arrived
        .iter()
        .map(|a| a.header("message_id").to_owned())
        .collect();
    assert_eq!(ids.len(), 2001, "message ids are distinct");
    let binary = arrived.iter().find(|a| a.payload == [0u8, 0xff]).unwrap();
    assert_eq!(
        binary.header("rmq-key"),
        String::from_utf8_lossy(&[0xff, 0x00]),
        "raw key bytes"
    );
}

#[tokio::test]
async fn a_node_stopped_mid_stream_and_restarted_loses_nothing() {
    let spec = TopicSpec::new("jobs", TopicKind::FixedTime)
        .slots(16)
        .lease(Duration::from_secs(2))
        .max_attempts(1000)
        .backoff(Duration::from_millis(100), Duration::from_millis(500));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let mut rabbit = RabbitServer::start();
    let _queue = rabbit_queue(&rabbit.url()).await;
    let total = 3000u64;
    let batch: Vec<Message> = (0..total)
        .map(|i| {
            Message::new(format!("p{i}"))
                .key(format!("k{i}"))
                .delay(Duration::from_millis(i * 3))
        })
        .collect();
    let concurrency = 64;
    let sink = target(&rabbit, "jobs").connect().await.unwrap();
    // Sent once the broker is up: the messages fall due over the run,
    // however long the broker took to start.
    topic.send_batch(&batch).await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink).concurrency(concurrency));
    // Stop it a sixth of the way through (judged by rmq's acks: reading the
    // queue meanwhile would slow everything on a loaded machine).
    assert!(
        eventually(60, || async {
            topic.stats().await.unwrap().total.acked >= total / 6
        })
        .await
    );
    rabbit.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    rabbit.restart();

    let all = eventually(120, || all_ended(&topic)).await;
    let report = running.finish().await;
    assert!(
        all,
        "rmq still holds messages: {:?}",
        topic.stats().await.unwrap().total
    );
    // Durable queue, persistent messages: what was confirmed before the
    // stop is still there.
    let ch = rabbit_channel(&rabbit.url()).await;
    let arrived = rabbit_drain(&ch).await;
    let n = copies(&arrived);
    assert_eq!(n.len(), total as usize, "every message arrived");
    let extra: usize = n.values().map(|c| c - 1).sum();
    eprintln!("after the stop: {extra} duplicates, {report:?}");
    assert!(
        extra <= concurrency,
        "{extra} duplicates: more than the {concurrency} publishes in flight at the stop"
    );
    assert_eq!(report.dead, 0);
    assert!(
        report.retried > 0,
        "the outage made publishes fail: {report:?}"
    );
}

#[tokio::test]
async fn unroutable_messages_become_dead_letters_with_the_brokers_reason() {
    let spec = TopicSpec::new("jobs", TopicKind::Priority)
        .slots(2)
        .max_attempts(3)
        .backoff(Duration::from_millis(20), Duration::from_millis(40));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    let batch: Vec<Message> = (0..5)
        .map(|i| Message::new(format!("p{i}")).key(format!("k{i}")))
        .collect();
    topic.send_batch(&batch).await.unwrap();

    // The exchange exists; nothing is bound with this routing key.
    let sink = target(&rabbit, "nowhere").connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(
        eventually(30, || async {
            topic.stats().await.unwrap().total.dead == 5
        })
        .await
    );
    let report = running.finish().await;
    assert_eq!((report.forwarded, report.dead, report.retried), (0, 5, 10));
    for dead in topic.dead_letters(10).await.unwrap() {
        assert_eq!(dead.attempts, 3);
        assert!(
            dead.error.contains("unroutable: 312 NO_ROUTE"),
            "{}",
            dead.error
        );
    }
    assert!(rabbit_drain(&ch).await.is_empty());
}

#[tokio::test]
async fn serial_mode_keeps_each_entitys_order_into_the_queue() {
    let (_redis, _client, topic) =
        redis_topic(TopicSpec::new("jobs", TopicKind::FixedTime).slots(4)).await;
    let rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    let (entities, each) = (8, 40u64);
    let batch = entity_messages(entities, each);
    topic.send_batch(&batch).await.unwrap();

    let sink = target(&rabbit, "jobs").connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink).serial("fwd"));
    assert!(eventually(60, || all_ended(&topic)).await);
    running.finish().await;
    let arrived = rabbit_drain(&ch).await;
    assert_eq!(arrived.len() as u64, entities * each);
    assert_entity_order(&arrived);
}

#[tokio::test]
async fn a_bad_target_is_refused_at_start_with_the_reason() {
    let rabbit = RabbitServer::start();
    let _ch = rabbit_queue(&rabbit.url()).await;
    let missing = Target::parse(&format!(
        "{}?exchange=absent&routing_key=jobs",
        rabbit.url()
    ))
    .unwrap();
    match missing.connect().await {
        Err(TargetError::Missing(e)) => assert!(e.contains("absent"), "{e}"),
        other => panic!("{:?}", other.err()),
    }
    let no_queue = Target::parse(&format!(
        "{}?exchange=&routing_key=nosuchqueue",
        rabbit.url()
    ))
    .unwrap();
    assert!(matches!(
        no_queue.connect().await,
        Err(TargetError::Missing(_))
    ));
    let port = rmq_test_support::free_port();
    let nobody = Target::parse(&format!(
        "amqp://guest:guest@127.0.0.1:{port}/%2f?exchange=due&routing_key=jobs"
    ))
    .unwrap();
    match nobody.connect().await {
        Err(TargetError::Unreachable(e)) => {
            assert!(!e.contains("guest:guest"), "password shown: {e}")
        }
        other => panic!("{:?}", other.err()),
    }
}

/// The forwarder's own retries reach RabbitMQ as duplicates (it has no
/// deduplication), but each copy carries the same `message_id`, so a
/// consumer can drop the second: what the crate docs promise.
#[tokio::test]
async fn a_retry_after_a_lost_confirm_repeats_the_message_with_the_same_message_id() {
    let spec = TopicSpec::new("jobs", TopicKind::Priority)
        .slots(4)
        .backoff(Duration::from_millis(10), Duration::from_millis(20));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    let batch: Vec<Message> = (0..300)
        .map(|i| Message::new(format!("p{i}")).key(format!("k{i}")))
        .collect();
    topic.send_batch(&batch).await.unwrap();

    let sink = LoseFirstConfirm(target(&rabbit, "jobs").connect().await.unwrap());
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(eventually(30, || all_ended(&topic)).await);
    let report = running.finish().await;
    assert_eq!((report.forwarded, report.retried), (300, 300));
    let arrived = rabbit_drain(&ch).await;
    assert_eq!(arrived.len(), 600, "two copies of each");
    let mut ids = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for a in &arrived {
        ids.entry(a.header("rmq-key").to_owned())
            .or_default()
            .insert(a.header("message_id").to_owned());
    }
    assert_eq!(ids.len(), 300);
    assert!(
        ids.values().all(|set| set.len() == 1),
        "both copies carry one message_id"
    );
    let attempts: std::collections::BTreeSet<_> = arrived
        .iter()
        .map(|a| a.header("rmq-attempt").to_owned())
        .collect();
    assert_eq!(attempts.into_iter().collect::<Vec<_>>(), ["1", "2"]);
}

/// A node that hangs (SIGSTOP: connections open, nothing answered) does
/// not hold the forwarder: publishes without a confirm fail after the
/// confirm timeout and are retried, the hung connection is dropped, and
/// once the node answers again every message arrives; a message repeats
/// only when a publish of it timed out and was retried.
#[tokio::test]
async fn a_hung_node_times_out_its_confirms_and_nothing_is_lost_when_it_answers_again() {
    let spec = TopicSpec::new("jobs", TopicKind::FixedTime)
        .slots(8)
        .max_attempts(1000)
        .backoff(Duration::from_millis(100), Duration::from_millis(300));
    let (_redis, _client, topic) = redis_topic(spec).await;
    let mut rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    let total = 1000u64;
    let message = |i: u64, delay: u64| {
        Message::new(format!("p{i}"))
            .key(format!("k{i}"))
            .delay(Duration::from_millis(delay))
    };
    // A fifth arrives before the hang; the rest is sent once the node
    // hangs, so it is due while nothing answers however long the start
    // took (sent before, it could all be forwarded before the hang).
    let first = total / 5;
    let batch: Vec<Message> = (0..first).map(|i| message(i, 0)).collect();
    topic.send_batch(&batch).await.unwrap();

    let Target::Amqp(t) = target(&rabbit, "jobs") else {
        unreachable!()
    };
    let sink = AmqpSink::connect(t)
        .await
        .unwrap()
        .confirm_timeout(Duration::from_secs(1));
    let concurrency = 64;
    let running = Running::start(Forwarder::new(topic.clone(), sink).concurrency(concurrency));
    assert!(
        eventually(30, || async {
            topic.stats().await.unwrap().total.acked >= first
        })
        .await
    );
    let before = rabbit_drain(&ch).await;
    rabbit.pause();
    let batch: Vec<Message> = (first..total)
        .map(|i| message(i, (i - first) * 2))
        .collect();
    topic.send_batch(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hung = topic.stats().await.unwrap().total;
    // Longer than a connection attempt: the forwarder must neither stop
    // nor wait on the hung node, but keep trying (and failing) its due
    // messages.
    tokio::time::sleep(rmq_forward::amqp::CONNECT_TIMEOUT + Duration::from_secs(2)).await;
    let later = topic.stats().await.unwrap().total;
    assert_eq!(
        later.acked, hung.acked,
        "nothing is acked while the node answers nothing"
    );
    assert!(
        later.retried > hung.retried + 10,
        "publishes are still tried while the node hangs: {} then {} retries",
        hung.retried,
        later.retried
    );
    rabbit.resume();

    let all = eventually(90, || all_ended(&topic)).await;
    let report = running.finish().await;
    assert!(
        all,
        "rmq still holds messages: {:?}",
        topic.stats().await.unwrap().total
    );
    let ch = rabbit_channel(&rabbit.url()).await;
    let mut arrived = before;
    arrived.extend(rabbit_drain(&ch).await);
    let n = copies(&arrived);
    let extra: usize = n.values().map(|c| c - 1).sum();
    eprintln!("after the hang: {extra} duplicates, {report:?}");
    assert_eq!(n.len(), total as usize, "every message arrived");
    assert!(report.retried > 0, "{report:?}");
    // A repeat comes only from a publish whose confirm never came and
    // that was retried.
    assert!(
        extra as u64 <= report.retried,
        "{extra} duplicates: {report:?}"
    );
}

/// Routed and unroutable messages interleaved on one channel, many in
/// flight: RabbitMQ acks them together and `lapin` may hand a returned
/// message to another publish's confirm. Each message must still be judged
/// by its own fate: the routed ones acked in rmq and in the queue once,
/// the returned ones refused (one attempt: straight to the dead letters).
#[tokio::test]
async fn returns_are_matched_to_their_own_message_when_routed_and_unroutable_mix() {
    let spec = TopicSpec::new("jobs", TopicKind::Priority)
        .slots(4)
        .max_attempts(1);
    let (_redis, _client, topic) = redis_topic(spec).await;
    let rabbit = RabbitServer::start();
    let ch = rabbit_queue(&rabbit.url()).await;
    // A headers exchange that routes only slot 0's messages to the queue.
    ch.exchange_declare(
        "by-slot".into(),
        lapin::ExchangeKind::Headers,
        lapin::options::ExchangeDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    let mut args = lapin::types::FieldTable::default();
    args.insert(
        "x-match".into(),
        lapin::types::AMQPValue::LongString("all".into()),
    );
    args.insert(
        "rmq-slot".into(),
        lapin::types::AMQPValue::LongString("0".into()),
    );
    ch.queue_bind(
        "jobs".into(),
        "by-slot".into(),
        "".into(),
        lapin::options::QueueBindOptions::default(),
        args,
    )
    .await
    .unwrap();
    let total = 2000;
    let batch: Vec<Message> = (0..total)
        .map(|i| Message::new(format!("p{i}")).key(format!("k{i}")))
        .collect();
    topic.send_batch(&batch).await.unwrap();

    let to = format!("{}?exchange=by-slot&routing_key=any", rabbit.url());
    let sink = Target::parse(&to).unwrap().connect().await.unwrap();
    let running = Running::start(Forwarder::new(topic.clone(), sink));
    assert!(eventually(60, || all_ended(&topic)).await);
    let report = running.finish().await;

    let arrived = rabbit_drain(&ch).await;
    let in_slot_0 = (0..total)
        .filter(|i| rmq::slot_of(format!("k{i}").as_bytes(), 4) == 0)
        .count();
    assert!(in_slot_0 > 0 && in_slot_0 < total as usize);
    assert!(
        arrived.iter().all(|a| a.header("rmq-slot") == "0"),
        "only slot 0 is routed"
    );
    assert_eq!(
        arrived.len(),
        in_slot_0,
        "each routed message once: {report:?}"
    );
    assert_eq!(copies(&arrived).len(), in_slot_0);
    assert_eq!(
        (report.forwarded, report.dead),
        (in_slot_0 as u64, (total as usize - in_slot_0) as u64),
        "routed ones acked, returned ones dead"
    );
    let dead = topic.dead_letters(total as usize).await.unwrap();
    assert!(dead.iter().all(|d| d.error.contains("312 NO_ROUTE")));
    assert!(
        dead.iter().all(|d| rmq::slot_of(&d.key, 4) != 0),
        "no routed message was refused"
    );
}
