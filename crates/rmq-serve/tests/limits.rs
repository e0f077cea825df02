//! `rmq serve` under a hostile or unlucky network (issue 39), against a
//! real redis-server: silent, trickling and idle connections are closed
//! after their timeouts; beyond the connection cap the API and `/metrics`
//! still answer; a stop returns within its bound while a client holds a
//! half-sent request. Deadlines are generous (a 1 s timeout must act
//! within 10 s) so that a loaded machine passes.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use rmq::{Client, TopicKind, TopicSpec};
use rmq_serve::{Access, Limits, Options};
use rmq_test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a 1 s timeout may take to act on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(10);

struct Server {
    _redis: RedisServer,
    redis_url: String,
    addr: SocketAddr,
    client: Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(limits: Limits, options: Options) -> Server {
        let redis = RedisServer::start();
        let client = Client::connect(&redis.url()).await.unwrap();
        let router = rmq_serve::router(client.clone(), options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let done = tokio::spawn(rmq_serve::serve_with(listener, router, shutdown, limits));
        Server {
            redis_url: redis.url(),
            _redis: redis,
            addr,
            client,
            stop: Some(stop),
            done,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn options() -> Options {
    Options {
        access: Access::Unauthenticated,
        scrape_cache: Duration::from_millis(0),
        sample_every: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn limits() -> Limits {
    Limits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        max_connections: 20,
        shutdown_grace: Duration::from_secs(1),
    }
}

/// Waits until the server closes `c` (end of stream or a reset); how long
/// that took, or `None` if it stayed open past `DEADLINE`.
async fn closed_within(c: &mut TcpStream) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    let read_to_end = async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(DEADLINE, read_to_end)
        .await
        .ok()
        .map(|()| t0.elapsed())
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_timeout() {
    let s = Server::start(limits(), options()).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let took = closed_within(&mut c).await;
    assert!(
        took.is_some(),
        "a connection that sent nothing was still open after {DEADLINE:?}"
    );
}

#[tokio::test]
async fn a_trickling_request_is_closed_after_the_header_timeout() {
    let s = Server::start(limits(), options()).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // One header byte every 100 ms, never the blank line that ends them.
    let t0 = Instant::now();
    let mut closed = false;
    while t0.elapsed() < DEADLINE {
        if c.write_all(b"X").await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(100), c.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    assert!(
        closed,
        "a request trickling its headers was still open after {DEADLINE:?}"
    );
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    // Headers may take long here: only the idle timeout can close it.
    let s = Server::start(
        Limits {
            header_read_timeout: Duration::from_secs(60),
            ..limits()
        },
        options(),
    )
    .await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(b"GET /api/v1/server HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let n = tokio::time::timeout(DEADLINE, c.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let took = closed_within(&mut c).await;
    assert!(
        took.is_some(),
        "an idle kept-alive connection was still open after {DEADLINE:?}"
    );
}

#[tokio::test]
async fn beyond_the_connection_cap_metrics_and_the_api_still_answer() {
    // Long timeouts: only the cap can close the idle connections.
    let cap = 20;
    let s = Server::start(
        Limits {
            header_read_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_connections: cap,
            shutdown_grace: Duration::from_secs(1),
        },
        options(),
    )
    .await;
    s.client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    // Twice the cap's worth of connections that send nothing.
    let closed = Arc::new(AtomicUsize::new(0));
    let mut held = Vec::new();
    for _ in 0..2 * cap {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let closed = closed.clone();
        held.push(tokio::spawn(async move {
            let mut buf = [0u8; 64];
            while let Ok(n) = c.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            closed.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let t0 = Instant::now();
    while closed.load(Ordering::SeqCst) < cap && t0.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open = 2 * cap - closed.load(Ordering::SeqCst);
    assert!(
        open <= cap,
        "{open} idle connections held open with a cap of {cap}"
    );
    // Well-behaved clients are still served, over new connections and
    // kept-alive ones, while the idle ones keep the server at its cap.
    let http = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    for _ in 0..3 {
        for path in ["/metrics", "/api/v1/topics"] {
            let r = http.get(s.url(path)).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            r.bytes().await.unwrap();
        }
    }
    for h in held {
        h.abort();
    }
}

/// Stops the server while `hold` keeps a half-sent request open; the
/// stop must return within the grace period (plus the deadline's slack).
async fn stop_while_holding(hold: &[u8]) {
    let mut s = Server::start(
        Limits {
            header_read_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_connections: 20,
            shutdown_grace: Duration::from_secs(1),
        },
        options(),
    )
    .await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    c.write_all(hold).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    let _ = s.stop.take().unwrap().send(());
    let done = tokio::time::timeout(DEADLINE, &mut s.done).await;
    assert!(
        done.is_ok(),
        "the server had not stopped {DEADLINE:?} after the stop while a client held {:?}",
        String::from_utf8_lossy(hold)
    );
    done.unwrap().unwrap().unwrap();
    assert!(t0.elapsed() < DEADLINE);
    drop(c);
}

#[tokio::test]
async fn a_stop_returns_within_its_bound_while_a_client_holds_half_a_body() {
    stop_while_holding(
        b"POST /api/v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"na",
    )
    .await;
}

#[tokio::test]
async fn a_stop_returns_within_its_bound_while_a_client_holds_half_the_headers() {
    stop_while_holding(b"GET /api/v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ").await;
}

/// Script calls on the server so far (`INFO commandstats`).
async fn script_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            [
                "cmdstat_evalsha:",
                "cmdstat_eval:",
                "cmdstat_fcall:",
                "cmdstat_fcall_ro:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn concurrent_scrapes_after_expiry_share_one_reading() {
    let s = Server::start(
        Limits::default(),
        Options {
            scrape_cache: Duration::from_millis(300),
            ..options()
        },
    )
    .await;
    for i in 0..4 {
        s.client
            .define_topic(TopicSpec::new(format!("t{i}"), TopicKind::FixedTime).slots(512))
            .await
            .unwrap();
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let scrape = || async {
        let r = http.get(s.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    };
    // Let the sampler's first round finish, then measure one reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = script_calls(&s.redis_url).await;
    scrape().await;
    let one = script_calls(&s.redis_url).await - before;
    assert!(one > 0);
    tokio::time::sleep(Duration::from_millis(400)).await; // the cache expires
    let before = script_calls(&s.redis_url).await;
    let texts = futures::future::join_all((0..16).map(|_| scrape())).await;
    let sixteen = script_calls(&s.redis_url).await - before;
    assert!(texts.iter().all(|t| t.contains("rmq_topic_slots")));
    assert!(
        sixteen <= 2 * one,
        "16 concurrent scrapes after expiry made {sixteen} script calls; one reading makes {one}"
    );
}

/// The process's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn a_batch_past_the_cap_is_refused_while_it_is_read_and_an_oversized_body_is_413() {
    let s = Server::start(Limits::default(), options()).await;
    s.client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let post = |path: &'static str, body: Vec<u8>| {
        let req = http
            .post(s.url(path))
            .header("content-type", "application/json")
            .body(body);
        async move {
            let r = req.send().await.unwrap();
            let status = r.status();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            (status, v)
        }
    };
    // 1.1 million tiny messages just under the 16 MiB body limit.
    let n = 1_100_000;
    let mut body = b"{\"messages\":[".to_vec();
    for i in 0..n {
        body.extend_from_slice(if i + 1 < n {
            b"{\"payload\":\"\"},"
        } else {
            b"{\"payload\":\"\"}]}"
        });
    }
    assert!(body.len() < 16 * 1024 * 1024);
    let before = peak_rss();
    let (st, v) = post("/api/v1/topics/t/messages", body).await;
    let grew = peak_rss().saturating_sub(before);
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 10000 entries"),
        "{v}"
    );
    assert!(
        grew < 200 << 20,
        "refusing the batch took {} MB more memory",
        grew >> 20
    );
    let mut keys = b"{\"keys\":[".to_vec();
    for i in 0..10_001 {
        keys.extend_from_slice(if i < 10_000 { b"\"k\"," } else { b"\"k\"]}" });
    }
    let (st, v) = post("/api/v1/topics/t/cancel", keys).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 10000 entries"),
        "{v}"
    );
    // Over the body limit: 413, in the error shape.
    let (st, v) = post("/api/v1/topics/t/messages", vec![b' '; 17 << 20]).await;
    assert_eq!(
        (st, v["error"]["kind"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("PayloadTooLarge")),
        "{v}"
    );
    // Nothing was sent or cancelled.
    let stats = s.client.topic("t").await.unwrap().stats().await.unwrap();
    assert_eq!(stats.total.pending, 0);
}

#[tokio::test]
async fn the_keys_dot_and_dot_dot_can_be_looked_up_and_cancelled() {
    let s = Server::start(Limits::default(), options()).await;
    s.client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    for key in [".", ".."] {
        let r = http
            .post(s.url("/api/v1/topics/t/messages"))
            .json(&serde_json::json!({"payload": "p", "key": key, "priority": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let q = [("key", key)];
        let r = http
            .get(s.url("/api/v1/topics/t/key"))
            .query(&q)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "lookup {key:?}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            (v["key"].as_str(), v["state"].as_str()),
            (Some(key), Some("pending")),
            "{v}"
        );
        let r = http
            .post(s.url("/api/v1/topics/t/key/reschedule"))
            .query(&q)
            .json(&serde_json::json!({"priority": 5}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "reschedule {key:?}");
        let r = http
            .delete(s.url("/api/v1/topics/t/key"))
            .query(&q)
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            v["outcome"].as_str(),
            Some("cancelled"),
            "cancel {key:?}: {v}"
        );
    }
}

#[tokio::test]
async fn an_unknown_api_route_is_named_with_its_prefix() {
    let s = Server::start(Limits::default(), options()).await;
    let r = reqwest::get(s.url("/api/v1/no/such/route")).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"].as_str(),
        Some("no API route /api/v1/no/such/route"),
        "{v}"
    );
}

#[tokio::test]
async fn concurrent_expensive_reads_of_a_many_slot_topic_share_one_reading() {
    // No reuse of a reading across requests: what is measured is the
    // single flight of concurrent ones.
    let options = Options {
        large_topic_reuse: Duration::ZERO,
        ..options()
    };
    let s = Server::start(Limits::default(), options).await;
    s.client
        .define_topic(TopicSpec::new("wide", TopicKind::Priority).slots(4096))
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let get = |path: &'static str| {
        let req = http.get(s.url(path));
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            r.bytes().await.unwrap().len()
        }
    };
    // Let the sampler's first round finish, then measure one reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for path in ["/api/v1/topics/wide/slots", "/api/v1/topics"] {
        let before = script_calls(&s.redis_url).await;
        let size = get(path).await;
        let one = script_calls(&s.redis_url).await - before;
        assert!(one > 0);
        let before = script_calls(&s.redis_url).await;
        let sizes = futures::future::join_all((0..16).map(|_| get(path))).await;
        let sixteen = script_calls(&s.redis_url).await - before;
        assert!(
            sizes.iter().all(|&n| n == size),
            "{path}: {sizes:?} vs {size}"
        );
        assert!(
            sixteen <= 2 * one,
            "16 concurrent {path} made {sixteen} script calls; one reading makes {one}"
        );
    }
}

/// A topic of more than 1,024 slots is read once for all of the server's
/// readers within `large_topic_reuse`: its slots, its stats, the topic
/// list, the topic and `/metrics` share one reading (each made its own).
/// An action on the topic (pause) is shown at once all the same.
#[tokio::test]
async fn a_large_topic_is_read_once_for_all_its_readers() {
    const SLOTS: u32 = 4_096;
    let s = Server::start(
        Limits::default(),
        Options {
            large_topic_reuse: Duration::from_secs(600),
            ..options()
        },
    )
    .await;
    s.client
        .define_topic(TopicSpec::new("wide", TopicKind::Priority).slots(SLOTS))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(500)).await; // the sampler's first round
    let before = script_calls(&s.redis_url).await;
    s.client.topic("wide").await.unwrap().stats().await.unwrap();
    let one = script_calls(&s.redis_url).await - before;
    let before = script_calls(&s.redis_url).await;
    for path in [
        "/api/v1/topics/wide/slots",
        "/api/v1/topics/wide/stats?slots=true",
        "/api/v1/topics",
        "/api/v1/topics/wide",
        "/metrics",
    ] {
        let r = http.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let calls = script_calls(&s.redis_url).await - before;
    assert!(
        calls < 2 * one,
        "five readers made {calls} script calls; one reading of the topic makes {one}"
    );
    let r = http
        .post(s.url("/api/v1/topics/wide/pause"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: serde_json::Value = http
        .get(s.url("/api/v1/topics/wide"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["paused"], true, "{v}");
}

/// `/stats?slots=true` answers a page of slots (at most 4,096; a
/// 65,536-slot topic whole was one 14 MB body) and says where the next
/// page begins.
#[tokio::test]
async fn per_slot_stats_come_by_the_page() {
    // Each page read anew: the send below shows at once.
    let options = Options {
        large_topic_reuse: Duration::ZERO,
        ..options()
    };
    let s = Server::start(Limits::default(), options).await;
    s.client
        .define_topic(TopicSpec::new("wide", TopicKind::Priority).slots(8_192))
        .await
        .unwrap();
    s.client
        .topic("wide")
        .await
        .unwrap()
        .send(rmq::Message::new("p").key("k").priority(1))
        .await
        .unwrap();
    let slot = rmq::slot_of(b"k", 8_192) as usize;
    let http = reqwest::Client::new();
    let page = |q: &str| {
        let req = http.get(s.url(&format!("/api/v1/topics/wide/stats?slots=true{q}")));
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let first = page("").await;
    assert_eq!(first["slots"].as_array().map(Vec::len), Some(4_096));
    assert_eq!(first["slot_offset"], 0);
    assert_eq!(first["next_slot_offset"], 4_096);
    assert_eq!(first["total"]["pending"], 1);
    let second = page("&slot_offset=4096").await;
    assert_eq!(second["slots"].as_array().map(Vec::len), Some(4_096));
    assert!(second.get("next_slot_offset").is_none(), "{second}");
    let one = page(&format!("&slot_offset={slot}&slot_limit=1")).await;
    assert_eq!(one["slots"][0]["pending"], 1, "{one}");
    assert_eq!(one["next_slot_offset"], slot + 1);
    let past = page("&slot_offset=99999").await;
    assert_eq!(past["slots"].as_array().map(Vec::len), Some(0));
    // The serial groups' leases come by the same pages.
    let groups = |q: &str| {
        let req = http.get(s.url(&format!("/api/v1/topics/wide/groups{q}")));
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let first = groups("").await;
    assert_eq!(first["leases"].as_array().map(Vec::len), Some(4_096));
    assert_eq!(first["next_slot_offset"], 4_096);
    assert_eq!(first["unowned_slots"], 8_192, "counted over every slot");
    let last = groups("?slot_offset=8000&slot_limit=500").await;
    assert_eq!(last["leases"].as_array().map(Vec::len), Some(192));
    assert!(last.get("next_slot_offset").is_none(), "{last}");
    let totals: serde_json::Value = http
        .get(s.url("/api/v1/topics/wide/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(totals.get("slots").is_none(), "{totals}");
}

#[tokio::test]
async fn expensive_reads_beyond_the_cap_are_answered_429_with_retry_after() {
    let s = Server::start(
        Limits::default(),
        Options {
            max_expensive_reads: 1,
            ..options()
        },
    )
    .await;
    for name in ["a", "b"] {
        s.client
            .define_topic(TopicSpec::new(name, TopicKind::Priority).slots(64))
            .await
            .unwrap();
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // Redis holds every command for 3 s: the reading of `a` stays under way.
    let redis = redis::Client::open(s.redis_url.as_str()).unwrap();
    let mut c = redis.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .query_async(&mut c)
        .await
        .unwrap();
    let first = tokio::spawn(http.get(s.url("/api/v1/topics/a/stats")).send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The same reading is joined, not refused.
    let joined = tokio::spawn(http.get(s.url("/api/v1/topics/a/stats")).send());
    let r = http
        .get(s.url("/api/v1/topics/b/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["kind"].as_str(), Some("TooBusy"), "{v}");
    let (first, joined) = (
        first.await.unwrap().unwrap(),
        joined.await.unwrap().unwrap(),
    );
    assert_eq!(
        (first.status(), joined.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    // Once the reading is done, the next one runs.
    let r = http
        .get(s.url("/api/v1/topics/b/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// Issue 39's measurement: peak memory of the process while 32 clients
/// read one 65,536-slot topic at once; it prints the figures
/// (`cargo test -p rmq-serve --test limits -- --nocapture rss`) and the
/// server must stay under a few hundred MB (before single flight and the
/// cap: 1.4 GB for `/api/v1/topics`).
#[tokio::test]
async fn rss_under_32_concurrent_reads_of_a_65536_slot_topic() {
    let s = Server::start(Limits::default(), options()).await;
    s.client
        .define_topic(TopicSpec::new("huge", TopicKind::Priority).slots(65_536))
        .await
        .unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await; // the sampler's first round
    for path in [
        "/api/v1/topics",
        "/api/v1/topics/huge/slots",
        "/api/v1/topics/huge/stats?slots=true",
        "/api/v1/topics/huge/groups",
    ] {
        let before = peak_rss();
        let t0 = Instant::now();
        // The clients count the body's bytes and keep none (they share the
        // process whose peak is measured).
        let answers = futures::future::join_all((0..32).map(|_| async {
            let mut r = http.get(s.url(path)).send().await.unwrap();
            let (st, mut size) = (r.status(), 0);
            while let Some(chunk) = r.chunk().await.unwrap() {
                size += chunk.len();
            }
            (st, size)
        }))
        .await;
        let statuses: Vec<StatusCode> = answers.iter().map(|(s, _)| *s).collect();
        let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        println!(
            "{path}: 32 concurrent reads of {} kB in {:.1} s, {ok} answered 200, peak RSS {} MB (grew {} MB)",
            answers[0].1 >> 10,
            t0.elapsed().as_secs_f64(),
            peak_rss() >> 20,
            peak_rss().saturating_sub(before) >> 20
        );
        assert_eq!(ok, 32, "{path}: every read answered: {statuses:?}");
        assert!(
            peak_rss() < 400 << 20,
            "{path}: peak RSS {} MB",
            peak_rss() >> 20
        );
    }
}
