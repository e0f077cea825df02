//! The dashboard in a real browser: Debian's headless Chromium driven by
//! `e2e/dashboard.mjs` (playwright-core, no browser download), against a
//! real redis-server and this server. It finds a topic's depth, looks a key
//! up and cancels it, requeues a dead letter by clicking and sees it
//! pending again, pauses a topic, shows an XSS payload as inert text, and
//! in read-only mode shows no action button at all. Screenshots are kept
//! under `target/tmp/dashboard/` as the run's artifacts.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use rmq::{Client, Message, TopicKind, TopicSpec};
use rmq_serve::{Access, Options};
use rmq_test_support::RedisServer;

const TOKEN: &str = "dashboard-test-token";

/// Serves `client` on a free loopback port; the base URL.
async fn serve(client: &Client, access: Access, sample_every: Duration) -> String {
    let options = Options {
        access,
        scrape_cache: Duration::from_millis(0),
        sample_every,
        allowed_hosts: Vec::new(),
        ..Options::default()
    };
    let router = rmq_serve::router(client.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(rmq_serve::serve(listener, router, std::future::pending()));
    base
}

fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")
}

/// Runs the browser script in `mode`; panics with what it printed unless
/// it passed. Returns its standard output.
async fn browse(mode: &str, base: &str, last: &str) -> String {
    let e2e = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e");
    assert!(
        e2e.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run scripts/ensure-deps.sh"
    );
    let args = [
        e2e.join("dashboard.mjs").display().to_string(),
        mode.to_string(),
        base.to_string(),
        artifacts().join(mode).display().to_string(),
        last.to_string(),
    ];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .args(&args)
            .output()
            .expect("node is missing: run scripts/ensure-deps.sh")
    })
    .await
    .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the browser run {mode} failed:\n{said}"
    );
    said
}

/// A topic `orders` (at most 50 in flight, bounded at 1,000) with 12
/// messages due now (one of them an XSS attempt),
/// a dead letter `broken-1`, and a topic `payments` served by a serial
/// group `workers`.
async fn fill(client: &Client) -> rmq::CancellationToken {
    let orders = client
        .define_topic(
            TopicSpec::new("orders", TopicKind::FixedTime)
                .slots(8)
                .max_in_flight(50)
                .max_pending(1_000),
        )
        .await
        .unwrap();
    let mut batch: Vec<Message> = (0..11)
        .map(|i| {
            Message::new(format!("{{\"order\":{i}}}"))
                .key(format!("order-{i}"))
                .delay(Duration::ZERO)
        })
        .collect();
    batch.push(
        Message::new("<script>window.__xss=1</script>")
            .key("<img src=x onerror=window.__xss=2>")
            .delay(Duration::ZERO),
    );
    batch.push(
        Message::new("{\"order\":\"broken\"}")
            .key("broken-1")
            .delay(Duration::ZERO),
    );
    orders.send_batch(&batch).await.unwrap();
    // broken-1 dies: take until it comes, give the others back.
    let mut dead = false;
    while !dead {
        for d in orders.take(13).await.unwrap() {
            if d.key == b"broken-1" {
                d.dead("card declined").await.unwrap();
                dead = true;
            } else {
                d.release().await.unwrap();
            }
        }
    }
    // The keys `.` and `..`: a browser resolves them as dot segments in a
    // path, so the page must name them otherwise.
    let dots = client
        .define_topic(TopicSpec::new("dots", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    for key in [".", ".."] {
        dots.send(Message::new("dot").key(key).priority(1))
            .await
            .unwrap();
    }
    // A key and payload that are not UTF-8 (shown and named as base64:
    // "//5i"), dead: the page requeues it.
    dots.send(
        Message::new(vec![0xff, 0])
            .key(vec![0xff, 0xfe, b'b'])
            .priority(0),
    )
    .await
    .unwrap();
    loop {
        let got = dots.take(3).await.unwrap();
        let mut found = false;
        for d in got {
            if d.key == [0xff, 0xfe, b'b'] {
                d.dead("not text").await.unwrap();
                found = true;
            } else {
                d.release().await.unwrap();
            }
        }
        if found {
            break;
        }
    }
    let payments = client
        .define_topic(TopicSpec::new("payments", TopicKind::Priority).slots(4))
        .await
        .unwrap();
    let stop = rmq::CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        payments
            .consumer()
            .serial("workers")
            .run(s, |_| async { rmq::Outcome::Ack })
            .await
    });
    stop
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_finds_looks_up_cancels_requeues_and_pauses_in_the_browser() {
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await.unwrap();
    let stop = fill(&client).await;
    let base = serve(
        &client,
        Access::Token(TOKEN.into()),
        Duration::from_millis(300),
    )
    .await;
    browse("actions", &base, TOKEN).await;
    // What the clicks did, read back from Redis.
    let orders = client.topic("orders").await.unwrap();
    assert_eq!(
        orders.get(b"order-7").await.unwrap().state,
        rmq::State::Absent
    );
    assert_eq!(
        orders.get(b"broken-1").await.unwrap().state,
        rmq::State::Pending
    );
    let t = orders.stats().await.unwrap().total;
    assert_eq!((t.cancelled, t.dead, t.paused_slots), (1, 0, 8));
    let dots = client.topic("dots").await.unwrap();
    assert_eq!(
        dots.get(&[0xff, 0xfe, b'b']).await.unwrap().state,
        rmq::State::Pending,
        "the binary key's dead letter was requeued from the page"
    );

    // The same data through a read-only server: nothing to click.
    let ro = serve(&client, Access::ReadOnly, Duration::from_millis(300)).await;
    orders.resume().await.unwrap();
    let mut dead = false;
    while !dead {
        for d in orders.take(20).await.unwrap() {
            if d.key == b"broken-1" {
                d.dead("card declined").await.unwrap();
                dead = true;
            } else {
                d.release().await.unwrap();
            }
        }
    }
    browse("read-only", &ro, "").await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_of_a_thousand_topics_loads_and_filters() {
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await.unwrap();
    for i in 0..1000 {
        client
            .define_topic(TopicSpec::new(format!("load-{i:04}"), TopicKind::Priority).slots(16))
            .await
            .unwrap();
    }
    let base = serve(&client, Access::ReadOnly, Duration::from_secs(2)).await;
    // The first sample of every topic.
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let v: serde_json::Value = http
            .get(format!("{base}api/v1/overview"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["topics"].as_array().map_or(0, Vec::len) == 1000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never sampled: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let said = browse("load", &base, "1000").await;
    eprintln!("{}", said.trim());
}
