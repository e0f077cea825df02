//! Retention: finished rows older than the retention are deleted, in
//! batches, and nothing else is.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use rmq::{Message, TopicKind, TopicSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_rows_older_than_the_retention_go_in_batches_and_nothing_else_does() {
    let s = setup().await;
    let (stored, _) = s
        .define(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await;
    let app = s.app().await;
    let batch: Vec<Message> = (0..2_500)
        .map(|i| Message::new("v").key(format!("k{i}")).priority(1))
        .collect();
    stored.send_batch(&app, &batch).await.unwrap();
    // 2,000 finished two hours ago (1,500 done, 500 dead), 300 finished
    // just now, 100 queued, 100 still stored.
    app.batch_execute(
        "UPDATE rmq_messages SET status = 'done', finished_at = now() - interval '2 hours'
           WHERE id IN (SELECT id FROM rmq_messages ORDER BY id LIMIT 1500);
         UPDATE rmq_messages SET status = 'dead', finished_at = now() - interval '2 hours'
           WHERE id IN (SELECT id FROM rmq_messages WHERE status = 'stored' ORDER BY id LIMIT 500);
         UPDATE rmq_messages SET status = 'done', finished_at = now()
           WHERE id IN (SELECT id FROM rmq_messages WHERE status = 'stored' ORDER BY id LIMIT 300);
         UPDATE rmq_messages SET status = 'queued', queued_ms = 0
           WHERE id IN (SELECT id FROM rmq_messages WHERE status = 'stored' ORDER BY id LIMIT 100);",
    )
    .await
    .unwrap();
    let deleted = s
        .store
        .prune(Duration::from_secs(3_600), 300)
        .await
        .unwrap();
    assert_eq!(
        deleted, 2_000,
        "every row finished over an hour ago, 300 at a time"
    );
    let c = s.store.counts("t").await.unwrap();
    assert_eq!(
        (c.stored, c.queued, c.done, c.dead),
        (100, 100, 300, 0),
        "{c:?}"
    );
    assert_eq!(
        s.store
            .prune(Duration::from_secs(3_600), 300)
            .await
            .unwrap(),
        0
    );
}
