//! A large store costs the relay nothing per round: with a million
//! far-future rows stored, the relay's query finds what is due through the
//! index (an index condition on `load_ms`, a handful of buffers), and a
//! message due now still reaches Redis at once.
#![allow(clippy::unwrap_used)]
mod common;

use std::time::Duration;

use common::*;
use rmq::{Message, State, TopicKind, TopicSpec};
use rmq_store::tokio_postgres::types::Type;

/// Far-future rows: due in 30 days, one statement.
const FAR_ROWS: i64 = 1_000_000;

async fn far_future_rows(app: &tokio_postgres::Client, topic: &str, n: i64) {
    app.execute(
        "INSERT INTO rmq_messages (topic, slot, merge_key, payload, due_ms, load_ms)
         SELECT $1, (i % 8)::int4, convert_to('far' || i, 'UTF8'), '\\x00'::bytea, d, d
         FROM generate_series(1, $2::int8) AS i,
              LATERAL (SELECT rmq_now_ms() + 30 * 86400000::int8 AS d) AS due",
        &[&topic, &n],
    )
    .await
    .unwrap();
    app.batch_execute("ANALYZE rmq_messages").await.unwrap();
}

/// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of `sql` with `params`: the
/// plan's top node.
async fn explain(
    app: &tokio_postgres::Client,
    sql: &str,
    params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
) -> serde_json::Value {
    let rows = app
        .query_typed(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
            params,
        )
        .await
        .unwrap();
    let plan: serde_json::Value = rows[0].get(0);
    eprintln!("execution time: {} ms", plan[0]["Execution Time"]);
    plan[0]["Plan"].clone()
}

/// Every node of a plan, depth first.
fn nodes(plan: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut all = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for c in children {
            all.extend(nodes(c));
        }
    }
    all
}

fn buffers(plan: &serde_json::Value) -> u64 {
    plan["Shared Hit Blocks"].as_u64().unwrap_or(0)
        + plan["Shared Read Blocks"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_million_far_future_rows_the_relay_reads_only_what_is_due() {
    let s = setup().await;
    let (stored, topic) = s
        .define(TopicSpec::new("timers", TopicKind::FixedTime).slots(8))
        .await;
    let app = s.app().await;
    far_future_rows(&app, "timers", FAR_ROWS).await;

    // The relay's own query, as it runs it: an index condition bounds
    // load_ms, so it reads a few pages, not every stored row.
    let window = 600_000i64;
    let limit = 500i64;
    let plan = explain(
        &app,
        rmq_store::sql::TAKE_DUE,
        &[
            (&"timers", Type::TEXT),
            (&window, Type::INT8),
            (&limit, Type::INT8),
        ],
    )
    .await;
    let all = nodes(&plan);
    let cond = all
        .iter()
        .find_map(|n| n["Index Cond"].as_str().filter(|c| c.contains("load_ms")));
    assert!(
        cond.is_some(),
        "load_ms bounded by an index condition: {plan:#}"
    );
    let read = buffers(&plan);
    eprintln!("the relay's query read {read} buffers with {FAR_ROWS} far-future rows");
    assert!(read < 200, "{read} buffers read: {plan:#}");

    // A message due now reaches Redis promptly despite them.
    let relay = s.relay(fast("r")).await;
    stored
        .send(&app, &Message::new("now").key("now").delay(Duration::ZERO))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the due message in Redis",
        || async { topic.get(b"now").await.unwrap().state != State::Absent },
    )
    .await;
    relay.stop().await;
    let c = s.store.counts("timers").await.unwrap();
    assert_eq!((c.stored, c.queued), (FAR_ROWS as u64, 1), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_pages_through_queued_rows_by_index() {
    let s = setup().await;
    s.define(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await;
    let app = s.app().await;
    app.execute(
        "INSERT INTO rmq_messages (topic, slot, merge_key, payload, priority, load_ms, status, queued_ms)
         SELECT 't', (i % 8)::int4, convert_to('k' || i, 'UTF8'), '\\x00'::bytea, 0, 0, 'queued', 0
         FROM generate_series(1, 300000) AS i",
        &[],
    )
    .await
    .unwrap();
    app.batch_execute("ANALYZE rmq_messages").await.unwrap();
    // A page from the middle: the rows after it, in id order, by index.
    let (after, limit) = (150_000i64, 1_000i64);
    let plan = explain(
        &app,
        rmq_store::sql::RECOVER_PAGE,
        &[
            (&"t", Type::TEXT),
            (&after, Type::INT8),
            (&limit, Type::INT8),
        ],
    )
    .await;
    let read = buffers(&plan);
    eprintln!("a recovery page read {read} buffers of 300000 queued rows");
    assert!(
        nodes(&plan).iter().all(|n| n["Node Type"] != "Sort"),
        "no sort of every queued row: {plan:#}"
    );
    assert!(read < 300, "{read} buffers read: {plan:#}");
}
