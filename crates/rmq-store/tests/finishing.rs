//! What finished flows back to the store: acks, dead letters and cancels
//! finish their rows, also an ack that arrives while the relay that moved
//! the row has not committed yet; a row that no longer fits the topic as
//! Redis defines it goes dead alone, with Redis's reason.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use rmq::{CancellationToken, Message, Settled, TopicKind, TopicSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_and_cancels_finish_their_rows() {
    let s = setup().await;
    let (stored, topic) = s
        .define(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(2)
                .max_attempts(1),
        )
        .await;
    let app = s.app().await;
    for k in ["fails", "cancelled"] {
        stored
            .send(&app, &Message::new("v").key(k).priority(1))
            .await
            .unwrap();
    }
    let relay = s.relay(fast("r")).await;
    let finisher = s.store.finisher().await.unwrap();
    let stop = CancellationToken::new();
    let mut deliveries = topic.consumer().concurrency(2).stream(stop.clone());
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(10), deliveries.next())
            .await
            .unwrap()
            .unwrap();
        let m = d.message().clone();
        if m.key == b"cancelled" {
            topic.cancel(&[b"cancelled"]).await.unwrap();
            assert_eq!(d.nack(None, "x").await.unwrap(), Settled::Cancelled);
            finisher.cancelled(&m);
        } else {
            assert_eq!(d.nack(None, "no\0such order").await.unwrap(), Settled::Dead);
            finisher.dead(&m, "no\0such order");
        }
    }
    stop.cancel();
    deliveries.close().await;
    finisher.flush().await;
    relay.stop().await;
    let c = s.store.counts("t").await.unwrap();
    assert_eq!((c.queued, c.done, c.dead), (0, 1, 1), "{c:?}");
    let err: String = app
        .query_one(
            "SELECT error FROM rmq_messages WHERE merge_key = 'fails'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        err, "no\u{fffd}such order",
        "the handler's error, NUL replaced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_arrives_before_the_relay_commits_still_finishes_the_row() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await;
    let mut app = s.app().await;
    let row = stored
        .send(&app, &Message::new("v").key("k").priority(1))
        .await
        .unwrap();
    // A relay mid-move: the row is locked and marked queued in a
    // transaction not committed yet, and the message already in Redis.
    let relay_tx = app.transaction().await.unwrap();
    relay_tx
        .execute(
            "UPDATE rmq_messages SET status = 'queued', queued_ms = rmq_now_ms() - 1000 WHERE id = $1",
            &[&row.id],
        )
        .await
        .unwrap();
    topic
        .send(Message::new("v").key("k").priority(1))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let mut deliveries = topic.consumer().stream(stop.clone());
    let d = deliveries.next().await.unwrap();
    let m = d.message().clone();
    d.ack().await.unwrap();
    let finisher = s.store.finisher().await.unwrap();
    finisher.acked(&m);
    finisher.flush().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The relay commits after the report was first tried: it is tried again.
    relay_tx.commit().await.unwrap();
    eventually(
        Duration::from_secs(3),
        "the report finishes the row",
        || async { s.store.counts("t").await.unwrap().done == 1 },
    )
    .await;
    stop.cancel();
    deliveries.close().await;
    let c = s.store.counts("t").await.unwrap();
    assert_eq!((c.stored, c.queued, c.done), (0, 0, 1), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_no_longer_fits_the_topic_goes_dead_alone() {
    log::capture();
    let s = setup().await;
    // The store's definition allows 64 bytes; Redis's was lowered to 8.
    let stored = s
        .store
        .define_topic(
            &TopicSpec::new("t", TopicKind::Priority)
                .slots(2)
                .max_payload_bytes(64),
        )
        .await
        .unwrap();
    let topic = s
        .client
        .define_topic(
            TopicSpec::new("t", TopicKind::Priority)
                .slots(2)
                .max_payload_bytes(8),
        )
        .await
        .unwrap();
    let app = s.app().await;
    let batch = [
        Message::new("small").key("a").priority(1),
        Message::new("x".repeat(40)).key("big").priority(1),
        Message::new("small").key("c").priority(1),
    ];
    stored.send_batch(&app, &batch).await.unwrap();
    let relay = s.relay(fast("r")).await;
    eventually(
        Duration::from_secs(10),
        "the fitting ones queued",
        || async { s.store.counts("t").await.unwrap().queued == 2 },
    )
    .await;
    let report = relay.stop().await;
    assert_eq!((report.moved, report.refused), (2, 1), "{report:?}");
    let (status, error): (String, String) = {
        let r = app
            .query_one(
                "SELECT status, error FROM rmq_messages WHERE merge_key = 'big'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(status, "dead");
    assert!(error.contains("payload"), "{error}");
    assert!(
        error.contains("checked by the relay") && !error.contains("refused by Redis"),
        "says what refused it: {error}"
    );
    assert_eq!(topic.stats().await.unwrap().total.pending, 2);
    let logged = log::text();
    assert!(
        logged.lines().any(|l| l.contains("WARN")
            && l.contains("marked dead")
            && l.contains("topic=t")
            && l.contains("key=big")
            && l.contains("payload")),
        "the dead row logged with its topic, key and reason:\n{logged}"
    );
}

/// What the tests' code logged (every test of this file: a global
/// subscriber).
mod log {
    use std::sync::{Arc, Mutex, OnceLock};

    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

    struct Writer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Writer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Starts capturing (once per process).
    pub fn capture() {
        LOG.get_or_init(|| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let w = buf.clone();
            let _ = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || Writer(w.clone()))
                .try_init();
            buf
        });
    }

    pub fn text() -> String {
        LOG.get()
            .map(|b| String::from_utf8_lossy(&b.lock().unwrap()).into_owned())
            .unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_beyond_the_bound_are_dropped_while_postgresql_is_down_and_their_rows_stay_queued()
{
    let mut s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await;
    s.queued(&stored, 300).await.stop().await;
    let finisher = s.store.finisher_bounded(100).await.unwrap();
    s.pg.kill();
    // 300 deliveries acked in Redis and reported while PostgreSQL is down.
    let stop = CancellationToken::new();
    let mut deliveries = topic.consumer().concurrency(32).stream(stop.clone());
    for _ in 0..300 {
        let d = tokio::time::timeout(Duration::from_secs(10), deliveries.next())
            .await
            .unwrap()
            .unwrap();
        let m = d.message().clone();
        d.ack().await.unwrap();
        finisher.acked(&m);
    }
    stop.cancel();
    deliveries.close().await;
    assert!(finisher.buffered() <= 100, "{}", finisher.buffered());
    assert_eq!(finisher.dropped(), 200, "the reports beyond the bound");
    // PostgreSQL back: what was kept is written; the dropped reports' rows
    // stay queued (delivered again only if Redis then loses data).
    s.pg.restart();
    finisher.flush().await;
    let store = Store::connect(&s.pg.conninfo()).await.unwrap();
    let c = store.counts("t").await.unwrap();
    assert_eq!((c.done, c.queued), (100, 200), "{c:?}");
    assert_eq!(finisher.buffered(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_says_what_it_is() {
    let s = setup().await;
    let relay = s.relay(fast("north")).await;
    let _finisher = s.store.finisher().await.unwrap();
    let app = s.app().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let names = loop {
        let names: Vec<String> = app
            .query(
                "SELECT application_name FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                 ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        if names.len() == 4 || std::time::Instant::now() > deadline {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        names,
        [
            "rmq-finisher",
            "rmq-relay north",
            "rmq-relay north (listening)",
            "rmq-store"
        ]
    );
    relay.stop().await;
}
