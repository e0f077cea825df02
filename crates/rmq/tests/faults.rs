//! I1/I6 through faults: Redis restarts (AOF always), scripts flushed,
//! foreign keys planted at queue keys, Redis out of memory. Nothing accepted
//! is lost; calls fail with retryable errors and consumers resume.
#![allow(clippy::unwrap_used)]
mod common;
use std::sync::{Arc, Mutex};
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

/// Everything stored under a topic's slot keys, for before/after comparisons.
async fn snapshot(backend: &Backend, keys: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        let t = match raw(backend, &["TYPE", k]).await {
            redis::Value::SimpleString(t) => t,
            v => format!("{v:?}"),
        };
        let content = match t.as_str() {
            "zset" => raw(backend, &["ZRANGE", k, "0", "-1", "WITHSCORES"]).await,
            "hash" => raw(backend, &["HGETALL", k]).await,
            "string" => raw(backend, &["GET", k]).await,
            _ => redis::Value::Nil,
        };
        let mut text = format!("{content:?}");
        if t == "hash" {
            // HGETALL's order is not stable across rehashing: sort the pairs.
            let mut pairs: Vec<String> = match content {
                redis::Value::Array(items) => items.chunks(2).map(|p| format!("{:?}", p)).collect(),
                redis::Value::Map(m) => m.iter().map(|p| format!("{p:?}")).collect(),
                v => vec![format!("{v:?}")],
            };
            pairs.sort();
            text = pairs.join(",");
        }
        out.push(format!("{k} {t} {text}"));
    }
    out
}

/// What a case does once the foreign key is planted.
#[derive(Debug, Clone, Copy)]
enum Step {
    SendNew,
    SendMerge,
    SendBehindInFlight,
    Take,
    TakeAfterLeaseExpired,
    Ack,
    Nack,
    Dead,
    Extend,
    Release,
}

