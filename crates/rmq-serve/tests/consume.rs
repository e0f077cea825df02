//! Consuming over HTTP against a real server and redis-server: take, then
//! ack, nack, dead, extend or release by receipt. Every message is settled exactly
//! once however clients race, a receipt settles through another server
//! instance, a receipt whose lease ran out changes nothing, a client that
//! vanishes loses nothing, and bad receipts and bodies are refused with
//! nothing changed.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use base64::Engine;
use common::*;
use reqwest::StatusCode;
use rmq::{Message, Topic, TopicKind, TopicSpec};
use rmq_serve::Access;
use serde_json::{json, Value};

async fn with_topic(spec: TopicSpec) -> (Server, Topic) {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let t = s.client.define_topic(spec).await.unwrap();
    (s, t)
}

fn priority(slots: u32) -> TopicSpec {
    TopicSpec::new("q", TopicKind::Priority)
        .slots(slots)
        .backoff(Duration::from_millis(20), Duration::from_millis(100))
}

/// Takes up to `max`, waiting up to `wait_ms`.
async fn take(s: &Server, max: u32, wait_ms: u64, lease_ms: Option<u64>) -> Vec<Value> {
    let mut body = json!({"max": max, "wait_ms": wait_ms});
    if let Some(l) = lease_ms {
        body["lease_ms"] = json!(l);
    }
    let (st, v) = s.post("/api/v1/topics/q/take", body).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["deliveries"].as_array().unwrap().clone()
}

/// Settles `receipts` with `op` (`ack`, `nack`, ...); the outcomes.
async fn settle(s: &Server, op: &str, receipts: &[&Value], extra: Value) -> Vec<String> {
    let mut body = json!({ "receipts": receipts });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (st, v) = s.post(&format!("/api/v1/topics/q/{op}"), body).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap().to_string())
        .collect()
}

async fn in_flight(t: &Topic) -> u64 {
    t.stats().await.unwrap().total.in_flight
}

#[tokio::test]
async fn two_clients_racing_settle_every_message_exactly_once() {
    let (s, t) = with_topic(priority(8)).await;
    let n = 10_000;
    let msgs: Vec<_> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
    for chunk in msgs.chunks(5_000) {
        t.send_batch(chunk).await.unwrap();
    }
    let s = std::sync::Arc::new(s);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let s = s.clone();
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let got = take(&s, 100, 500, None).await;
                if got.is_empty() {
                    return seen;
                }
                let receipts: Vec<&Value> = got.iter().map(|d| &d["receipt"]).collect();
                let outcomes = settle(&s, "ack", &receipts, json!({})).await;
                assert!(outcomes.iter().all(|o| o == "acked"), "{outcomes:?}");
                seen.extend(
                    got.iter()
                        .map(|d| d["payload"].as_str().unwrap().to_string()),
                );
            }
        }));
    }
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (n, n), "each exactly once");
    let total = t.stats().await.unwrap().total;
    assert_eq!((total.pending, total.in_flight, total.dead), (0, 0, 0));
}

#[tokio::test]
async fn a_delivery_shows_its_fields_and_binary_as_base64() {
    let (s, t) = with_topic(priority(2)).await;
    t.send(
        Message::new(vec![0xff, 0, 1])
            .key(vec![0xfe, b'k'])
            .priority(7),
    )
    .await
    .unwrap();
    t.send(Message::new("text").key("k2").priority(1))
        .await
        .unwrap();
    let got = take(&s, 10, 0, Some(60_000)).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let binary = got.iter().find(|d| d["payload"].is_null()).unwrap();
    assert_eq!(b64(&binary["payload_base64"]), vec![0xff, 0, 1]);
    assert_eq!(b64(&binary["key_base64"]), vec![0xfe, b'k']);
    assert!(binary["key"].is_null());
    assert_eq!(binary["priority"], 7);
    let text = got.iter().find(|d| d["payload"] == "text").unwrap();
    assert_eq!(text["key"], "k2");
    assert!(text["payload_base64"].is_null() && text["key_base64"].is_null());
    for d in &got {
        assert_eq!(d["attempt"], 1);
        let lease = d["lease_until_ms"].as_i64().unwrap() - d["taken_ms"].as_i64().unwrap();
        assert_eq!(lease, 60_000);
        assert!(d["message_id"].as_str().unwrap().starts_with("q/"));
    }
}

