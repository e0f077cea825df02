//! I7 Bad input: refused with a typed error and a clear message, before
//! anything is written.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{Client, ClientOptions, ErrorKind, Message, TopicKind, TopicSpec};

#[tokio::test]
async fn topic_definitions_are_checked_and_never_silently_changed() {
    let (_s, client, topic) = setup(TopicKind::Priority, 4).await;
    // Same definition: idempotent.
    client.define_topic((*topic.spec()).clone()).await.unwrap();
    // Different kind or slot count: refused, nothing changed.
    let e = client
        .define_topic(TopicSpec::new("t", TopicKind::FixedTime).slots(4))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TopicConflict);
    assert!(e.to_string().contains("kind"), "{e}");
    let e = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TopicConflict);
    assert_eq!(client.topic("t").await.unwrap().spec(), topic.spec());
    // Invalid definitions.
    for (spec, kind) in [
        (
            TopicSpec::new("a b", TopicKind::Priority),
            ErrorKind::InvalidName,
        ),
        (
            TopicSpec::new("{x}", TopicKind::Priority),
            ErrorKind::InvalidName,
        ),
        (
            TopicSpec::new("", TopicKind::Priority),
            ErrorKind::InvalidName,
        ),
        (
            TopicSpec::new("ok", TopicKind::Priority).slots(12),
            ErrorKind::InvalidSlotCount,
        ),
        (
            TopicSpec::new("ok", TopicKind::Priority).slots(0),
            ErrorKind::InvalidSlotCount,
        ),
        (
            TopicSpec::new("ok", TopicKind::Priority).max_attempts(0),
            ErrorKind::InvalidArgument,
        ),
        (
            TopicSpec::new("ok", TopicKind::Priority).lease(Duration::ZERO),
            ErrorKind::InvalidArgument,
        ),
        (
            TopicSpec::new("ok", TopicKind::Priority)
                .handler_timeout(Duration::from_secs(8 * 86_400)),
            ErrorKind::InvalidArgument,
        ),
    ] {
        assert_eq!(client.define_topic(spec).await.unwrap_err().kind(), kind);
    }
    assert_eq!(
        client.topics().await.unwrap().len(),
        1,
        "no refused topic was stored"
    );
    let e = client.topic("nope").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownTopic);
    assert!(e.to_string().contains("define it first"), "{e}");
}

#[tokio::test]
async fn messages_that_do_not_fit_the_topic_are_refused_whole_batch() {
    let (_s, client, prio) = setup(TopicKind::Priority, 4).await;
    let fixed = client
        .define_topic(TopicSpec::new("f", TopicKind::FixedTime))
        .await
        .unwrap();
    let range = client
        .define_topic(TopicSpec::new("r", TopicKind::RangeMerge))
        .await
        .unwrap();
    let small = client
        .define_topic(TopicSpec::new("small", TopicKind::Priority).max_payload_bytes(8))
        .await
        .unwrap();
    let cases = [
        (
            &prio,
            Message::new("x").priority(rmq::MAX_PRIORITY + 1),
            ErrorKind::InvalidArgument,
        ),
        (
            &prio,
            Message::new("x").delay(Duration::from_secs(1)),
            ErrorKind::InvalidArgument,
        ),
        (&prio, Message::new(""), ErrorKind::InvalidArgument),
        (&fixed, Message::new("x"), ErrorKind::InvalidArgument),
        (
            &fixed,
            Message::new("x").priority(1),
            ErrorKind::InvalidArgument,
        ),
        (
            &fixed,
            Message::new("x").at_ms(-5),
            ErrorKind::InvalidArgument,
        ),
        (&range, Message::new("x"), ErrorKind::InvalidArgument),
        (
            &range,
            Message::new("x").range(Duration::ZERO),
            ErrorKind::InvalidArgument,
        ),
        (
            &small,
            Message::new("123456789").key("k"),
            ErrorKind::PayloadTooLarge,
        ),
    ];
    for (topic, msg, kind) in cases {
        let e = topic.send(msg.clone()).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{msg:?}: {e}");
        // In a batch with valid messages, the whole batch is refused.
        let ok = match topic.kind() {
            TopicKind::Priority => Message::new("ok"),
            TopicKind::FixedTime => Message::new("ok").delay(Duration::ZERO),
            TopicKind::RangeMerge => Message::new("ok").range(Duration::from_millis(5)),
        };
        let e = topic.send_batch(&[ok, msg]).await.unwrap_err();
        assert!(
            e.to_string().contains("message 1") && e.to_string().contains("nothing was sent"),
            "{e}"
        );
    }
    for t in [&prio, &fixed, &range, &small] {
        assert_eq!(
            t.stats().await.unwrap().total.sent,
            0,
            "{}: nothing written",
            t.name()
        );
    }
}

