//! Serial mode over HTTP: clients that take with a group and a member are
//! members of the group as library consumers are. With members joining,
//! falling silent and leaving, through two server instances, no two
//! deliveries of one slot are handled at once, fences only grow, and every
//! entity's messages are handled once and in order (the library's serial
//! checker); a settle under a fence the slot moved past is refused.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use rmq::{Message, TopicKind, TopicSpec};
use rmq_serve::Access;
use rmq_test_support::{check_serial_log, Handled};
use serde_json::{json, Value};

const ENTITIES: u32 = 30;
const PER_ENTITY: u32 = 6;

fn take_body(member: &str, timeout_ms: u64) -> Value {
    json!({
        "max": 4, "wait_ms": 300, "lease_ms": 3000,
        "group": "g", "member": member, "member_timeout_ms": timeout_ms,
    })
}

/// One client: takes as `member` until `stop`, handling each delivery
/// (logged from its start to just before its ack is sent) and acking it.
async fn client(
    s: Arc<Server>,
    member: String,
    log: Arc<Mutex<Vec<Handled>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let (st, v) = s
            .post("/api/v1/topics/s/take", take_body(&member, 1_000))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let got = v["deliveries"].as_array().unwrap().clone();
        let handled = got.into_iter().map(|d| {
            let (s, log) = (s.clone(), log.clone());
            async move {
                let start = Instant::now();
                let payload = d["payload"].as_str().unwrap().to_string();
                let wait = 3 + u64::from(payload.as_bytes()[1] % 7);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let slot = u32::try_from(d["slot"].as_u64().unwrap()).unwrap();
                let fence = d["fence"]
                    .as_u64()
                    .expect("a serial delivery has its fence");
                log.lock().unwrap().push((
                    slot,
                    fence,
                    payload.into_bytes(),
                    start,
                    Instant::now(),
                ));
                let (st, v) = s
                    .post("/api/v1/topics/s/ack", json!({"receipts": [d["receipt"]]}))
                    .await;
                assert_eq!(st, StatusCode::OK, "{v}");
                assert_eq!(v["results"][0]["outcome"], "acked", "{v}");
            }
        });
        futures::future::join_all(handled).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_over_http_never_overlap_a_slot_and_keep_each_entitys_order() {
    let a = Arc::new(Server::start(Access::Token(TOKEN.into())).await);
    let b = Arc::new(a.beside(Access::Token(TOKEN.into())).await);
    let topic = a
        .client
        .define_topic(
            TopicSpec::new("s", TopicKind::FixedTime)
                .slots(8)
                .lease(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    let mut sent: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    let mut msgs = Vec::new();
    for seq in 0..PER_ENTITY {
        for e in 0..ENTITIES {
            let entity = format!("e{e}");
            msgs.push(
                Message::new(format!("{entity}#{seq}"))
                    .slot_basis(entity.clone())
                    .delay(Duration::from_millis(u64::from(seq) * 300)),
            );
            sent.entry(entity.into_bytes()).or_default().push(seq);
        }
    }
    topic.send_batch(&msgs).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = |s: &Arc<Server>, m: &str| {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn(client(s.clone(), m.into(), log.clone(), stop.clone()));
        (stop, task)
    };
    let (stop1, c1) = start(&a, "m1");
    let (stop2, c2) = start(&b, "m2");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (stop3, c3) = start(&a, "m3"); // joins
    tokio::time::sleep(Duration::from_millis(500)).await;
    // m2 falls silent: its server ends it after its timeout, and its
    // slots go to the others.
    stop2.store(true, std::sync::atomic::Ordering::Relaxed);
    c2.await.unwrap();
    let total = (ENTITIES * PER_ENTITY) as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.lock().unwrap().len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for s in [stop1, stop3] {
        s.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    c1.await.unwrap();
    c3.await.unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), total, "every message handled");
    check_serial_log(&log, &sent);
}

#[tokio::test]
async fn a_settle_under_a_fence_the_slot_moved_past_is_refused() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let topic = s
        .client
        .define_topic(TopicSpec::new("s", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    topic
        .send(Message::new("e#0").slot_basis("e"))
        .await
        .unwrap();
    topic
        .send(Message::new("e#1").slot_basis("e"))
        .await
        .unwrap();
    // m1 takes, then falls silent with it in hand (lease 600 ms).
    let body = json!({"max": 1, "wait_ms": 5000, "lease_ms": 600,
                      "group": "g", "member": "m1", "member_timeout_ms": 1000});
    let (_, v) = s.post("/api/v1/topics/s/take", body).await;
    let first = v["deliveries"][0].clone();
    assert_eq!(first["payload"], "e#0", "{v}");
    // m2 gets the slot once m1 is gone, and e#0 back once its lease ran out.
    let body = json!({"max": 1, "wait_ms": 10000, "lease_ms": 30000,
                      "group": "g", "member": "m2", "member_timeout_ms": 30000});
    let mut second = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(20);
    while second.is_null() && Instant::now() < deadline {
        let (st, v) = s.post("/api/v1/topics/s/take", body.clone()).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        second = v["deliveries"][0].clone();
    }
    assert_eq!(second["payload"], "e#0", "back at its place: {second}");
    assert!(second["fence"].as_u64() > first["fence"].as_u64());
    let (_, v) = s
        .post(
            "/api/v1/topics/s/ack",
            json!({"receipts": [first["receipt"]]}),
        )
        .await;
    let outcome = v["results"][0]["outcome"].as_str().unwrap().to_string();
    assert!(
        ["fenced", "stale"].contains(&outcome.as_str()),
        "m1's late ack is refused: {v}"
    );
    let (_, v) = s
        .post(
            "/api/v1/topics/s/ack",
            json!({"receipts": [second["receipt"]]}),
        )
        .await;
    assert_eq!(v["results"][0]["outcome"], "acked", "{v}");
    for (body, why) in [
        (json!({"group": "g"}), "group without member"),
        (json!({"member": "m"}), "member without group"),
        (
            json!({"group": "g", "member": "bad id"}),
            "a member id with a space",
        ),
        (
            json!({"group": "g", "member": "m", "member_timeout_ms": 10}),
            "too short",
        ),
        (
            json!({"member_timeout_ms": 5000}),
            "a timeout without a member",
        ),
    ] {
        let (st, v) = s.post("/api/v1/topics/s/take", body).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{why}: {v}");
    }
}
