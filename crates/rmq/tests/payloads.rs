//! Payloads and merge keys are data, never code: arbitrary bytes (Lua
//! source, RESP fragments, NULs, invalid UTF-8, separators rmq uses
//! internally) round-trip byte for byte through send, peek, take, nack,
//! dead letters and requeue, and nothing they contain is evaluated.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rmq::{DeadSelection, Message, TopicKind, TopicSpec};

fn nasty() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        Just(b"return redis.call('FLUSHALL')".to_vec()),
        Just(b"*1\r\n$8\r\nFLUSHALL\r\n".to_vec()),
        Just(b"]]..os.exit()..[[".to_vec()),
        Just(b"1,2,3|4,5|".to_vec()),
        Just(vec![0u8, 255, 0, 10, 13]),
    ]
}

#[test]
fn arbitrary_bytes_round_trip_and_are_never_evaluated() {
    let backend = Backend::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(backend.connect());
    let topic = rt
        .block_on(
            client.define_topic(
                TopicSpec::new("bytes", TopicKind::Priority)
                    .slots(2)
                    .max_attempts(1)
                    .backoff(Duration::ZERO, Duration::ZERO),
            ),
        )
        .unwrap();
    let sentinel = rt
        .block_on(client.define_topic(TopicSpec::new("sentinel", TopicKind::Priority)))
        .unwrap();
    rt.block_on(sentinel.send(Message::new("still here")))
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(nasty(), nasty()), |(payload, key)| {
            rt.block_on(async {
                let key = if key.is_empty() { b"k".to_vec() } else { key };
                topic
                    .send(Message::new(payload.clone()).key(key.clone()))
                    .await
                    .unwrap();
                let peeked = topic.peek(1).await.unwrap();
                prop_assert_eq!(&peeked[0].payload, &payload);
                prop_assert_eq!(&peeked[0].key, &key);
                let d = topic.take(1).await.unwrap().pop().unwrap();
                prop_assert_eq!(&d.payload, &payload);
                prop_assert_eq!(&d.key, &key);
                // One attempt allowed: the nack buries it with its bytes.
                d.nack(None, "x").await.unwrap();
                let dead = topic.dead_letters(10).await.unwrap();
                prop_assert_eq!(dead.len(), 1);
                prop_assert_eq!(&dead[0].payload, &payload);
                prop_assert_eq!(&dead[0].key, &key);
                topic
                    .requeue_dead(DeadSelection::Key(key.clone()))
                    .await
                    .unwrap();
                let d = topic.take(1).await.unwrap().pop().unwrap();
                prop_assert_eq!(&d.payload, &payload);
                d.ack().await.unwrap();
                Ok(())
            })
        })
        .unwrap();
    // Nothing was flushed or run: the other topic is untouched.
    let st = rt.block_on(sentinel.stats()).unwrap().total;
    assert_eq!(st.pending, 1);
}
