//! The HTTP API against a real redis-server: every route's happy path,
//! bad input answered 4xx with the JSON error shape and nothing changed,
//! who may act, and metrics that say what the traffic did.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use rmq::{Client, TopicKind, TopicSpec};
use rmq_serve::Access;
use rmq_test_support::RedisServer;
use serde_json::{json, Value};

#[tokio::test]
async fn a_topic_is_created_listed_shown_updated_paused_and_deleted() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let spec = json!(TopicSpec::new("orders", TopicKind::Priority).slots(4));
    let (st, v) = s.post("/api/v1/topics", spec).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["definition"]["slots"], 4);
    let (st, v) = s.get("/api/v1/topics").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["topics"][0]["definition"]["name"], "orders");
    let (st, v) = s
        .act(
            reqwest::Method::PATCH,
            "/api/v1/topics/orders",
            Some(json!({"max_attempts": 3, "handler_timeout_ms": 45000})),
        )
        .await;
    assert_eq!(
        (st, v["definition"]["max_attempts"].as_u64()),
        (StatusCode::OK, Some(3))
    );
    assert_eq!(v["definition"]["handler_timeout_ms"], 45000, "{v}");
    // The pending layout: flat unless asked (and then left out of the
    // definition), compact by a PATCH, a bad name refused.
    assert_eq!(v["definition"].get("pending_layout"), None, "{v}");
    let (st, v) = s
        .act(
            reqwest::Method::PATCH,
            "/api/v1/topics/orders",
            Some(json!({"pending_layout": "compact"})),
        )
        .await;
    assert_eq!(
        (st, v["definition"]["pending_layout"].as_str()),
        (StatusCode::OK, Some("compact")),
        "{v}"
    );
    let (st, _) = s
        .act(
            reqwest::Method::PATCH,
            "/api/v1/topics/orders",
            Some(json!({"pending_layout": "buckets"})),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, v) = s.post("/api/v1/topics/orders/pause", json!({})).await;
    assert_eq!((st, v["paused"].as_bool()), (StatusCode::OK, Some(true)));
    let (_, v) = s.get("/api/v1/topics/orders").await;
    assert_eq!(v["paused"], true);
    let (st, _) = s.post("/api/v1/topics/orders/resume", json!({})).await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = s.get("/api/v1/topics/orders/stats?slots=true").await;
    assert_eq!(
        (st, v["slots"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(4))
    );
    let (st, v) = s
        .act(reqwest::Method::DELETE, "/api/v1/topics/orders", None)
        .await;
    assert_eq!(
        (st, v["deleted"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    let (st, v) = s.get("/api/v1/topics/orders").await;
    assert_eq!(
        (st, error_kind(&v)),
        (StatusCode::NOT_FOUND, "UnknownTopic")
    );
}

#[tokio::test]
async fn messages_are_sent_looked_up_rescheduled_and_cancelled_by_key() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    s.client
        .define_topic(TopicSpec::new("t", TopicKind::FixedTime).slots(4))
        .await
        .unwrap();
    let (st, v) = s
        .post(
            "/api/v1/topics/t/messages",
            json!({"payload": "<script>alert(1)</script>", "key": "k/1", "delay": 60000}),
        )
        .await;
    assert_eq!(
        (st, v["merged"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    // Its due time as stored, counted from the server's clock.
    let due = v["server_ms"].as_i64().map(|now| now + 60000);
    assert_eq!(v["due_ms"].as_i64(), due, "{v}");
    assert!(v.get("priority").is_none(), "{v}");
    let batch: Vec<Value> = (0..50)
        .map(|i| json!({"payload": "p", "key": format!("b{i}"), "delay": 0}))
        .collect();
    let (st, v) = s
        .post("/api/v1/topics/t/messages", json!({"messages": batch}))
        .await;
    assert_eq!(
        (st, v["results"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(50))
    );
    // A key with a slash travels percent-encoded; the payload comes back as text.
    let (st, v) = s.get("/api/v1/topics/t/messages/k%2F1").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (v["state"].as_str(), v["payload"].as_str()),
        (Some("pending"), Some("<script>alert(1)</script>"))
    );
    let (st, v) = s
        .post(
            "/api/v1/topics/t/messages/k%2F1/reschedule",
            json!({"delay": 1000}),
        )
        .await;
    assert_eq!(
        (st, v["moved"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{v}"
    );
    let (_, v) = s.get("/api/v1/topics/t/peek?limit=5").await;
    assert_eq!(v["messages"].as_array().map(Vec::len), Some(5));
    // By page: two pages of 5 are the first 10, and a page past the end is empty.
    let keys = |v: &Value| -> Vec<String> {
        (v["messages"].as_array().into_iter().flatten())
            .filter_map(|m| m["key"].as_str().map(String::from))
            .collect()
    };
    let (_, first) = s.get("/api/v1/topics/t/peek?limit=5").await;
    let (_, second) = s.get("/api/v1/topics/t/peek?limit=5&offset=5").await;
    let (_, ten) = s.get("/api/v1/topics/t/peek?limit=10").await;
    assert_eq!([keys(&first), keys(&second)].concat(), keys(&ten));
    assert_eq!(second["offset"].as_u64(), Some(5));
    let (_, past) = s.get("/api/v1/topics/t/peek?limit=5&offset=500").await;
    assert_eq!(keys(&past), Vec::<String>::new());
    let (st, v) = s
        .act(
            reqwest::Method::DELETE,
            "/api/v1/topics/t/messages/k%2F1",
            None,
        )
        .await;
    assert_eq!(
        (st, v["outcome"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    let (st, v) = s
        .post(
            "/api/v1/topics/t/cancel",
            json!({"keys": ["b1", "b2", "nope"]}),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let outcomes: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["cancelled", "cancelled", "absent"]);
    let (_, v) = s.get("/api/v1/topics/t/messages/k%2F1").await;
    assert_eq!(v["state"], "absent");
}

#[tokio::test]
async fn a_full_topic_refuses_new_messages_with_a_retryable_503_and_takes_merges() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let (st, v) = s
        .post(
            "/api/v1/topics",
            json!({"name": "b", "kind": "priority", "slots": 2, "max_pending": 2}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let msg = |k: &str| json!({"payload": "v", "key": k, "priority": 1});
    let (st, v) = s
        .post(
            "/api/v1/topics/b/messages",
            json!({"messages": [msg("a"), msg("b"), msg("c"), msg("a")]}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let kinds: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r["error"]["kind"].as_str() {
            Some(k) => k.to_string(),
            None => format!("merged={}", r["merged"]),
        })
        .collect();
    assert_eq!(
        kinds,
        ["merged=false", "merged=false", "Full", "merged=true"]
    );
    let (st, v) = s
        .post(
            "/api/v1/topics/b/messages",
            json!({"payload": "v", "key": "d", "priority": 1}),
        )
        .await;
    assert_eq!(
        (st, error_kind(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "Full"),
        "{v}"
    );
    let (_, v) = s.get("/api/v1/topics/b/messages/d").await;
    assert_eq!(v["state"], "absent", "a refused message wrote nothing");
    let (_, v) = s.get("/api/v1/topics/b").await;
    assert_eq!(v["definition"]["max_pending"], 2, "{v}");
}

#[tokio::test]
async fn dead_letters_are_listed_by_page_requeued_and_purged() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let topic = s
        .client
        .define_topic(
            TopicSpec::new("d", TopicKind::Priority)
                .slots(1)
                .max_attempts(1),
        )
        .await
        .unwrap();
    for i in 0..5 {
        topic
            .send(rmq::Message::new("v").key(format!("k{i}")))
            .await
            .unwrap();
    }
    for d in topic.take(5).await.unwrap() {
        d.dead("it broke").await.unwrap();
    }
    let (st, v) = s.get("/api/v1/topics/d/dead?limit=2&offset=1").await;
    assert_eq!(st, StatusCode::OK);
    let page = v["dead"].as_array().unwrap();
    assert_eq!(
        (page.len(), page[0]["error"].as_str()),
        (2, Some("it broke"))
    );
    let (st, v) = s
        .post("/api/v1/topics/d/dead/requeue", json!({"key": "k0"}))
        .await;
    assert_eq!((st, v["requeued"].as_u64()), (StatusCode::OK, Some(1)));
    let (_, v) = s.get("/api/v1/topics/d/messages/k0").await;
    assert_eq!(v["state"], "pending");
    let (st, v) = s
        .post("/api/v1/topics/d/dead/purge", json!({"all": true}))
        .await;
    assert_eq!((st, v["purged"].as_u64()), (StatusCode::OK, Some(4)));
}

#[tokio::test]
async fn bad_input_is_a_4xx_with_the_error_shape_and_changes_nothing() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    s.client
        .define_topic(TopicSpec::new("p", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    s.post(
        "/api/v1/topics/p/messages",
        json!({"payload": "v", "key": "k", "priority": 1}),
    )
    .await;
    let cases: Vec<(reqwest::Method, &str, Option<Value>, StatusCode, &str)> = vec![
        // The framework's own refusals come in the error shape too.
        (
            reqwest::Method::GET,
            "/api/v1/topics/p/peek?limit=-1",
            None,
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::GET,
            "/api/v1/no/such/route",
            None,
            StatusCode::NOT_FOUND,
            "NotFound",
        ),
        (
            reqwest::Method::PUT,
            "/api/v1/topics",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/messages",
            Some(json!({"payload": "v", "priority": 99_999_999})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/messages",
            Some(json!({"payload": "v", "delay": 5})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/messages",
            Some(json!({"pay": "v"})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/nope/messages",
            Some(json!({"payload": "v"})),
            StatusCode::NOT_FOUND,
            "UnknownTopic",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/messages/absent/reschedule",
            Some(json!({"priority": 3})),
            StatusCode::CONFLICT,
            "NotWaiting",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/messages/k/reschedule",
            Some(json!({"priority": 3, "delay": 5})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::PATCH,
            "/api/v1/topics/p",
            Some(json!({"slots": 8})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::PATCH,
            "/api/v1/topics/p",
            Some(json!({"lease_ms": 0})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics/p/dead/purge",
            Some(json!({"all": true, "key": "k"})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/topics/p",
            None,
            StatusCode::CONFLICT,
            "TopicInUse",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics",
            Some(json!({"name": "p", "kind": "fixed-time", "slots": 2})),
            StatusCode::CONFLICT,
            "TopicConflict",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics",
            Some(json!({"name": "q", "kind": "sideways"})),
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
        ),
        (
            reqwest::Method::POST,
            "/api/v1/topics",
            Some(json!({"name": "bad name", "kind": "priority"})),
            StatusCode::BAD_REQUEST,
            "InvalidName",
        ),
    ];
    for (method, path, body, status, kind) in cases {
        let (st, v) = s.act(method.clone(), path, body.clone()).await;
        assert_eq!(
            (st, error_kind(&v)),
            (status, kind),
            "{method} {path} {body:?}: {v}"
        );
    }
    // A body that is not JSON at all.
    let r = s
        .http
        .post(s.url("/api/v1/topics/p/messages"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let v: Value = r.json().await.unwrap();
    assert_eq!(error_kind(&v), "InvalidArgument");
    // Nothing changed: the one message, its priority, the definition.
    let (_, v) = s.get("/api/v1/topics/p").await;
    assert_eq!(
        (
            v["stats"]["pending"].as_u64(),
            v["definition"]["slots"].as_u64()
        ),
        (Some(1), Some(2))
    );
    let (_, v) = s.get("/api/v1/topics/p/messages/k").await;
    assert_eq!(v["priority"], 1);
}

#[tokio::test]
async fn actions_need_the_token_and_read_only_refuses_them() {
    let s = Server::start(Access::Token(TOKEN.into())).await;
    s.client
        .define_topic(TopicSpec::new("a", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    let body = json!({"payload": "v"});
    let none = s
        .http
        .post(s.url("/api/v1/topics/a/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let wrong = s
        .http
        .post(s.url("/api/v1/topics/a/messages"))
        .bearer_auth("nope")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let (_, v) = s.get("/api/v1/topics/a").await;
    assert_eq!(v["stats"]["sent"], 0, "refused actions changed nothing");

    let ro = Server::start(Access::ReadOnly).await;
    ro.client
        .define_topic(TopicSpec::new("a", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    let (st, v) = ro.post("/api/v1/topics/a/pause", json!({})).await;
    assert_eq!((st, error_kind(&v)), (StatusCode::FORBIDDEN, "ReadOnly"));
    let (st, _) = ro.get("/api/v1/topics/a").await;
    assert_eq!(st, StatusCode::OK, "reading stays open");
}

#[tokio::test]
async fn metrics_say_what_the_traffic_did() {
    let s = Server::start(Access::ReadOnly).await;
    let topic = s
        .client
        .define_topic(
            TopicSpec::new("m", TopicKind::FixedTime)
                .slots(4)
                .max_attempts(1),
        )
        .await
        .unwrap();
    let batch: Vec<rmq::Message> = (0..1000)
        .map(|i| {
            rmq::Message::new("v")
                .key(format!("k{i}"))
                .delay(Duration::ZERO)
        })
        .collect();
    topic.send_batch(&batch).await.unwrap();
    let mut taken = Vec::new();
    while taken.len() < 1000 {
        taken.extend(topic.take(1000 - taken.len()).await.unwrap());
    }
    for (i, d) in taken.into_iter().enumerate() {
        if i < 990 {
            d.ack().await.unwrap();
        } else {
            d.dead("x").await.unwrap();
        }
    }
    let r = s.http.get(s.url("/metrics")).send().await.unwrap();
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text().await.unwrap();
    for line in [
        "rmq_sent_total{topic=\"m\"} 1000",
        "rmq_delivered_total{topic=\"m\"} 1000",
        "rmq_acked_total{topic=\"m\"} 990",
        "rmq_dead_lettered_total{topic=\"m\"} 10",
        "rmq_messages{topic=\"m\",state=\"dead\"} 10",
        "rmq_messages{topic=\"m\",state=\"in-flight\"} 0",
        "rmq_topic_slots{topic=\"m\"} 4",
        "rmq_topic_rate_limit{topic=\"m\"} 0",
        "rmq_oldest_due_age_seconds{topic=\"m\"} 0.000",
        "# TYPE rmq_acked_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_live_scrape_passes_promtool() {
    let s = Server::start(Access::ReadOnly).await;
    let mut held = Vec::new();
    for (name, kind) in [
        ("p", TopicKind::Priority),
        ("f", TopicKind::FixedTime),
        ("r", TopicKind::RangeMerge),
    ] {
        let t = s
            .client
            .define_topic(
                TopicSpec::new(name, kind)
                    .slots(2)
                    .rate_limit(100, 10)
                    .max_in_flight(4)
                    .max_pending(50),
            )
            .await
            .unwrap();
        let m = rmq::Message::new("v").key("k");
        let m = match kind {
            TopicKind::Priority => m.priority(1),
            TopicKind::FixedTime => m.delay(Duration::ZERO),
            TopicKind::RangeMerge => m.range(Duration::from_millis(1)),
        };
        t.send(m).await.unwrap();
        if name == "p" {
            held = t.take(1).await.unwrap();
        }
    }
    assert_eq!(held.len(), 1);
    let text = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("rmq_topic_rate_limit{topic=\"p\"} 100\n")
            && text.contains("rmq_topic_max_in_flight{topic=\"p\"} 4\n")
            && text.contains("rmq_topic_in_flight_permits{topic=\"p\"} 1\n")
            && text.contains("rmq_topic_in_flight_permits{topic=\"f\"} 0\n")
            && text.contains("rmq_topic_max_pending{topic=\"p\"} 50\n")
            && text.contains("rmq_topic_bound_held{topic=\"p\"} 1\n"),
        "{text}"
    );
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is missing: run scripts/ensure-deps.sh");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

#[tokio::test]
async fn serial_groups_show_members_owners_and_epochs() {
    let s = Server::start(Access::ReadOnly).await;
    let topic = s
        .client
        .define_topic(TopicSpec::new("g", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    let (status, v) = s.get("/api/v1/topics/g/groups").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["groups"], json!([]));
    assert_eq!(v["consumers"], json!(0));
    let stop = rmq::CancellationToken::new();
    let run = {
        let (topic, stop) = (topic.clone(), stop.clone());
        tokio::spawn(async move {
            topic
                .consumer()
                .serial("workers")
                .run(stop, |_| async { rmq::Outcome::Ack })
                .await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let v = loop {
        let (_, v) = s.get("/api/v1/topics/g/groups").await;
        let owned = v["leases"]
            .as_array()
            .is_some_and(|l| l.iter().all(|l| l["owner"].is_string()));
        if owned && v["consumers"] == json!(1) {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "never owned: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let g = &v["groups"][0];
    assert_eq!(g["name"], json!("workers"));
    let member = &g["members"][0];
    assert_eq!(member["alive"], json!(true));
    assert_eq!(member["slots"], json!([0, 1, 2, 3]));
    assert_eq!(member["slots_owned"], json!(4));
    assert_eq!(v["unowned_slots"], json!(0));
    for l in v["leases"].as_array().unwrap() {
        assert_eq!(l["owner"], member["id"]);
        assert!(l["epoch"].as_u64().unwrap() >= 1, "{l}");
    }
    let text = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "rmq_consumers{topic=\"g\"} 1",
        "rmq_serial_members{topic=\"g\",group=\"workers\"} 1",
        "rmq_serial_owners{topic=\"g\",group=\"workers\"} 1",
        "rmq_serial_unowned_slots{topic=\"g\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    stop.cancel();
    run.await.unwrap().unwrap();
    let (status, _) = s.get("/api/v1/topics/nope/groups").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_dashboard_routes_answer_from_the_samples_and_the_slots() {
    let s = Server::start(Access::ReadOnly).await;
    let topic = s
        .client
        .define_topic(TopicSpec::new("d", TopicKind::FixedTime).slots(4))
        .await
        .unwrap();
    for k in ["a", "b", "c"] {
        topic
            .send(rmq::Message::new("v").key(k).delay(Duration::ZERO))
            .await
            .unwrap();
    }
    // The sampler reads every topic on its own.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, v) = s.get("/api/v1/overview").await;
        let d = v["topics"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == json!("d")).cloned());
        if let Some(d) = d.filter(|d| d["last"]["due_now"] == json!(3)) {
            assert_eq!(
                (d["kind"].clone(), d["slots"].clone()),
                (json!("fixed-time"), json!(4))
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never sampled: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, h) = s.get("/api/v1/topics/d/history").await;
    assert_eq!(status, StatusCode::OK);
    let points = h["points"].as_array().unwrap();
    assert!(!points.is_empty());
    let times: Vec<i64> = points
        .iter()
        .map(|p| p["at_ms"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(points.last().unwrap()["sent"], json!(3));

    let (status, v) = s.get("/api/v1/topics/d/slots").await;
    assert_eq!(status, StatusCode::OK);
    let due: Vec<u64> = serde_json::from_value(v["due_now"].clone()).unwrap();
    assert_eq!((due.len(), due.iter().sum::<u64>()), (4, 3));
    assert_eq!(v["owner"], json!([-1, -1, -1, -1]));

    let (_, v) = s.get("/api/v1/server").await;
    assert_eq!(
        (v["access"].clone(), v["actions"].clone()),
        (json!("read-only"), json!(false))
    );
    for (path, status, kind) in [
        (
            "/api/v1/topics/nope/history",
            StatusCode::NOT_FOUND,
            "UnknownTopic",
        ),
        (
            "/api/v1/topics/nope/slots",
            StatusCode::NOT_FOUND,
            "UnknownTopic",
        ),
        (
            "/api/v1/topics/a%20b/history",
            StatusCode::BAD_REQUEST,
            "InvalidName",
        ),
    ] {
        let (st, v) = s.get(path).await;
        assert_eq!((st, error_kind(&v)), (status, kind), "{path}: {v}");
    }
    // The page itself, with the policy that keeps injected script inert.
    let r = s.http.get(s.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(r.text().await.unwrap().contains("/assets/app.js"));
}

/// A client connected as a user holding only the ACL of its prefix (in
/// locked-down mode: FCALL only, the library loaded by an admin).
async fn least_privilege(redis: &RedisServer, functions: bool) -> Client {
    let admin = redis::Client::open(redis.url()).unwrap();
    let mut conn = admin.get_multiplexed_async_connection().await.unwrap();
    let line = match functions {
        true => rmq::acl::setuser_line_locked_down("rmq", "api").unwrap(),
        false => rmq::acl::setuser_line("rmq", "api").unwrap(),
    };
    let mut cmd = redis::cmd("ACL");
    for w in line.split_whitespace().skip(1).chain(["on", ">api-pw"]) {
        cmd.arg(w);
    }
    let _: () = cmd.query_async(&mut conn).await.unwrap();
    if functions {
        Client::connect(&redis.url())
            .await
            .unwrap()
            .load_functions()
            .await
            .unwrap();
    }
    let url = format!("redis://api:api-pw@127.0.0.1:{}", redis.port());
    Client::connect_with(&url, rmq::ClientOptions::default().functions(functions))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_server_needs_only_the_least_privilege_acl_of_its_prefix() {
    for functions in [false, true] {
        let redis = RedisServer::start();
        let client = least_privilege(&redis, functions).await;
        let s = Server::serving(client, Access::Token(TOKEN.into()))
            .await
            .keeping(redis);
        let (st, v) = s
            .post(
                "/api/v1/topics",
                json!({"name": "q", "kind": "priority", "slots": 2}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        let (st, v) = s
            .post(
                "/api/v1/topics/q/messages",
                json!({"payload": "v", "key": "k", "priority": 1}),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        for path in [
            "/api/v1/topics",
            "/api/v1/topics/q/stats?slots=true",
            "/api/v1/topics/q/peek",
            "/api/v1/topics/q/messages/k",
            "/api/v1/topics/q/dead",
            "/api/v1/topics/q/groups",
            "/api/v1/topics/q/slots",
            "/api/v1/topics/q/history",
            "/api/v1/overview",
        ] {
            let (st, v) = s.get(path).await;
            assert_eq!(st, StatusCode::OK, "functions={functions} {path}: {v}");
        }
        let r = s.http.get(s.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
        // Consuming over HTTP too (the receipt key is made and read by a
        // script, with the same rights).
        let (st, v) = s.post("/api/v1/topics/q/take", json!({"max": 1})).await;
        assert_eq!(st, StatusCode::OK, "functions={functions}: {v}");
        let receipt = v["deliveries"][0]["receipt"].clone();
        let (st, v) = s
            .post("/api/v1/topics/q/ack", json!({"receipts": [receipt]}))
            .await;
        assert_eq!(st, StatusCode::OK, "functions={functions}: {v}");
        assert_eq!(v["results"][0]["outcome"], "acked");
        for (path, body) in [
            ("/api/v1/topics/q/pause", json!({})),
            ("/api/v1/topics/q/resume", json!({})),
            ("/api/v1/topics/q/cancel", json!({"keys": ["k"]})),
            ("/api/v1/topics/q/dead/purge", json!({"all": true})),
        ] {
            let (st, v) = s.post(path, body).await;
            assert_eq!(st, StatusCode::OK, "functions={functions} {path}: {v}");
        }
        // The sampler reads the topic with the same rights.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, v) = s.get("/api/v1/overview").await;
            assert_eq!(v["error"], Value::Null, "{v}");
            if v["topics"][0]["name"] == json!("q") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never sampled: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn pages_of_other_sites_can_neither_act_nor_read_by_rebinding() {
    let s = Server::start(Access::Unauthenticated).await;
    s.client
        .define_topic(TopicSpec::new("o", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    // A form posted from another site: refused before anything happens.
    let r = s
        .http
        .post(s.url("/api/v1/topics/o/pause"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let v: Value = r.json().await.unwrap();
    assert_eq!(error_kind(&v), "CrossOrigin");
    let t = s.client.topic("o").await.unwrap();
    assert_eq!(t.stats().await.unwrap().total.paused_slots, 0);
    // The server's own page may act.
    let own = s.base.trim_end_matches('/').to_string();
    let r = s
        .http
        .post(s.url("/api/v1/topics/o/pause"))
        .header("origin", own)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // A name that now resolves here (DNS rebinding): neither the page nor
    // the API answers it; the metrics do.
    for path in ["/", "/api/v1/topics"] {
        let r = s
            .http
            .get(s.url(path))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(error_kind(&v), "HostNotAllowed");
    }
    let r = s
        .http
        .get(s.url("/metrics"))
        .header("host", "prometheus-target.internal")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_key_and_payload_that_are_not_utf8_round_trip_as_base64_on_every_route() {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let s = Server::start(Access::Token(TOKEN.into())).await;
    let t = s
        .client
        .define_topic(TopicSpec::new("bin", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    let (key, payload) = (vec![0xff, b'k', 0], vec![0xfe, 1]);
    t.send(
        rmq::Message::new(payload.clone())
            .key(key.clone())
            .priority(1),
    )
    .await
    .unwrap();
    let q = format!(
        "key_base64={}",
        b64(&key).replace('+', "%2B").replace('/', "%2F")
    );
    let (_, peek) = s.get("/api/v1/topics/bin/peek").await;
    let m = &peek["messages"][0];
    assert_eq!(
        (m["key_base64"].as_str(), m["key"].as_str()),
        (Some(&*b64(&key)), None),
        "{m}"
    );
    assert_eq!(m["payload_base64"].as_str(), Some(&*b64(&payload)), "{m}");
    let (st, l) = s.get(&format!("/api/v1/topics/bin/key?{q}")).await;
    assert_eq!(st, StatusCode::OK, "{l}");
    assert_eq!(
        (l["state"].as_str(), l["key_base64"].as_str()),
        (Some("pending"), Some(&*b64(&key)))
    );
    let (st, r) = s
        .post(
            &format!("/api/v1/topics/bin/key/reschedule?{q}"),
            json!({"priority": 9}),
        )
        .await;
    assert_eq!(
        (st, r["key_base64"].as_str()),
        (StatusCode::OK, Some(&*b64(&key))),
        "{r}"
    );
    let d = t.take(1).await.unwrap().pop().unwrap();
    d.dead("bad").await.unwrap();
    let (_, dead) = s.get("/api/v1/topics/bin/dead").await;
    assert_eq!(
        dead["dead"][0]["key_base64"].as_str(),
        Some(&*b64(&key)),
        "{dead}"
    );
    let (st, v) = s
        .post(
            "/api/v1/topics/bin/dead/requeue",
            json!({"key_base64": b64(&key)}),
        )
        .await;
    assert_eq!(
        (st, v["requeued"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let (st, v) = s
        .act(
            reqwest::Method::DELETE,
            &format!("/api/v1/topics/bin/key?{q}"),
            None,
        )
        .await;
    assert_eq!(
        (st, v["cancelled"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{v}"
    );
    // A key given twice, or base64 that is not: 400, nothing changed.
    for path in [
        format!("/api/v1/topics/bin/key?key=k&{q}"),
        "/api/v1/topics/bin/key?key_base64=%21%21".to_string(),
        "/api/v1/topics/bin/key".to_string(),
    ] {
        let (st, v) = s.get(&path).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{path}: {v}");
    }
    let (st, v) = s
        .post(
            "/api/v1/topics/bin/dead/purge",
            json!({"key": "k", "key_base64": "aw=="}),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
}
