//! Locked-down mode: an admin loads rmq's Function library once; tenants
//! get FCALL only (no EVAL, EVALSHA, SCRIPT, FUNCTION LOAD) and everything
//! still works, confined to their prefix.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{
    CancellationToken, Client, ClientOptions, ErrorKind, Message, Outcome, TopicKind, TopicSpec,
};

async fn root(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn locked_down_user(conn: &mut redis::aio::MultiplexedConnection, prefix: &str, user: &str) {
    let line = rmq::acl::setuser_line_locked_down(prefix, user).unwrap();
    let mut cmd = redis::cmd("ACL");
    for w in line.split_whitespace().skip(1).chain(["on", ">pw"]) {
        cmd.arg(w);
    }
    let _: () = cmd.query_async(conn).await.unwrap();
}

fn url_as(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:pw@127.0.0.1:{}", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_with_fcall_only_run_everything() {
    let server = RedisServer::builder().appendonly_always().start();
    let mut admin_conn = root(&server).await;
    locked_down_user(&mut admin_conn, "t", "tenant").await;
    let opts = || ClientOptions::default().prefix("t").functions(true);

    // Before the admin loads the library: a clear error.
    let e = Client::connect_with(&url_as(&server, "tenant"), opts())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedServer, "{e}");
    assert!(e.to_string().contains("rmq functions load"), "{e}");

    let admin = Client::connect(&server.url()).await.unwrap();
    let name = admin.load_functions().await.unwrap();
    assert!(name.starts_with("rmq_"));

    let client = Client::connect_with(&url_as(&server, "tenant"), opts())
        .await
        .unwrap();
    let topic = client
        .define_topic(
            TopicSpec::new("jobs", TopicKind::FixedTime)
                .slots(4)
                .max_attempts(1)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .await
        .unwrap();
    let msgs: Vec<Message> = (0..40)
        .map(|i| Message::new(format!("m{i}")).delay(Duration::from_millis(5)))
        .collect();
    topic.send_batch(&msgs).await.unwrap();
    let stop = CancellationToken::new();
    let (st, t2) = (stop.clone(), topic.clone());
    let watcher = tokio::spawn(async move {
        loop {
            let s = t2.stats().await.unwrap().total;
            if s.acked + s.dead_lettered == 40 {
                st.cancel();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    topic
        .consumer()
        .serial("g")
        .concurrency(4)
        .run(stop, |m| async move {
            if m.payload.ends_with(b"9") {
                Outcome::retry("poison")
            } else {
                Outcome::Ack
            }
        })
        .await
        .unwrap();
    watcher.await.unwrap();
    assert_eq!(topic.dead_letters(100).await.unwrap().len(), 4);
    topic.purge_dead(rmq::DeadSelection::All).await.unwrap();

    // No Lua of the tenant's own, in any form.
    let raw = redis::Client::open(url_as(&server, "tenant")).unwrap();
    let mut conn = raw.get_multiplexed_async_connection().await.unwrap();
    for cmd in [
        redis::cmd("EVAL").arg("return 1").arg(0).clone(),
        redis::cmd("SCRIPT").arg("LOAD").arg("return 1").clone(),
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("#!lua name=evil\nredis.register_function('evil', function() return 1 end)")
            .clone(),
        redis::cmd("FUNCTION").arg("FLUSH").clone(),
        redis::cmd("FUNCTION").arg("DELETE").arg(&name).clone(),
    ] {
        let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
        let e = r.unwrap_err();
        assert!(
            e.to_string().contains("NOPERM") || e.to_string().contains("permission"),
            "{e}"
        );
    }
    // FCALL on another prefix's keys is refused inside the function too.
    let f = format!("{name}_stats");
    let r: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg(&f)
        .arg(1)
        .arg("other:{x}:q")
        .arg("p")
        .query_async(&mut conn)
        .await;
    assert!(r.is_err(), "{r:?}");
    // The ACL log holds only what the tests above provoked, and the
    // preflight's optional CONFIG GET: nothing rmq itself needed.
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin_conn)
        .await
        .unwrap();
    for entry in log {
        let e = format!("{entry:?}");
        assert!(
            [
                "config|get",
                "eval",
                "script|load",
                "function|load",
                "function|flush",
                "function|delete",
                "\"key\""
            ]
            .iter()
            .any(|ok| e.contains(ok)),
            "unexpected denial: {e}"
        );
    }
}
