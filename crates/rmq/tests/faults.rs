//! I1/I6 through faults: Redis restarts (AOF always), scripts flushed,
//! foreign keys planted at queue keys, Redis out of memory. Nothing accepted
//! is lost; calls fail with retryable errors and consumers resume.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{Client, ErrorKind, Message, Outcome, TopicKind, TopicSpec};

#[tokio::test]
async fn redis_restart_loses_no_accepted_message_and_consumers_resume() {
    let mut server = RedisServer::builder().appendonly_always().start();
    let client = Client::connect(&server.url()).await.unwrap();
    let topic = client
        // A pop whose reply the kill cut off leaves its messages in flight
        // until their lease runs out: keep it short so they return in time.
        .define_topic(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(4)
                .lease(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let msgs: Vec<_> = (0..200).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs[..100]).await.unwrap();

    let stop = rmq::CancellationToken::new();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen2 = seen.clone();
    let consumer = tokio::spawn(topic.consumer().concurrency(4).run(stop.clone(), move |m| {
        let seen = seen2.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            seen.lock().unwrap().insert(m.payload);
            Outcome::Ack
        }
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.kill();
    // While Redis is down, a send fails with a retryable error.
    let e = topic.send(Message::new("during")).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    server.restart();
    // The producer retries what failed.
    let mut tries = 0;
    loop {
        match topic.send_batch(&msgs[100..]).await {
            Ok(_) => break,
            Err(e) if e.is_retryable() && tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 200 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    consumer.await.unwrap().unwrap();
    assert_eq!(
        seen.lock().unwrap().len(),
        200,
        "every accepted message was delivered"
    );
    // Messages in flight at the kill came back after their lease.
    let st = topic.stats().await.unwrap().total;
    assert_eq!(st.pending, 0);
}

#[tokio::test]
async fn script_flush_is_survived() {
    let (server, _c, topic) = setup(TopicKind::Priority, 2).await;
    topic.send(Message::new("a")).await.unwrap();
    raw(&server, &["SCRIPT", "FLUSH"]).await;
    topic.send(Message::new("b")).await.unwrap();
    let (mut s, _stop) = stream(&topic, 4);
    raw(&server, &["SCRIPT", "FLUSH"]).await;
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = next(&mut s, 5).await.unwrap();
        got.push(text(&d.payload));
        d.ack().await.unwrap();
    }
    got.sort();
    assert_eq!(got, ["a", "b"]);
}

#[tokio::test]
async fn a_foreign_key_at_a_queue_key_refuses_the_call_and_loses_nothing() {
    let (server, _c, topic) = setup(TopicKind::Priority, 1).await;
    topic.send(Message::new("keep")).await.unwrap();
    // Plant a string where the dead-letter hash lives, then try every script.
    let dead_letters = &topic.keys_of_slot(0)[7];
    assert!(dead_letters.ends_with(":X"));
    raw(&server, &["SET", dead_letters, "oops"]).await;
    let e = topic.send(Message::new("new")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
    let (mut s, stop) = stream(&topic, 1);
    assert!(next(&mut s, 1).await.is_none(), "pop refuses too");
    stop.cancel();
    drop(s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw(&server, &["DEL", dead_letters]).await;
    let st = topic.stats().await.unwrap().total;
    assert_eq!(
        (st.pending, st.in_flight, st.sent),
        (1, 0, 1),
        "nothing half-applied"
    );
}

#[tokio::test]
async fn out_of_memory_refuses_sends_whole_and_still_lets_consumers_ack() {
    let server = RedisServer::builder().maxmemory(3 * 1024 * 1024).start();
    let client = Client::connect(&server.url()).await.unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    let payload = vec![b'x'; 10_000];
    let mut accepted = 0u64;
    let mut refused = false;
    for i in 0..2_000 {
        match topic
            .send(Message::new(payload.clone()).key(format!("k{i}")))
            .await
        {
            Ok(_) => accepted += 1,
            Err(e) => {
                assert!(e.to_string().contains("memory"), "{e}");
                assert!(e.is_retryable(), "OOM is transient: {e:?}");
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "maxmemory was reached");
    assert_eq!(
        topic.stats().await.unwrap().total.pending,
        accepted,
        "a refused send wrote nothing"
    );
    let (mut s, _stop) = stream(&topic, 8);
    for _ in 0..accepted {
        next(&mut s, 5)
            .await
            .expect("delivered under OOM")
            .ack()
            .await
            .unwrap();
    }
    assert_eq!(topic.stats().await.unwrap().total.acked, accepted);
}

#[tokio::test]
async fn an_in_flight_entry_left_by_an_older_version_is_reclaimed_as_a_failed_attempt() {
    let (server, _c, topic) = setup(TopicKind::Priority, 1).await;
    topic
        .send(Message::new("m").key("k").priority(7))
        .await
        .unwrap();
    // What a consumer of the previous version left when it died mid-message:
    // the member is the bare key and attempts, score and token live in `a`.
    let keys = topic.keys_of_slot(0);
    let (q, f, a) = (&keys[0], &keys[2], &keys[8]);
    assert!(q.ends_with(":q") && f.ends_with(":f") && a.ends_with(":a"));
    let score = match raw(&server, &["ZSCORE", q, "k"]).await {
        redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
        redis::Value::Double(d) => format!("{d:.0}"),
        v => panic!("unexpected {v:?}"),
    };
    raw(&server, &["ZREM", q, "k"]).await;
    raw(&server, &["ZADD", f, "1", "k"]).await;
    raw(&server, &["HSET", a, "k", &format!("1,{score},7")]).await;

    let (mut s, _stop) = stream(&topic, 1);
    let d = next(&mut s, 5)
        .await
        .expect("reclaimed and delivered again");
    assert_eq!(
        (
            d.key.as_slice(),
            d.payload.as_slice(),
            d.attempt,
            d.priority
        ),
        (&b"k"[..], &b"m"[..], 2, Some(7))
    );
    d.ack().await.unwrap();
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.in_flight, st.acked), (0, 0, 1));
}
