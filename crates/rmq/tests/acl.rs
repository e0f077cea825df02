//! Least privilege and tenant isolation: everything rmq does works as a
//! user holding only `rmq::acl::setuser_line`'s commands, keys and channels
//! (Redis logs no denial), and that user can neither read nor change
//! another prefix's queues, through rmq or raw commands.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use rmq::{
    CancellationToken, Client, ClientOptions, ErrorKind, Message, Outcome, TopicKind, TopicSpec,
};

/// Every command name in `redis.call('X'`, `redis.pcall('X'` and the
/// `bulk('X'` helper of the `.lua` files, plus the notice commands chosen
/// at run time.
fn script_commands() -> BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/lua");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for pat in ["redis.call('", "redis.pcall('", "bulk('"] {
            for part in text.split(pat).skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .collect();
                if !name.is_empty() {
                    out.insert(name.to_lowercase());
                }
            }
        }
        // `local cmd = 'PUBLISH'` / `cmd = 'SPUBLISH'` in announce().
        for part in text.split("cmd = '").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            out.insert(name.to_lowercase());
        }
    }
    out
}

#[test]
fn every_command_the_scripts_call_is_in_the_allowlist() {
    let found = script_commands();
    assert!(
        found.contains("zadd") && found.contains("spublish"),
        "{found:?}"
    );
    let allowed: BTreeSet<String> = rmq::acl::SCRIPT_COMMANDS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        found, allowed,
        "the allowlist must match the scripts exactly"
    );
}

async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn make_user(conn: &mut redis::aio::MultiplexedConnection, prefix: &str, user: &str) {
    let line = rmq::acl::setuser_line(prefix, user).unwrap();
    let mut cmd = redis::cmd("ACL");
    for word in line.split_whitespace().skip(1).chain(["on", ">secret-pw"]) {
        cmd.arg(word);
    }
    let _: () = cmd.query_async(conn).await.unwrap();
}

fn url_as(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:secret-pw@127.0.0.1:{}", server.port())
}

