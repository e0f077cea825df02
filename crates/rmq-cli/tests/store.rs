//! `rmq store` as a newcomer runs it: migrate, define, relays as processes
//! SIGKILLed at random points while an application commits messages, a
//! consumer reporting its acks with `--store-pg`; every committed message
//! is delivered, repeats stay within the relays' crash window, and the
//! store ends knowing every message finished. Bad input and an unreachable
//! or unmigrated database get one error line and the documented exit code.
#![allow(clippy::unwrap_used)]
mod support;

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::time::Duration;

use rmq_store::tokio_postgres;
use rmq_test_support::PostgresServer;
use support::*;

const MESSAGES: usize = 3_000;
const BATCH: &str = "50";

fn relay(env: &Env, pg: &str) -> Child {
    env.cmd(&[
        "store",
        "relay",
        "--pg",
        pg,
        "--poll-ms",
        "100",
        "--batch",
        BATCH,
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// The application: commits the messages in transactions of 30.
async fn commit_all(conninfo: &str) {
    let (mut app, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let store = rmq_store::Store::connect(conninfo).await.unwrap();
    let orders = store.topic("orders").await.unwrap();
    for start in (0..MESSAGES).step_by(30) {
        let tx = app.transaction().await.unwrap();
        let batch: Vec<rmq::Message> = (start..start + 30)
            .map(|i| {
                rmq::Message::new(format!("order {i}"))
                    .key(format!("o{i}"))
                    .priority(1)
            })
            .collect();
        orders.send_batch(&tx, &batch).await.unwrap();
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn relays_sigkilled_at_random_points_deliver_every_committed_message() {
    let env = Env::new();
    let pg = PostgresServer::start();
    let url = pg.url();
    let r = env.ok(&["store", "migrate", "--pg", &url]);
    assert_eq!(r.stdout.trim(), "store schema at version 2");
    env.ok(&[
        "topic", "create", "orders", "--kind", "priority", "--slots", "8",
    ]);
    let r = env.ok(&["store", "define", "orders", "--pg", &url]);
    assert!(
        r.stdout.contains("topic orders defined in the store"),
        "{r:?}"
    );

    let conninfo = pg.conninfo();
    let app = std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(commit_all(&conninfo));
    });
    let mut relays = vec![relay(&env, &url), relay(&env, &url)];
    let mut killed = 0;
    let mut rng_state = 0x2545_f491_4f6c_dd1du64;
    while !app.is_finished() || killed < 10 {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        std::thread::sleep(Duration::from_millis(30 + rng_state % 250));
        let mut victim = relays.remove(0);
        victim.kill().unwrap(); // SIGKILL
        victim.wait().unwrap();
        killed += 1;
        relays.push(relay(&env, &url));
    }
    app.join().unwrap();
    let consumed = env.ok(&[
        "--json",
        "consume",
        "orders",
        "--store-pg",
        &url,
        "--idle-exit",
        "2000",
    ]);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in consumed.json() {
        if let Some(key) = line["key"].as_str() {
            *seen.entry(key.to_string()).or_default() += 1;
        }
    }
    let repeats: usize = seen.values().map(|n| n - 1).sum();
    eprintln!(
        "{killed} relays SIGKILLed; {} keys, {repeats} repeats",
        seen.len()
    );
    assert_eq!(seen.len(), MESSAGES, "every committed message delivered");
    // A repeat needs a relay killed after its Redis send and before its
    // commit: at most one batch per kill.
    assert!(
        repeats <= killed * 50,
        "{repeats} repeats for {killed} kills"
    );
    let stats = env.ok(&["--json", "store", "stats", "--pg", &url]).json();
    assert_eq!(stats.len(), 1);
    assert_eq!(
        (&stats[0]["stored"], &stats[0]["queued"], &stats[0]["done"]),
        (&0.into(), &0.into(), &MESSAGES.into()),
        "the store knows every message finished: {stats:?}"
    );
    // A relay stopped with SIGTERM says what it did.
    for mut r in relays {
        kill("-TERM", &r.id().to_string());
        let status = wait_limited(&mut r, Duration::from_secs(10)).expect("relay stops on SIGTERM");
        assert!(status.success(), "{status:?}");
    }
}

#[test]
fn an_unreachable_or_unmigrated_database_and_bad_input_get_one_error_line() {
    let env = Env::new();
    let pg = PostgresServer::start();
    let url = pg.url();
    let r = env.rmq(&[
        "store",
        "migrate",
        "--pg",
        "postgres://rmq@127.0.0.1:1/postgres",
    ]);
    assert!(r.one_error(1).contains("PostgreSQL"), "{r:?}");
    let r = env.rmq(&["store", "stats", "--pg", &url]);
    assert!(r.one_error(2).contains("rmq store migrate"), "{r:?}");
    let r = env.rmq(&["store", "relay", "--pg", &url]);
    assert!(r.one_error(2).contains("rmq store migrate"), "{r:?}");
    env.ok(&["store", "migrate", "--pg", &url]);
    // Migrating again changes nothing.
    env.ok(&["store", "migrate", "--pg", &url]);
    let r = env.rmq(&["store", "define", "ghost", "--pg", &url]);
    assert!(r.one_error(2).contains("ghost"), "{r:?}");
    let r = env.rmq(&["store", "recover", "ghost", "--pg", &url]);
    assert!(r.one_error(2).contains("ghost"), "{r:?}");
    let r = env.rmq(&["store", "relay", "--pg", &url, "--batch", "0"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = env.ok(&["store", "stats", "--pg", &url]);
    assert_eq!(r.stdout, "", "no topics yet");
    // Trying it from a shell: store, relay, consume.
    env.ok(&[
        "topic", "create", "jobs", "--kind", "priority", "--slots", "2",
    ]);
    env.ok(&["store", "define", "jobs", "--pg", &url]);
    let r = env.ok(&[
        "store",
        "send",
        "jobs",
        "hello",
        "--key",
        "j1",
        "--priority",
        "3",
        "--pg",
        &url,
    ]);
    assert!(r.stdout.starts_with("stored j1 in jobs (row "), "{r:?}");
    let r = env.ok(&[
        "--json",
        "store",
        "send",
        "jobs",
        "hello again",
        "--key",
        "j1",
        "--priority",
        "5",
        "--pg",
        &url,
    ]);
    assert_eq!(r.json()[0]["merged"], true, "{r:?}");
    let r = env.rmq(&["store", "send", "jobs", "x", "--at", "5", "--pg", &url]);
    assert!(
        r.one_error(2).contains("priority"),
        "a time on a priority topic: {r:?}"
    );
    let r = env.rmq(&["store", "send", "ghost", "x", "--pg", &url]);
    assert!(r.one_error(2).contains("ghost"), "{r:?}");
    let mut relay = relay(&env, &url);
    let consumed = env.ok(&[
        "--json",
        "consume",
        "jobs",
        "--store-pg",
        &url,
        "--max",
        "1",
    ]);
    relay.kill().unwrap();
    relay.wait().unwrap();
    let got = consumed.json();
    assert_eq!(
        (&got[0]["payload"], &got[0]["priority"]),
        (&"hello again".into(), &5.into()),
        "{got:?}"
    );
    let stats = env.ok(&["--json", "store", "stats", "--pg", &url]).json();
    assert_eq!(
        stats[0]["done"], 1,
        "the ack reached the store before rmq consume exited: {stats:?} {consumed:?}"
    );
    // A definition this rmq cannot read (written by hand, or by another
    // version) is shown with what is wrong, and hides no other topic.
    env.ok(&[
        "topic", "create", "broken", "--kind", "priority", "--slots", "2",
    ]);
    env.ok(&["store", "define", "broken", "--pg", &url]);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        app.execute(
            "UPDATE rmq_topics SET spec = spec - 'kind' WHERE name = 'broken'",
            &[],
        )
        .await
        .unwrap();
    });
    let stats = env.ok(&["--json", "store", "stats", "--pg", &url]).json();
    assert_eq!(
        (&stats[0]["topic"], &stats[1]["topic"], &stats[1]["done"]),
        (&"broken".into(), &"jobs".into(), &1.into()),
        "{stats:?}"
    );
    let problem = stats[0]["problem"].as_str().unwrap_or_default();
    assert!(problem.contains("kind"), "{stats:?}");
    assert!(stats[1].get("problem").is_none(), "{stats:?}");
    let r = env.ok(&["store", "stats", "--pg", &url]);
    assert!(r.stdout.contains("SKIPPED BY RELAYS"), "{r:?}");
}
