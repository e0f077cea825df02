//! A call that runs twice changes nothing twice (I1, I3, I6). A Redis
//! Cluster client sends a command again when its connection broke after
//! the command left (it cannot know whether it ran): every script call
//! that writes names itself with a request key, and a second run answers
//! what the first did. And the calls of one slot's batch run in order,
//! whatever is retried.
//!
//! Each test talks to a one-node cluster through a proxy that cuts the
//! connection right after forwarding the next script call: the server runs
//! it, the reply is lost, the client reconnects and sends it again.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{Client, Message, TopicKind, TopicSpec};

async fn topic(c: &ProxiedCluster, kind: TopicKind) -> rmq::Topic {
    c.connect()
        .await
        .define_topic(TopicSpec::new("t", kind).slots(1).max_attempts(1))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_pop_sent_twice_hands_out_its_first_batch_and_takes_nothing_more() {
    let c = ProxiedCluster::start().await;
    let topic = topic(&c, TopicKind::Priority).await;
    let msgs: Vec<_> = (0..5).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    c.proxy.cut_after_request(b"EVALSHA");
    let taken = topic.take(10).await.unwrap();
    assert_eq!(c.proxy.cuts(), 1, "the pop's reply was cut");
    assert_eq!(taken.len(), 5, "the first run's batch is handed out");
    assert!(taken.iter().all(|d| d.attempt == 1));
    let s = topic.stats().await.unwrap().total;
    assert_eq!((s.delivered, s.in_flight, s.pending), (5, 5, 0));
    for d in taken {
        d.ack().await.unwrap();
    }
    let s = topic.stats().await.unwrap().total;
    assert_eq!(
        (s.acked, s.dead),
        (5, 0),
        "max_attempts 1: no attempt was spent unseen"
    );
}

#[tokio::test]
async fn a_send_sent_twice_is_new_once_and_keeps_its_due_time() {
    let c = ProxiedCluster::start().await;
    let topic = topic(&c, TopicKind::FixedTime).await;
    c.proxy.cut_after_request(b"EVALSHA");
    let sent = topic
        .send(Message::new("x").delay(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(c.proxy.cuts(), 1);
    assert!(!sent.merged, "the second run must not report a merge");
    let s = topic.stats().await.unwrap().total;
    assert_eq!((s.sent, s.merged, s.pending), (1, 0, 1));
    // The due time is the first run's: not shifted by the retry.
    let due = topic.peek(1).await.unwrap()[0].due_ms.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        due <= now + 60_000 && due > now + 55_000,
        "due {due}, now {now}"
    );
}

#[tokio::test]
async fn an_ack_sent_twice_reports_the_ack_not_a_stale_delivery() {
    let c = ProxiedCluster::start().await;
    let topic = topic(&c, TopicKind::Priority).await;
    topic.send(Message::new("m")).await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    c.proxy.cut_after_request(b"EVALSHA");
    d.ack().await.expect("the ack ran once and says so");
    assert_eq!(c.proxy.cuts(), 1);
    let s = topic.stats().await.unwrap().total;
    assert_eq!((s.acked, s.in_flight, s.pending), (1, 0, 0));
}

#[tokio::test]
async fn a_lease_acquired_twice_keeps_its_first_epoch() {
    let c = ProxiedCluster::start().await;
    let topic = topic(&c, TopicKind::Priority).await;
    c.proxy.cut_after_request(b"EVALSHA");
    let lease = topic
        .slot_lease(0, "acquire", "me", 0, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(c.proxy.cuts(), 1);
    assert!(lease.granted);
    assert_eq!(lease.epoch, 1, "a second run must not take a new epoch");
}

#[tokio::test]
async fn a_batch_sent_in_several_calls_keeps_its_order_when_an_early_call_misses_the_script() {
    // More than 1000 messages for one slot go out as several calls. If the
    // first finds the script missing (flushed) while later ones find it
    // again (reloaded by another client meanwhile), the first must still
    // run before the others: a key sent early and again late in the batch
    // ends with the late payload ("the newest payload wins").
    let c = ProxiedCluster::start().await;
    let topic = topic(&c, TopicKind::Priority).await;
    let admin = redis::Client::open(c.server.url()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .unwrap();
    // The first script call gets through (and misses the script); the
    // second and all after it wait.
    c.proxy.hold_from(b"EVALSHA", 2);
    let mut batch = vec![Message::new("early").key("dup").priority(9)];
    batch.extend((0..2_498).map(|i| Message::new(format!("m{i}"))));
    batch.push(Message::new("late").key("dup").priority(9));
    let sender = topic.clone();
    let send = tokio::spawn(async move { sender.send_batch(&batch).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query_async(&mut admin)
            .await
            .unwrap();
        if c.proxy.holding() && info.contains("errorstat_NOSCRIPT") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the batch never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Another client loads every script when it connects.
    let _other = Client::connect(&c.server.url()).await.unwrap();
    c.proxy.release();
    let report = send.await.unwrap().unwrap();
    assert_eq!(report.refused_count(), 0);
    let top = topic.peek(1).await.unwrap();
    assert_eq!(
        (top[0].key.as_slice(), top[0].payload.as_slice()),
        (&b"dup"[..], &b"late"[..]),
        "an earlier call of the batch ran after a later one"
    );
}

#[tokio::test]
async fn a_prefix_that_looks_like_a_request_key_does_not_break_it() {
    // Prefixes may hold ':' and '.': the request key's time to live is read
    // from its end, not from the first ":req:<n>." in it (here that would
    // be 0 ms, and every call that writes would fail).
    let c = ProxiedCluster::start().await;
    let client = Client::connect_cluster(
        &[c.proxy.url().as_str()],
        rmq::ClientOptions::default().prefix("a:req:0.b"),
    )
    .await
    .unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    topic.send(Message::new("m")).await.unwrap();
    c.proxy.cut_after_request(b"EVALSHA");
    let taken = topic.take(10).await.unwrap();
    assert_eq!(c.proxy.cuts(), 1);
    assert_eq!(
        taken.len(),
        1,
        "the first run's answer outlived the re-send"
    );
    for d in taken {
        d.ack().await.unwrap();
    }
}
