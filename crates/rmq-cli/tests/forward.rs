//! `rmq forward` as a process: SIGKILLed mid-batch and started again, it
//! loses nothing; JetStream still holds each message once (the ids of the
//! killed forwarder's unacked publishes repeat and are dropped), RabbitMQ
//! receives duplicates only of what was in flight at the kill, each with
//! the same `message_id`. A target that does not exist or does not answer
//! is refused at start with one line and exit code 2 or 1.
#![allow(clippy::unwrap_used)]
mod support;

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use rmq_test_support::{NatsServer, RabbitServer};
use serde_json::Value;
use support::*;

const MESSAGES: usize = 5000;
const CONCURRENCY: &str = "64";

fn setup() -> Env {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "due",
        "--kind",
        "fixed-time",
        "--slots",
        "16",
        "--lease",
        "2000",
    ]);
    env
}

/// Messages due over the next five seconds, so that a kill lands mid-stream.
fn send_all(env: &Env) {
    let lines: String = (0..MESSAGES)
        .map(|i| format!("{{\"payload\":\"m{i}\",\"delay\":{}}}\n", i + 500))
        .collect();
    env.rmq_in(&["send", "due", "--batch"], lines.as_bytes())
        .success();
}

fn forwarder(env: &Env, to: &str) -> Child {
    env.cmd(&[
        "--json",
        "forward",
        "due",
        "--to",
        to,
        "--concurrency",
        CONCURRENCY,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// Acks recorded so far (judging progress by rmq rather than by reading
/// the broker, which would slow a loaded machine).
fn acked(env: &Env) -> u64 {
    env.stats("due")["acked"].as_u64().unwrap_or(0)
}

fn drained(env: &Env) -> bool {
    let st = env.stats("due");
    st["pending"] == 0 && st["in_flight"] == 0 && st["retry_waiting"] == 0
}

/// SIGTERM, then its summary line.
fn stop(mut child: Child) -> Value {
    kill("-TERM", &child.id().to_string());
    let status =
        wait_limited(&mut child, Duration::from_secs(20)).expect("forward stops on SIGTERM");
    assert!(status.success(), "{status:?}");
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Sends the messages, SIGKILLs a first forwarder once 1,000 were acked,
/// lets a second one finish, and returns its summary.
fn killed_mid_stream_then_finished(env: &Env, to: &str) -> Value {
    send_all(env);
    let mut first = forwarder(env, to);
    assert!(eventually(Duration::from_secs(30), || acked(env) >= 1000));
    kill("-KILL", &first.id().to_string());
    first.wait().unwrap();
    let second = forwarder(env, to);
    assert!(eventually(Duration::from_secs(60), || drained(env)));
    stop(second)
}

/// A stream `DUE` taking subject `due.jobs`.
fn due_stream(rt: &tokio::runtime::Runtime, nats: &NatsServer) -> async_nats::jetstream::Context {
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "DUE".into(),
            subjects: vec!["due.jobs".into()],
            ..Default::default()
        })
        .await
        .unwrap();
        js
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_forwarder_killed_mid_batch_loses_nothing_and_jetstream_keeps_each_message_once() {
    let env = setup();
    let nats = NatsServer::start();
    let rt = rt();
    let js = due_stream(&rt, &nats);
    let count = || {
        rt.block_on(async {
            js.get_stream("DUE")
                .await
                .unwrap()
                .info()
                .await
                .unwrap()
                .state
                .messages
        })
    };
    let to = format!("{}?subject=due.jobs", nats.url());

    let summary = killed_mid_stream_then_finished(&env, &to);

    assert_eq!(count(), MESSAGES as u64, "every message once: {summary}");
    let keys: BTreeMap<String, usize> = rt.block_on(async {
        let stream = js.get_stream("DUE").await.unwrap();
        let mut keys = BTreeMap::new();
        for seq in 1..=MESSAGES as u64 {
            let m = stream.get_raw_message(seq).await.unwrap();
            let key = m.headers.get("rmq-key").unwrap().as_str().to_owned();
            *keys.entry(key).or_insert(0) += 1;
        }
        keys
    });
    assert_eq!(keys.len(), MESSAGES);
    eprintln!("after the kill: {summary}");
}

#[test]
fn a_forwarder_killed_mid_batch_loses_nothing_in_rabbitmq_and_repeats_only_what_was_in_flight() {
    let env = setup();
    let rabbit = RabbitServer::start();
    let rt = rt();
    let ch = rt.block_on(async {
        let conn =
            lapin::Connection::connect(&rabbit.url(), lapin::ConnectionProperties::default())
                .await
                .unwrap();
        let ch = conn.create_channel().await.unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare("jobs".into(), durable, FieldTable::default())
            .await
            .unwrap();
        std::mem::forget(conn);
        ch
    });
    let mut ids: BTreeMap<String, (String, usize)> = BTreeMap::new();
    let mut take = || {
        rt.block_on(async {
            while let Some(m) = ch
                .basic_get("jobs".into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
            {
                let id = m
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .unwrap()
                    .to_string();
                let payload = String::from_utf8(m.delivery.data.clone()).unwrap();
                let e = ids.entry(payload).or_insert((id.clone(), 0));
                assert_eq!(e.0, id, "a repeated message keeps its message_id");
                e.1 += 1;
            }
        });
        ids.values().map(|v| v.1).sum::<usize>()
    };
    let to = format!("{}?exchange=&routing_key=jobs", rabbit.url());

    let summary = killed_mid_stream_then_finished(&env, &to);
    let total = take();
    assert_eq!(ids.len(), MESSAGES, "every message arrived: {summary}");
    let extra = total - MESSAGES;
    eprintln!("after the kill: {extra} repeated, {summary}");
    assert!(
        extra <= CONCURRENCY.parse().unwrap(),
        "{extra} repeats: more than was in flight"
    );
}

#[test]
fn a_target_that_is_missing_or_unreachable_is_refused_at_start() {
    let env = Env::new();
    env.ok(&["topic", "create", "due", "--kind", "priority"]);
    let nats = NatsServer::start();
    let missing = env.rmq(&[
        "forward",
        "due",
        "--to",
        &format!("{}?subject=nobody.here", nats.url()),
    ]);
    assert!(
        missing
            .one_error(2)
            .contains("no JetStream stream takes subject \"nobody.here\""),
        "{missing:?}"
    );
    let port = rmq_test_support::free_port();
    let down = env.rmq(&[
        "forward",
        "due",
        "--to",
        &format!("amqp://u:secret@127.0.0.1:{port}/%2f?exchange=x"),
    ]);
    let line = down.one_error(1);
    assert!(
        line.contains("cannot reach the broker") && !line.contains("secret"),
        "{down:?}"
    );
    let bad = env.rmq(&["forward", "due", "--to", "kafka://127.0.0.1:9092"]);
    assert!(bad.one_error(2).contains("unknown scheme"), "{bad:?}");
    let unknown = env.rmq(&[
        "forward",
        "nosuch",
        "--to",
        &format!("{}?subject=a", nats.url()),
    ]);
    unknown.one_error(2);
}

#[test]
fn a_serial_forwarder_meets_its_group_in_zookeeper_or_stops_at_start() {
    let env = Env::new();
    env.ok(&["topic", "create", "due", "--kind", "priority"]);
    let nats = NatsServer::start();
    let rt = rt();
    let js = due_stream(&rt, &nats);
    let to = format!("{}?subject=due.jobs", nats.url());
    // Unreachable: exit 1 before anything is taken.
    let port = rmq_test_support::free_port();
    let nobody = format!("zk://127.0.0.1:{port}/rmq");
    let down = env.rmq(&[
        "forward",
        "due",
        "--to",
        &to,
        "--serial",
        "--coordinator",
        &nobody,
    ]);
    assert!(down.one_error(1).contains("is unreachable"), "{down:?}");
    let bad = env.rmq(&[
        "forward",
        "due",
        "--to",
        &to,
        "--serial",
        "--coordinator",
        "zk://x/",
    ]);
    bad.one_error(2);
    // Reachable: it joins (a znode) and forwards.
    let zk = rmq_test_support::ZooKeeperServer::start();
    env.rmq_in(&["send", "due", "--key", "k"], b"p").success();
    let child = env
        .cmd(&[
            "--json",
            "forward",
            "due",
            "--to",
            &to,
            "--serial",
            "--coordinator",
            &zk.address("rmq"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || acked(&env) == 1),
        "forwarded"
    );
    let joined = zk.monitor().get("zk_ephemerals_count").cloned();
    let summary = stop(child);
    assert_eq!(joined.as_deref(), Some("1"), "a member znode in ZooKeeper");
    assert_eq!(summary["forwarded"], 1, "{summary}");
    let stream = rt.block_on(async {
        js.get_stream("DUE")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    });
    assert_eq!(stream, 1);
}

/// `--metrics-listen`: the forwarder's deliveries and publish outcomes
/// for Prometheus, as `rmq consume` serves them.
#[test]
fn a_forwarder_serves_its_metrics() {
    let env = setup();
    let nats = NatsServer::start();
    let rt = rt();
    due_stream(&rt, &nats);
    let lines: String = (0..5)
        .map(|i| format!("{{\"payload\":\"v\",\"key\":\"k{i}\",\"delay\":0}}\n"))
        .collect();
    env.rmq_in(&["send", "due", "--batch"], lines.as_bytes())
        .success();
    let addr = format!("127.0.0.1:{}", rmq_test_support::free_port());
    let to = format!("{}?subject=due.jobs", nats.url());
    let child = env
        .cmd(&[
            "--json",
            "forward",
            "due",
            "--to",
            &to,
            "--metrics-listen",
            &addr,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut body = String::new();
    let scraped = eventually(Duration::from_secs(20), || {
        body = scrape(&addr).unwrap_or_default();
        body.contains("rmq_handler_outcomes_total{topic=\"due\",outcome=\"acked\"} 5")
    });
    let summary = stop(child);
    assert!(scraped, "{body}");
    assert!(body.contains("rmq_delivery_lateness_seconds"), "{body}");
    assert_eq!(summary["forwarded"], 5);
}