#[tokio::test]
async fn bad_prefixes_and_unreachable_redis_are_clear_errors() {
    let server = RedisServer::start();
    let e = Client::connect_with(&server.url(), ClientOptions::default().prefix("a{b}"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    let port = rmq_test_support::free_port();
    let e = Client::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection);
    assert!(e.to_string().contains("cannot connect"), "{e}");
    let e = Client::connect("not a url").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test]
async fn an_evicting_server_is_refused_unless_allowed() {
    let server = RedisServer::builder()
        .maxmemory_policy("allkeys-lru")
        .start();
    let e = Client::connect(&server.url()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsafeServerConfig);
    assert!(e.to_string().contains("noeviction"), "{e}");
    let opts = ClientOptions {
        allow_eviction: true,
        ..ClientOptions::default()
    };
    Client::connect_with(&server.url(), opts).await.unwrap();
}

#[tokio::test]
async fn extreme_times_extensions_and_delays_are_refused_or_bounded() {
    let (_s, client, prio) = setup(TopicKind::Priority, 1).await;
    let fixed = client
        .define_topic(TopicSpec::new("f", TopicKind::FixedTime))
        .await
        .unwrap();
    let e = fixed
        .send(Message::new("x").at_ms(i64::MAX))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(fixed.stats().await.unwrap().total.sent, 0);
    // An extension past rmq::limits::MAX_LEASE_MS (or of nothing) is
    // refused and leaves the lease as it was; one at the limit is taken.
    prio.send(Message::new("m")).await.unwrap();
    let d = prio.take(1).await.unwrap().pop().unwrap();
    let lease = |k: &[u8]| {
        let prio = prio.clone();
        let k = k.to_vec();
        async move { prio.get(&k).await.unwrap().lease_until_ms }
    };
    let before = lease(b"m").await;
    let max = Duration::from_millis(rmq::limits::MAX_LEASE_MS);
    for refused in [
        Duration::MAX,
        max + Duration::from_millis(1),
        Duration::ZERO,
    ] {
        let e = d.extend(refused).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{refused:?}");
        assert_eq!(lease(b"m").await, before, "{refused:?} changed nothing");
    }
    d.extend(max).await.unwrap();
    assert!(lease(b"m").await > before);
    // A huge retry delay is bounded (MAX_RETRY_DELAY_MS), never a broken score.
    d.nack(Some(Duration::MAX), "much later").await.unwrap();
    let st = prio.stats().await.unwrap().total;
    assert_eq!((st.retry_waiting, st.in_flight), (1, 0));
    assert!(prio.take(1).await.unwrap().is_empty());
}

#[tokio::test]
async fn taking_more_than_a_script_can_unpack_strands_nothing() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 1).await;
    let msgs: Vec<_> = (0..2_500).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    let got = topic.take(10_000).await.unwrap();
    assert_eq!(got.len(), 2_500);
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.in_flight), (0, 2_500));
    for d in got {
        d.release().await.unwrap();
    }
    assert_eq!(topic.stats().await.unwrap().total.pending, 2_500);
}