#[tokio::test]
async fn nack_waits_out_its_delay_and_dead_goes_to_the_dead_letters() {
    let (s, t) = with_topic(priority(1)).await;
    t.send(Message::new("a").key("a")).await.unwrap();
    t.send(Message::new("b").key("b")).await.unwrap();
    let got = take(&s, 2, 0, None).await;
    let by = |k: &str| &got.iter().find(|d| d["key"] == k).unwrap()["receipt"];
    let extra = json!({"retry_after_ms": 60_000, "error": "try later"});
    assert_eq!(settle(&s, "nack", &[by("a")], extra).await, ["retrying"]);
    let extra = json!({"error": "poison"});
    assert_eq!(settle(&s, "dead", &[by("b")], extra).await, ["dead"]);
    let (_, a) = s.get("/api/v1/topics/q/messages/a").await;
    assert_eq!(a["state"], "retry-waiting", "{a}");
    let (_, dead) = s.get("/api/v1/topics/q/dead").await;
    assert_eq!(dead["dead"][0]["key"], "b", "{dead}");
    assert_eq!(dead["dead"][0]["error"], "poison", "{dead}");
    assert!(take(&s, 5, 300, None).await.is_empty(), "a waits its delay");
}

#[tokio::test]
async fn extend_keeps_a_delivery_past_its_first_lease() {
    let (s, t) = with_topic(priority(1)).await;
    t.send(Message::new("m")).await.unwrap();
    let got = take(&s, 1, 0, Some(400)).await;
    let r = &got[0]["receipt"];
    let extra = json!({"lease_ms": 30_000});
    assert_eq!(settle(&s, "extend", &[r], extra).await, ["extended"]);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(take(&s, 1, 300, None).await.is_empty(), "still in flight");
    assert_eq!(settle(&s, "ack", &[r], json!({})).await, ["acked"]);
    assert_eq!(in_flight(&t).await, 0);
}

#[tokio::test]
async fn release_gives_a_delivery_back_untouched_at_once() {
    let (s, t) = with_topic(priority(1)).await;
    t.send(Message::new("m").key("m")).await.unwrap();
    let got = take(&s, 1, 0, Some(60_000)).await;
    assert_eq!(got[0]["attempt"], 1, "{got:?}");
    let r = &got[0]["receipt"];
    assert_eq!(settle(&s, "release", &[r], json!({})).await, ["released"]);
    // Due again at once (not after its lease), and no attempt counted.
    let again = take(&s, 1, 0, None).await;
    assert_eq!(again.len(), 1, "released, so taken again at once");
    assert_eq!(
        again[0]["attempt"], 1,
        "a release counts no attempt: {again:?}"
    );
    assert_eq!(settle(&s, "release", &[r], json!({})).await, ["stale"]);
    assert_eq!(
        settle(&s, "ack", &[&again[0]["receipt"]], json!({})).await,
        ["acked"]
    );
    assert_eq!(in_flight(&t).await, 0);
}

#[tokio::test]
async fn another_server_instance_settles_a_receipt() {
    let (a, t) = with_topic(priority(2)).await;
    let b = a.beside(Access::Token(TOKEN.into())).await;
    t.send(Message::new("m")).await.unwrap();
    let got = take(&a, 1, 0, None).await;
    assert_eq!(
        settle(&b, "ack", &[&got[0]["receipt"]], json!({})).await,
        ["acked"]
    );
    let total = t.stats().await.unwrap().total;
    assert_eq!((total.pending, total.in_flight), (0, 0));
}