/// A foreign value at any of the ten slot keys, against every kind of call:
/// a call either refuses with `WrongType` and changes nothing at all, or (when
/// it does not touch that key) works and leaves the foreign value alone.
#[tokio::test]
async fn a_foreign_key_at_any_queue_key_is_refused_before_any_write_or_left_alone() {
    let backend = Backend::start();
    let client = backend.connect().await;
    let steps = [
        Step::SendNew,
        Step::SendMerge,
        Step::SendBehindInFlight,
        Step::Take,
        Step::TakeAfterLeaseExpired,
        Step::Ack,
        Step::Nack,
        Step::Dead,
        Step::Extend,
        Step::Release,
    ];
    let mut case = 0;
    let mut refused = 0;
    for planted in 0..10usize {
        for step in steps {
            case += 1;
            let topic = client
                .define_topic(
                    TopicSpec::new(format!("c{case}"), TopicKind::Priority)
                        .slots(1)
                        .lease(Duration::from_millis(150)),
                )
                .await
                .unwrap();
            topic.send(Message::new("f1").key("flying")).await.unwrap();
            topic.send(Message::new("p1").key("pending")).await.unwrap();
            // Same priority, first in first out: "flying" is taken.
            let mut taken = topic.take(1).await.unwrap();
            assert_eq!(taken.len(), 1);
            let d = taken.pop().unwrap();
            assert_eq!(d.key, b"flying");
            if matches!(step, Step::TakeAfterLeaseExpired) {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let keys = topic.keys_of_slot(0);
            let foreign = &keys[planted];
            raw(&backend, &["DEL", foreign]).await;
            raw(&backend, &["SET", foreign, "oops"]).await;
            let before = snapshot(&backend, &keys).await;
            let result: rmq::Result<()> = match step {
                Step::SendNew => topic.send(Message::new("n")).await.map(|_| ()),
                Step::SendMerge => topic
                    .send(Message::new("p2").key("pending"))
                    .await
                    .map(|_| ()),
                Step::SendBehindInFlight => topic
                    .send(Message::new("f2").key("flying"))
                    .await
                    .map(|_| ()),
                Step::Take | Step::TakeAfterLeaseExpired => match topic.take(5).await {
                    Ok(ds) => {
                        ds.into_iter().for_each(std::mem::forget);
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
                Step::Ack => d.ack().await,
                Step::Nack => d.nack(Some(Duration::ZERO), "x").await.map(|_| ()),
                Step::Dead => d.dead("x").await.map(|_| ()),
                Step::Extend => {
                    let r = d.extend(Duration::from_secs(5)).await;
                    std::mem::forget(d);
                    r
                }
                Step::Release => d.release().await,
            };
            let after = snapshot(&backend, &keys).await;
            match result {
                Err(e) => {
                    assert_eq!(
                        e.kind(),
                        ErrorKind::WrongType,
                        "{step:?} with {foreign}: {e}"
                    );
                    assert_eq!(
                        before, after,
                        "{step:?} with {foreign}: refused, yet changed"
                    );
                    refused += 1;
                }
                Ok(()) => {
                    let still = raw(&backend, &["GET", foreign]).await;
                    assert_eq!(
                        still,
                        redis::Value::BulkString(b"oops".to_vec()),
                        "{step:?} with {foreign}: worked and touched the foreign key"
                    );
                    assert_ne!(
                        before, after,
                        "{step:?} with {foreign}: worked, yet changed nothing"
                    );
                }
            }
            raw(&backend, &["DEL", foreign]).await;
        }
    }
    // Every key is written by some call: each must have refused somewhere.
    assert!(refused >= 10, "only {refused} refusals");
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

#[tokio::test]
async fn an_ack_whose_reply_was_lost_and_whose_retry_finds_it_ended_is_reported_unknown() {
    // The connection breaks after the ack left: it ran, but the consumer
    // cannot know. Its retry finds the delivery ended, which is also what
    // it would find had the lease run out meanwhile: the outcome is
    // unknown, and must not be reported as an ack.
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let client = Client::connect(&proxy.url()).await.unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    topic.send(Message::new("m")).await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    proxy.cut_after_request(b"EVALSHA");
    let e = d.ack().await.unwrap_err();
    assert_eq!(proxy.cuts(), 1, "the ack's reply was cut");
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert!(!e.is_retryable());
    assert_eq!(topic.stats().await.unwrap().total.acked, 1, "it did run");
}

#[tokio::test]
async fn a_serial_owner_cut_off_from_redis_gives_its_message_back_at_its_place() {
    // I5 across a handover: the owner handling an entity's first message is
    // cut off from Redis (every script call held), so it gives the slot up
    // locally and stops the handler while Redis still holds its lease. The
    // message must come back ahead of the entity's later messages: not
    // after a nack's backoff (30 s here), which would let them go first.
    let server = RedisServer::start();
    let proxy = Proxy::start(server.addr());
    let client = Client::connect(&proxy.url()).await.unwrap();
    let topic = client
        .define_topic(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(1)
                .lease(Duration::from_secs(3))
                .backoff(Duration::from_secs(30), Duration::from_secs(30)),
        )
        .await
        .unwrap();
    for i in 0..5 {
        topic
            .send(Message::new(format!("e-{i}")).slot_basis("e"))
            .await
            .unwrap();
    }
    let handled = Arc::new(Mutex::new(Vec::<(String, u32)>::new()));
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (stopped_tx, stopped) = tokio::sync::oneshot::channel::<()>();
    let first = Arc::new(Mutex::new(Some((started_tx, stopped_tx))));
    let stop = rmq::CancellationToken::new();
    let run = {
        let (topic, handled, stop) = (topic.clone(), handled.clone(), stop.clone());
        tokio::spawn(async move {
            topic
                .consumer()
                .serial("g")
                .member_timeout(Duration::from_secs(3))
                .slot_lease(Duration::from_secs(3))
                .run(stop, move |m| {
                    let (handled, first) = (handled.clone(), first.clone());
                    async move {
                        let p = String::from_utf8(m.payload.clone()).unwrap();
                        handled.lock().unwrap().push((p, m.attempt));
                        let hang = first.lock().unwrap().take();
                        if let Some((started, stopped)) = hang {
                            // Hangs until the consumer drops it (lease lost).
                            struct OnDrop(Option<tokio::sync::oneshot::Sender<()>>);
                            impl Drop for OnDrop {
                                fn drop(&mut self) {
                                    if let Some(t) = self.0.take() {
                                        let _ = t.send(());
                                    }
                                }
                            }
                            let _guard = OnDrop(Some(stopped));
                            let _ = started.send(());
                            std::future::pending::<()>().await;
                        }
                        Outcome::Ack
                    }
                })
                .await
        })
    };
    tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .expect("the first message reaches its handler")
        .unwrap();
    proxy.hold_from(b"EVALSHA", 1);
    tokio::time::timeout(Duration::from_secs(30), stopped)
        .await
        .expect("the cut-off owner stops its handler")
        .unwrap();
    proxy.release();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while handled.lock().unwrap().len() < 6 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), run).await;
    let handled = handled.lock().unwrap().clone();
    let expected: Vec<(String, u32)> = [
        ("e-0", 1),
        ("e-0", 2),
        ("e-1", 1),
        ("e-2", 1),
        ("e-3", 1),
        ("e-4", 1),
    ]
    .iter()
    .map(|(p, a)| (p.to_string(), *a))
    .collect();
    assert_eq!(handled, expected, "the entity's messages in order");
}

#[tokio::test]
async fn a_client_whose_reconnect_was_refused_recovers_once_redis_accepts_it_again() {
    // The password changes while the client's connection is cut: its
    // reconnect is refused (AUTH). Once the password is back, the same
    // client works again, without a restart of the process.
    let server = RedisServer::start();
    let admin_url = server.url();
    let admin = redis::Client::open(admin_url.as_str()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "old-pass"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://:old-pass@127.0.0.1:{}", server.port());
    let client = Client::connect(&url).await.unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    topic.send(Message::new("before")).await.unwrap();

    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "new-pass"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    // Calls fail meanwhile (the reconnect is refused), each with an error.
    for _ in 0..3 {
        assert!(
            topic.stats().await.is_err(),
            "Redis refuses the old password"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "old-pass"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while std::time::Instant::now() < deadline {
        match topic.send(Message::new("after")).await {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(last, None, "the client works again once Redis accepts it");
    let st = topic.stats().await.unwrap().total;
    assert_eq!(st.pending, 2, "both messages are there");
}
