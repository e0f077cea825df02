//! Relays: several share the work and never move a row twice; relays
//! stopped dead at any point (mid-batch, after the Redis send, before the
//! commit) lose nothing, and repeat only what their crash window allows;
//! PostgreSQL restarted under load loses nothing.
#![allow(clippy::unwrap_used)]
mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use rand::Rng;
use rmq::{TopicKind, TopicSpec};

fn counts_by_key(got: &[rmq::Received]) -> HashMap<Vec<u8>, usize> {
    let mut c = HashMap::new();
    for m in got {
        *c.entry(m.key.clone()).or_insert(0) += 1;
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_relays_share_the_work_and_never_move_a_row_twice() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await;
    let relays = [
        s.relay(RelayOptions {
            batch: 50,
            ..fast("a")
        })
        .await,
        s.relay(RelayOptions {
            batch: 50,
            ..fast("b")
        })
        .await,
        s.relay(RelayOptions {
            batch: 50,
            ..fast("c")
        })
        .await,
    ];
    let mut app = s.app().await;
    commit_numbered(&stored, &mut app, 0..3_000, 100).await;
    eventually(Duration::from_secs(30), "every row queued", || async {
        s.store.counts("t").await.unwrap().queued == 3_000
    })
    .await;
    let mut moved = Vec::new();
    for r in relays {
        moved.push(r.stop().await.moved);
    }
    assert_eq!(
        moved.iter().sum::<u64>(),
        3_000,
        "each row moved by one relay: {moved:?}"
    );
    let stats = topic.stats().await.unwrap().total;
    assert_eq!(
        (stats.sent, stats.merged),
        (3_000, 0),
        "Redis saw each message once: {stats:?}"
    );
    let finisher = s.store.finisher().await.unwrap();
    let got = consume(&topic, &finisher, 3_000, Duration::from_secs(30)).await;
    let by_key = counts_by_key(&got);
    assert_eq!(by_key.len(), 3_000);
    assert!(by_key.values().all(|&n| n == 1), "delivered once each");
    assert_eq!(s.store.counts("t").await.unwrap().done, 3_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_stopped_dead_at_any_point_lose_nothing_and_repeat_only_within_their_window() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await;
    let total = 4_000;
    let mut app = s.app().await;
    let sender = {
        let stored = stored.clone();
        tokio::spawn(async move { commit_numbered(&stored, &mut app, 0..total, 40).await })
    };
    // Consumers run all along, so a re-sent copy may meet a delivery.
    let finisher = s.store.finisher().await.unwrap();
    let consumer = {
        let (topic, finisher) = (topic.clone(), finisher.clone());
        tokio::spawn(
            async move { consume(&topic, &finisher, total, Duration::from_secs(60)).await },
        )
    };
    // Two relays at a time, each aborted (its task dropped mid-await:
    // between any two steps, as a SIGKILL would) after a random time and
    // replaced, 30 times.
    let mut aborted = 0;
    let mut rng = rand::rng();
    let mut running = vec![
        s.relay(RelayOptions {
            batch: 64,
            ..fast("r0")
        })
        .await,
    ];
    for i in 1..=30 {
        running.push(
            s.relay(RelayOptions {
                batch: 64,
                ..fast(&format!("r{i}"))
            })
            .await,
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..120))).await;
        let victim = running.remove(0);
        victim.task.abort();
        let _ = victim.task.await;
        aborted += 1;
    }
    sender.await.unwrap();
    let got = consumer.await.unwrap();
    let last = running.pop().unwrap();
    last.stop().await;
    let by_key = counts_by_key(&got);
    let repeats: usize = by_key.values().map(|n| n - 1).sum();
    eprintln!(
        "{aborted} relays aborted; {} delivered, {repeats} repeats",
        got.len()
    );
    assert_eq!(by_key.len(), total, "every committed message delivered");
    // A repeat needs a relay that died after its Redis send and before its
    // commit, with a consumer taking the copy in between: at most one
    // batch per aborted relay.
    assert!(
        repeats <= aborted * 64,
        "{repeats} repeats for {aborted} aborted relays"
    );
    eventually(
        Duration::from_secs(10),
        "the store knows every message finished",
        || async {
            let c = s.store.counts("t").await.unwrap();
            c.stored == 0 && c.queued == 0
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_restarted_under_load_loses_nothing() {
    let mut s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await;
    let relay = s
        .relay(RelayOptions {
            batch: 64,
            ..fast("r")
        })
        .await;
    let finisher = s.store.finisher().await.unwrap();
    let consumer = {
        let (topic, finisher) = (topic.clone(), finisher.clone());
        tokio::spawn(
            async move { consume(&topic, &finisher, 2_000, Duration::from_secs(60)).await },
        )
    };
    let mut app = s.app().await;
    commit_numbered(&stored, &mut app, 0..1_000, 50).await;
    // SIGKILL of the postmaster and its backends, then a restart.
    s.pg.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.pg.restart();
    let mut app = s.app().await;
    commit_numbered(&stored, &mut app, 1_000..2_000, 50).await;
    let got = consumer.await.unwrap();
    relay.stop().await;
    let by_key = counts_by_key(&got);
    assert_eq!(by_key.len(), 2_000, "every committed message delivered");
    let store = Store::connect(&s.pg.conninfo()).await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the finisher's reports reach the restarted server",
        || async {
            let c = store.counts("t").await.unwrap();
            c.stored == 0 && c.queued == 0
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_topic_keeps_its_rows_and_does_not_hold_back_the_others() {
    let s = setup().await;
    let (full, full_t) = s
        .define(
            TopicSpec::new("full", TopicKind::Priority)
                .slots(2)
                .max_pending(10),
        )
        .await;
    let (other, other_t) = s
        .define(TopicSpec::new("other", TopicKind::Priority).slots(2))
        .await;
    let mut app = s.app().await;
    // 200 rows of the bounded topic first (the head of the queue), then 100
    // of another one.
    commit_numbered(&full, &mut app, 0..200, 50).await;
    commit_numbered(&other, &mut app, 0..100, 50).await;
    let relay = s
        .relay(RelayOptions {
            batch: 50,
            ..fast("r")
        })
        .await;
    eventually(
        Duration::from_secs(10),
        "the other topic's rows in Redis",
        || async { other_t.stats().await.unwrap().total.pending == 100 },
    )
    .await;
    assert_eq!(
        full_t.stats().await.unwrap().total.pending,
        10,
        "the bound holds"
    );
    let c = s.store.counts("full").await.unwrap();
    assert_eq!(
        (c.stored, c.queued, c.dead),
        (190, 10, 0),
        "the rest wait in the store: {c:?}"
    );
    // Room comes back as messages end: the rest follow.
    let finisher = s.store.finisher().await.unwrap();
    let got = consume(&full_t, &finisher, 200, Duration::from_secs(30)).await;
    relay.stop().await;
    assert_eq!(counts_by_key(&got).len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_kept_full_does_not_delay_another_topics_due_row() {
    let s = setup().await;
    let (full, full_t) = s
        .define(
            TopicSpec::new("full", TopicKind::Priority)
                .slots(2)
                .max_pending(10),
        )
        .await;
    let (timers, timers_t) = s
        .define(TopicSpec::new("timers", TopicKind::FixedTime).slots(2))
        .await;
    let mut app = s.app().await;
    // Far more rows of the bounded topic than a batch: its rows (loading at
    // once) sort before any fixed-time row.
    commit_numbered(&full, &mut app, 0..2_000, 500).await;
    let relay = s
        .relay(RelayOptions {
            batch: 50,
            window: Duration::from_secs(1),
            ..fast("r")
        })
        .await;
    eventually(
        Duration::from_secs(20),
        "the bounded topic full",
        || async { full_t.stats().await.unwrap().total.pending == 10 },
    )
    .await;
    // A timer due in 4 s enters the relay's window (1 s) by time alone: no
    // commit wakes the relay then, only its polls.
    let due_in = Duration::from_secs(4);
    let sent = std::time::Instant::now();
    timers
        .send(&app, &rmq::Message::new("t").key("timer").delay(due_in))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the timer in Redis while the other topic stays full",
        || async { timers_t.get(b"timer").await.unwrap().state != rmq::State::Absent },
    )
    .await;
    let moved_after = sent.elapsed();
    eprintln!("the timer (due in {due_in:?}, window 1 s) reached Redis after {moved_after:?}");
    assert!(
        moved_after < due_in + Duration::from_secs(10),
        "moved {moved_after:?} after its send"
    );
    assert_eq!(
        full_t.stats().await.unwrap().total.pending,
        10,
        "the bound holds"
    );
    relay.stop().await;
    let c = s.store.counts("full").await.unwrap();
    assert_eq!((c.stored, c.queued, c.dead), (1_990, 10, 0), "{c:?}");
}