#[tokio::test]
async fn a_receipt_whose_lease_ran_out_is_stale_and_changes_nothing() {
    let (s, t) = with_topic(priority(1)).await;
    t.send(Message::new("m")).await.unwrap();
    let first = take(&s, 1, 0, Some(300)).await;
    // The client vanishes: the message comes back after the lease.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = take(&s, 1, 10_000, None).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0]["attempt"], 2, "back as a failed attempt");
    let old = &first[0]["receipt"];
    assert_eq!(settle(&s, "ack", &[old], json!({})).await, ["stale"]);
    assert_eq!(in_flight(&t).await, 1, "the new delivery is untouched");
    let new = &second[0]["receipt"];
    assert_eq!(settle(&s, "ack", &[new], json!({})).await, ["acked"]);
    assert_eq!(
        settle(&s, "ack", &[new], json!({})).await,
        ["stale"],
        "once"
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_while_waiting_loses_nothing() {
    let (s, t) = with_topic(priority(1)).await;
    let waiting = s
        .http
        .post(s.url("/api/v1/topics/q/take"))
        .bearer_auth(TOKEN)
        .json(&json!({"max": 5, "wait_ms": 20_000}))
        .send();
    // It gives up (the connection closes) before anything arrives.
    assert!(tokio::time::timeout(Duration::from_millis(300), waiting)
        .await
        .is_err());
    t.send(Message::new("m")).await.unwrap();
    let got = take(&s, 5, 5_000, None).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["attempt"], 1, "never given to the one who left");
}

#[tokio::test]
async fn bad_receipts_and_bodies_are_refused_and_change_nothing() {
    let (s, t) = with_topic(priority(1)).await;
    s.client
        .define_topic(TopicSpec::new("other", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    t.send(Message::new("m")).await.unwrap();
    let got = take(&s, 1, 0, None).await;
    let good = got[0]["receipt"].as_str().unwrap().to_string();
    let mut forged = good.clone().into_bytes();
    forged[12] = if forged[12] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for receipts in [
        json!(["garbage!"]),
        json!([forged]),
        json!([good, "AAAA"]),
        json!([]),
        json!([1]),
    ] {
        let (st, v) = s
            .post("/api/v1/topics/q/ack", json!({ "receipts": receipts }))
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{receipts}: {v}");
        error_kind(&v);
    }
    let (st, v) = s
        .post("/api/v1/topics/other/ack", json!({ "receipts": [good] }))
        .await;
    assert_eq!(
        (st, error_kind(&v)),
        (StatusCode::BAD_REQUEST, "InvalidReceipt"),
        "a receipt of q settles nothing in other: {v}"
    );
    assert_eq!(in_flight(&t).await, 1, "nothing was settled");
    for body in [
        json!({"max": 0}),
        json!({"max": 1001}),
        json!({"wait_ms": 30_001}),
        json!({"lease_ms": 0}),
        json!({"max": 1, "group": "g"}),
        json!({"max": "1"}),
    ] {
        let (st, v) = s.post("/api/v1/topics/q/take", body.clone()).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{body}: {v}");
    }
    let (st, v) = s
        .post(
            "/api/v1/topics/q/extend",
            json!({"receipts": [good], "lease_ms": 0}),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, _) = s.post("/api/v1/topics/nope/take", json!({})).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(in_flight(&t).await, 1, "nothing was taken either");
    assert_eq!(
        settle(&s, "ack", &[&json!(good)], json!({})).await,
        ["acked"]
    );
}

#[tokio::test]
async fn consuming_is_an_action_token_and_read_only_rules_hold() {
    let (s, t) = with_topic(priority(1)).await;
    t.send(Message::new("m")).await.unwrap();
    let r = s
        .http
        .post(s.url("/api/v1/topics/q/take"))
        .json(&json!({"max": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let ro = s.beside(Access::ReadOnly).await;
    let (st, _) = ro.post("/api/v1/topics/q/take", json!({"max": 1})).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _) = ro
        .post("/api/v1/topics/q/ack", json!({"receipts": ["x"]}))
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert_eq!(t.stats().await.unwrap().total.pending, 1, "nothing taken");
}