#[tokio::test]
async fn preflight_warns_about_servers_that_can_lose_messages() {
    use rmq::ServerWarning;
    // Keeps nothing on disk.
    let bare = RedisServer::start();
    let c = Client::connect(&bare.url()).await.unwrap();
    assert_eq!(c.warnings(), [ServerWarning::NoPersistence]);
    // With the AOF: nothing to say.
    let aof = RedisServer::builder().appendonly_always().start();
    assert!(Client::connect(&aof.url())
        .await
        .unwrap()
        .warnings()
        .is_empty());
    // A master with a replica and no persistence.
    let replica = RedisServer::builder()
        .arg("replicaof", &format!("127.0.0.1 {}", bare.port()))
        .start();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let c = Client::connect(&bare.url()).await.unwrap();
        if c.warnings() == [ServerWarning::ReplicatedWithoutPersistence { replicas: 1 }] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", c.warnings());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(replica);
    // CONFIG disabled: the eviction policy cannot be checked.
    let locked = RedisServer::builder().appendonly_always().start();
    let raw = redis::Client::open(locked.url()).unwrap();
    let mut conn = raw.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-config")
        .query_async(&mut conn)
        .await
        .unwrap();
    let c = Client::connect(&locked.url()).await.unwrap();
    assert_eq!(c.warnings(), [ServerWarning::ConfigUnreadable]);
}

#[tokio::test]
async fn passwords_never_show_in_debug_output_or_errors() {
    let opts = ClientOptions::default()
        .credentials(Some("u".into()), rmq::Password::new("hunter2-secret"));
    assert!(!format!("{opts:?}").contains("hunter2"), "{opts:?}");
    // A server that refuses the password: the error names the server, not the secret.
    let server = RedisServer::start();
    let e = Client::connect_with(&server.url(), opts).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains("hunter2"), "{e:?}");
    let e = Client::connect(&format!(
        "redis://u:hunter2-secret@127.0.0.1:{}",
        server.port()
    ))
    .await
    .unwrap_err();
    assert!(!format!("{e} {e:?}").contains("hunter2"), "{e:?}");
    // A working client with the password in its URL does not show it either.
    let c = Client::connect(&format!(
        "redis://default:anything@127.0.0.1:{}",
        server.port()
    ))
    .await;
    if let Ok(c) = c {
        assert!(!format!("{c:?}").contains("anything"), "{c:?}");
    }
}

#[tokio::test]
async fn oversized_batches_are_refused_whole() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 1).await;
    let msgs: Vec<Message> = (0..=rmq::MAX_BATCH)
        .map(|i| Message::new(i.to_string()))
        .collect();
    let e = topic.send_batch(&msgs).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(topic.stats().await.unwrap().total.sent, 0);
    // Dead letters are bounded by default.
    assert_eq!(topic.spec().dead_letters_per_slot, 10_000);
}

#[tokio::test]
async fn merge_keys_longer_than_64_kib_are_refused_at_send() {
    // A key travels with every delivery, and `rmq consume --exec` hands it
    // to the handler in one environment string (128 KiB at most on Linux):
    // a longer one could never be handled.
    let (_s, client, _t) = setup(TopicKind::Priority, 4).await;
    let big = client
        .define_topic(TopicSpec::new("big", TopicKind::Priority).max_payload_bytes(1 << 20))
        .await
        .unwrap();
    let too_long = vec![b'k'; rmq::MAX_KEY_BYTES + 1];
    for msg in [
        Message::new("p").key(too_long.clone()),
        // Without a key, the payload is the key.
        Message::new(too_long.clone()),
    ] {
        let e = big.send(msg).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("65536"), "{e}");
    }
    assert_eq!(big.stats().await.unwrap().total.sent, 0, "nothing written");
    let longest = vec![b'k'; rmq::MAX_KEY_BYTES];
    big.send(Message::new("p").key(longest)).await.unwrap();
}
