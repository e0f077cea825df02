//! The outbox: a message exists if and only if the application's
//! transaction commits; a key still in the store merges there by the
//! kind's rule; bad input is refused before anything is written;
//! far-future messages stay in PostgreSQL until their window.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use rmq::{Message, State, TopicKind, TopicSpec};
use rmq_store::StoreError;

fn refused<T>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Refused(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_message_is_delivered_once_and_a_rolled_back_one_never() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("orders", TopicKind::Priority).slots(4))
        .await;
    let mut app = s.app().await;
    // Each order and its message commit together, or neither does.
    for i in 0..200 {
        let tx = app.transaction().await.unwrap();
        tx.execute("SELECT 1", &[]).await.unwrap();
        stored
            .send(
                &tx,
                &Message::new(format!("order {i}"))
                    .key(format!("o{i}"))
                    .priority(1),
            )
            .await
            .unwrap();
        if i % 2 == 0 {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
    let relay = s.relay(fast("r1")).await;
    let finisher = s.store.finisher().await.unwrap();
    let got = consume(&topic, &finisher, 100, Duration::from_secs(20)).await;
    let report = relay.stop().await;
    let mut keys: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(m.key.clone()).unwrap())
        .collect();
    keys.sort();
    let mut want: Vec<String> = (0..200).step_by(2).map(|i| format!("o{i}")).collect();
    want.sort();
    assert_eq!(keys, want, "exactly the committed ones, each once");
    assert_eq!(report.moved, 100);
    let c = s.store.counts("orders").await.unwrap();
    assert_eq!((c.stored, c.queued, c.done), (0, 0, 100), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_still_in_the_store_merges_there_by_the_kind_s_rule() {
    let s = setup().await;
    let (prio, prio_t) = s
        .define(TopicSpec::new("p", TopicKind::Priority).slots(2))
        .await;
    let (fixed, fixed_t) = s
        .define(TopicSpec::new("f", TopicKind::FixedTime).slots(2))
        .await;
    let (range, range_t) = s
        .define(TopicSpec::new("r", TopicKind::RangeMerge).slots(2))
        .await;
    let app = s.app().await;
    let far = 4_000_000_000_000i64;
    let a = prio
        .send(&app, &Message::new("v1").key("k").priority(5))
        .await
        .unwrap();
    let b = prio
        .send(&app, &Message::new("v2").key("k").priority(9))
        .await
        .unwrap();
    assert!(!a.merged && b.merged && a.id == b.id, "{a:?} {b:?}");
    fixed
        .send(&app, &Message::new("v1").key("k").at_ms(far))
        .await
        .unwrap();
    fixed
        .send(&app, &Message::new("v2").key("k").at_ms(far + 5))
        .await
        .unwrap();
    range
        .send(
            &app,
            &Message::new("v1").key("k").range(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    range
        .send(
            &app,
            &Message::new("v2").key("k").range(Duration::from_secs(7200)),
        )
        .await
        .unwrap();
    // A batch with duplicates merges within itself too.
    let batch = prio
        .send_batch(
            &app,
            &[
                Message::new("x1").key("j").priority(1),
                Message::new("x2").key("j").priority(2),
            ],
        )
        .await
        .unwrap();
    assert!(!batch[0].merged && batch[1].merged && batch[0].id == batch[1].id);
    let row = app
        .query_one("SELECT payload, priority, sends FROM rmq_messages WHERE topic = 'p' AND merge_key = 'k'", &[])
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, Vec<u8>>(0),
            row.get::<_, i64>(1),
            row.get::<_, i32>(2)
        ),
        (b"v2".to_vec(), 9, 2)
    );
    let row = app
        .query_one(
            "SELECT payload, due_ms FROM rmq_messages WHERE topic = 'f'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, Vec<u8>>(0), row.get::<_, i64>(1)),
        (b"v2".to_vec(), far + 5)
    );
    let row = app
        .query_one("SELECT payload, due_ms - created_at_ms FROM (SELECT payload, due_ms, (extract(epoch FROM created_at) * 1000)::bigint AS created_at_ms FROM rmq_messages WHERE topic = 'r') x", &[])
        .await
        .unwrap();
    let range_left = row.get::<_, i64>(1);
    assert_eq!(row.get::<_, Vec<u8>>(0), b"v2".to_vec());
    assert!(
        (3_599_000..=3_601_000).contains(&range_left),
        "range-merge keeps the first due time: {range_left}"
    );
    // Far-future fixed-time stays in the store; the others reach Redis as
    // the merged message.
    let relay = s.relay(fast("r1")).await;
    eventually(
        Duration::from_secs(10),
        "priority and range-merge in Redis",
        || async {
            prio_t.get(b"k").await.unwrap().state == State::Pending
                && range_t.get(b"k").await.unwrap().state == State::Pending
        },
    )
    .await;
    relay.stop().await;
    let p = prio_t.get(b"k").await.unwrap();
    assert_eq!(
        (p.payload.as_deref(), p.priority),
        (Some(&b"v2"[..]), Some(9))
    );
    let r = range_t.get(b"k").await.unwrap();
    assert_eq!(r.payload.as_deref(), Some(&b"v2"[..]));
    assert_eq!(
        fixed_t.get(b"k").await.unwrap().state,
        State::Absent,
        "far future: not in Redis"
    );
    assert_eq!(s.store.counts("f").await.unwrap().stored, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_future_messages_stay_in_postgresql_until_their_window() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("timers", TopicKind::FixedTime).slots(4))
        .await;
    let app = s.app().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    stored
        .send(&app, &Message::new("soon").key("soon").at_ms(now + 3_000))
        .await
        .unwrap();
    stored
        .send(
            &app,
            &Message::new("later")
                .key("later")
                .delay(Duration::from_secs(86_400)),
        )
        .await
        .unwrap();
    let relay = s
        .relay(RelayOptions {
            window: Duration::from_secs(1),
            ..fast("r1")
        })
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        topic.get(b"soon").await.unwrap().state,
        State::Absent,
        "3 s ahead, window 1 s: still in PostgreSQL"
    );
    eventually(
        Duration::from_secs(5),
        "the soon one enters Redis within its window",
        || async { topic.get(b"soon").await.unwrap().state == State::Pending },
    )
    .await;
    let sent_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(sent_at <= now + 3_000, "in Redis before it was due");
    let finisher = s.store.finisher().await.unwrap();
    let got = consume(&topic, &finisher, 1, Duration::from_secs(10)).await;
    relay.stop().await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].due_ms,
        Some(now + 3_000),
        "delivered at its own due time"
    );
    assert!(got[0].taken_ms >= now + 3_000);
    assert_eq!(
        topic.get(b"later").await.unwrap().state,
        State::Absent,
        "a day ahead: only a row"
    );
    let c = s.store.counts("timers").await.unwrap();
    assert_eq!((c.stored, c.queued, c.done), (1, 0, 1), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_written() {
    let s = setup().await;
    let (prio, _) = s
        .define(
            TopicSpec::new("p", TopicKind::Priority)
                .slots(2)
                .max_payload_bytes(16),
        )
        .await;
    let (fixed, _) = s
        .define(TopicSpec::new("f", TopicKind::FixedTime).slots(2))
        .await;
    let app = s.app().await;
    assert!(
        refused(
            prio.send(&app, &Message::new("x".repeat(17)).key("k"))
                .await
        ),
        "payload too large"
    );
    assert!(
        refused(
            prio.send(&app, &Message::new("x").key("k").priority(3_000_000))
                .await
        ),
        "priority out of range"
    );
    assert!(
        refused(prio.send(&app, &Message::new("x").key("k").at_ms(1)).await),
        "timing of another kind"
    );
    assert!(
        refused(fixed.send(&app, &Message::new("x").key("k")).await),
        "no due time"
    );
    assert!(
        refused(fixed.send(&app, &Message::new("x").key("").at_ms(1)).await),
        "empty key"
    );
    // One bad message refuses its whole batch.
    let batch = [
        Message::new("ok").key("a").priority(1),
        Message::new("x".repeat(17)).key("b"),
    ];
    assert!(refused(prio.send_batch(&app, &batch).await));
    // A topic the store does not know, a definition that changes kind.
    let ghost = s.store.topic("ghost").await;
    assert!(
        matches!(ghost, Err(StoreError::UnknownTopic(_))),
        "{ghost:?}"
    );
    let conflict = s
        .store
        .define_topic(&TopicSpec::new("p", TopicKind::FixedTime).slots(2))
        .await;
    assert!(
        matches!(conflict, Err(StoreError::TopicConflict(_))),
        "{conflict:?}"
    );
    let bad = s
        .store
        .define_topic(&TopicSpec::new("bad name!", TopicKind::Priority))
        .await;
    assert!(matches!(bad, Err(StoreError::Refused(_))), "{bad:?}");
    let n: i64 = app
        .query_one("SELECT count(*) FROM rmq_messages", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing written");
    // A database without the schema says so.
    let bare = PostgresServer::start();
    let err = Store::connect(&bare.conninfo()).await.err();
    assert!(matches!(err, Some(StoreError::NotMigrated)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_wakes_the_relays_at_once_not_at_their_next_poll() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await;
    // Relays that would look by themselves only once a minute.
    let relays = [
        s.relay(RelayOptions {
            poll: Duration::from_secs(60),
            ..fast("a")
        })
        .await,
        s.relay(RelayOptions {
            poll: Duration::from_secs(60),
            ..fast("b")
        })
        .await,
    ];
    // Their first round (and the listener) are done.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut app = s.app().await;
    for i in 0..5 {
        let tx = app.transaction().await.unwrap();
        stored
            .send(&tx, &Message::new("v").key(format!("k{i}")).priority(1))
            .await
            .unwrap();
        let committed = std::time::Instant::now();
        tx.commit().await.unwrap();
        eventually(Duration::from_secs(5), "in Redis", || async {
            topic.get(format!("k{i}").as_bytes()).await.unwrap().state == State::Pending
        })
        .await;
        let took = committed.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "commit {i} reached Redis after {took:?}: woken by the notification, not the 60 s poll"
        );
    }
    for r in relays {
        r.stop().await;
    }
}
