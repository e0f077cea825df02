//! Merge semantics through the store are the Redis-only path's: random
//! sequences of sends (keys colliding, new payloads, priorities, due times,
//! ranges), with relay rounds at random points, leave the same message per
//! key as the same sends made straight to Redis — in Redis, or (a
//! fixed-time message due beyond the relay's window) as the store's row.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rmq::{Message, State, TopicKind, TopicSpec};

#[derive(Debug, Clone)]
enum Op {
    /// Send (key, payload, timing value) to both.
    Send(u8, u8, u32),
    /// A relay round (moves what the store holds to Redis).
    Relay,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0u8..4, any::<u8>(), 0u32..1_000).prop_map(|(k, p, t)| Op::Send(k, p, t)),
            1 => Just(Op::Relay),
        ],
        1..24,
    )
}

fn message(kind: TopicKind, key: u8, payload: u8, t: u32, base_ms: i64) -> Message {
    let m = Message::new(format!("p{payload}")).key(format!("k{key}"));
    match kind {
        TopicKind::Priority => m.priority(t),
        // Far enough ahead to stay pending, inside the relay's window.
        TopicKind::FixedTime => m.at_ms(base_ms + 3_600_000 + i64::from(t)),
        TopicKind::RangeMerge => m.range(Duration::from_secs(3_600 + u64::from(t))),
    }
}

#[test]
fn merges_through_the_store_match_merges_in_redis() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(setup());
    let relay_options = RelayOptions {
        // Fixed-time messages are due 3,600 s + 0..1,000 ms ahead: about
        // half of them fall beyond this window and stay in the store.
        window: Duration::from_millis(3_600_500),
        poll: Duration::ZERO,
        ..fast("model")
    };
    let case = std::sync::atomic::AtomicU32::new(0);
    for kind in [
        TopicKind::Priority,
        TopicKind::FixedTime,
        TopicKind::RangeMerge,
    ] {
        // A runner per kind: one runner counts its cases across runs.
        let mut runner = TestRunner::new(Config {
            cases: 40,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&ops(), |ops| {
                let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rt.block_on(async {
                    let base_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_millis() as i64;
                    let (stored, via_store) = s
                        .define(TopicSpec::new(format!("s{case}"), kind).slots(2))
                        .await;
                    let direct = s
                        .client
                        .define_topic(TopicSpec::new(format!("d{case}"), kind).slots(2))
                        .await
                        .unwrap();
                    let app = s.app().await;
                    let mut relay =
                        Relay::connect(&s.pg.conninfo(), s.client.clone(), relay_options.clone())
                            .await
                            .unwrap();
                    for op in &ops {
                        match *op {
                            Op::Send(k, p, t) => {
                                let m = message(kind, k, p, t, base_ms);
                                direct.send(m.clone()).await.unwrap();
                                stored.send(&app, &m).await.unwrap();
                            }
                            Op::Relay => while relay.round().await.unwrap() {},
                        }
                    }
                    while relay.round().await.unwrap() {}
                    relay.round().await.unwrap();
                    for k in 0..4u8 {
                        let key = format!("k{k}");
                        let a = direct.get(key.as_bytes()).await.unwrap();
                        let mut b = via_store.get(key.as_bytes()).await.unwrap();
                        if b.state == State::Absent {
                            // Not moved yet: the store's row is the message.
                            let row = app
                                .query_opt(
                                    "SELECT payload, priority, due_ms FROM rmq_messages
                                     WHERE topic = $1 AND merge_key = $2 AND status = 'stored'",
                                    &[&stored.name(), &key.as_bytes()],
                                )
                                .await
                                .unwrap();
                            if let Some(row) = row {
                                b.state = State::Pending;
                                b.payload = Some(row.get(0));
                                b.priority = row.get::<_, Option<i64>>(1).map(|p| p as u32);
                                b.due_ms = row.get(2);
                            }
                        }
                        prop_assert_eq!(a.state, b.state, "key {}", key);
                        if a.state == State::Absent {
                            continue;
                        }
                        prop_assert_eq!(&a.payload, &b.payload, "key {}", key);
                        prop_assert_eq!(a.priority, b.priority, "key {}", key);
                        match kind {
                            TopicKind::RangeMerge => {
                                // Due from each path's own first send.
                                let (x, y) = (a.due_ms.unwrap(), b.due_ms.unwrap());
                                prop_assert!((x - y).abs() < 2_000, "key {}: {} vs {}", key, x, y);
                            }
                            _ => prop_assert_eq!(a.due_ms, b.due_ms, "key {}", key),
                        }
                    }
                    Ok(())
                })
            })
            .unwrap();
    }
}