async fn acl_log(conn: &mut redis::aio::MultiplexedConnection) -> Vec<redis::Value> {
    redis::cmd("ACL")
        .arg("LOG")
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_works_as_a_least_privilege_user() {
    let server = RedisServer::builder().appendonly_always().start();
    let mut root = admin(&server).await;
    make_user(&mut root, "team", "rmq-team").await;
    let client = Client::connect_with(
        &url_as(&server, "rmq-team"),
        ClientOptions::default().prefix("team"),
    )
    .await
    .unwrap();
    assert_eq!(client.warnings(), [rmq::ServerWarning::ConfigUnreadable]);
    for (name, kind) in [
        ("p", TopicKind::Priority),
        ("f", TopicKind::FixedTime),
        ("r", TopicKind::RangeMerge),
    ] {
        let topic = client
            .define_topic(
                TopicSpec::new(name, kind)
                    .slots(4)
                    .max_attempts(2)
                    .backoff(Duration::from_millis(10), Duration::from_millis(10)),
            )
            .await
            .unwrap();
        let msgs: Vec<Message> = (0..50)
            .map(|i| {
                let m = Message::new(format!("m{i}")).key(format!("k{i}"));
                match kind {
                    TopicKind::Priority => m.priority(i % 3),
                    TopicKind::FixedTime => m.delay(Duration::from_millis(10)),
                    TopicKind::RangeMerge => m.range(Duration::from_millis(10)),
                }
            })
            .collect();
        topic.send_batch(&msgs).await.unwrap();
        // Durable send: WAIT runs (no replica here: 0 asked).
        topic
            .durable(0, Duration::from_millis(10))
            .send(msgs[0].clone())
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let st = stop.clone();
        let t2 = topic.clone();
        let watcher = tokio::spawn(async move {
            loop {
                let s = t2.stats().await.unwrap().total;
                if s.pending + s.in_flight == 0 && s.acked + s.dead_lettered >= 50 {
                    st.cancel();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let mut consumer = topic.consumer().concurrency(8);
        if name == "p" {
            consumer = consumer.serial("workers");
        }
        consumer
            .run(stop, |m| async move {
                if m.key.ends_with(b"7") {
                    Outcome::retry("failing on purpose")
                } else {
                    Outcome::Ack
                }
            })
            .await
            .unwrap();
        watcher.await.unwrap();
        topic.peek(10).await.unwrap();
        assert!(!topic.dead_letters(100).await.unwrap().is_empty());
        topic.requeue_dead(rmq::DeadSelection::All).await.unwrap();
        topic.purge_dead(rmq::DeadSelection::All).await.unwrap();
    }
    client.topics().await.unwrap();
    client.topic("p").await.unwrap();
    // The one denial: the preflight's optional CONFIG GET (reported as
    // ServerWarning::ConfigUnreadable above).
    let log = acl_log(&mut root).await;
    let denied: Vec<String> = log
        .iter()
        .map(|entry| format!("{entry:?}"))
        .filter(|e| !e.contains("\"config|get\""))
        .collect();
    assert!(denied.is_empty(), "denied: {denied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_can_neither_read_nor_change_another_tenant_s_queues() {
    let server = RedisServer::start();
    let mut root = admin(&server).await;
    make_user(&mut root, "a", "tenant-a").await;
    make_user(&mut root, "b", "tenant-b").await;
    let b = Client::connect_with(
        &url_as(&server, "tenant-b"),
        ClientOptions::default().prefix("b"),
    )
    .await
    .unwrap();
    let b_topic = b
        .define_topic(TopicSpec::new("orders", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    b_topic
        .send(Message::new("b's secret").key("k"))
        .await
        .unwrap();
    let before = b_topic.stats().await.unwrap().total;

    // Tenant A through rmq, pointed at B's prefix.
    let a_on_b = Client::connect_with(
        &url_as(&server, "tenant-a"),
        ClientOptions::default().prefix("b"),
    )
    .await
    .unwrap();
    let e = a_on_b.topic("orders").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Redis, "{e}");
    assert!(
        e.to_string().contains("NOPERM") || e.to_string().to_lowercase().contains("permission"),
        "{e}"
    );
    let e = a_on_b
        .define_topic(TopicSpec::new("orders", TopicKind::Priority).slots(2))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("NOPERM") || e.to_string().to_lowercase().contains("permission"),
        "{e}"
    );

    // Tenant A with raw commands on B's keys and channels.
    let a_raw = redis::Client::open(url_as(&server, "tenant-a")).unwrap();
    let mut conn = a_raw.get_multiplexed_async_connection().await.unwrap();
    let b_key = b_topic.keys_of_slot(b_topic.slot_of(b"k"))[1].clone();
    for cmd in [
        redis::cmd("HGETALL").arg(&b_key).clone(),
        redis::cmd("DEL").arg(&b_key).clone(),
        redis::cmd("HGET").arg("b:topics").arg("orders").clone(),
        redis::cmd("PUBLISH").arg("b:wake:orders").arg("x").clone(),
        redis::cmd("FLUSHALL").clone(),
        redis::cmd("SCRIPT").arg("FLUSH").clone(),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("EVAL").arg("return 1").arg(0).clone(),
    ] {
        let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
        let e = r.unwrap_err();
        assert!(
            e.to_string().contains("NOPERM") || e.to_string().contains("permission"),
            "{e}"
        );
    }
    // ...and inside a script it loaded itself: keys are checked there too.
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("#!lua\nreturn redis.call('HGETALL', KEYS[1])")
        .query_async(&mut conn)
        .await
        .unwrap();
    let r: redis::RedisResult<redis::Value> = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg(&b_key)
        .query_async(&mut conn)
        .await;
    assert!(r.is_err(), "{r:?}");
    let mut ps = a_raw.get_async_pubsub().await.unwrap();
    assert!(ps.subscribe("b:wake:orders").await.is_err());

    // Nothing of B's changed.
    let after = b_topic.stats().await.unwrap().total;
    assert_eq!((after.pending, after.sent), (before.pending, before.sent));
    let d = tokio::time::timeout(Duration::from_secs(2), b_topic.take(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d[0].payload, b"b's secret");
}
