//! A consumer (or pool) given `max_deliveries(n)` takes exactly n
//! deliveries over its life and ends: none taken beyond what it hands
//! out, whatever its concurrency and batch, so a run that wants n
//! messages moves no other (the topic's `delivered` counter says so).
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use rmq::{Message, Outcome, Pool, TopicKind};

#[tokio::test]
async fn a_stream_takes_exactly_its_budget_and_ends() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 4).await;
    let msgs: Vec<_> = (0..40).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    for (budget, concurrency) in [(5u64, 4usize), (7, 16), (1, 64)] {
        let stop = rmq::CancellationToken::new();
        let mut st = topic
            .consumer()
            .concurrency(concurrency)
            .batch(concurrency)
            .max_deliveries(budget)
            .stream(stop.clone());
        let before = topic.stats().await.unwrap().total.delivered;
        let mut got = 0;
        while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(10), st.next()).await {
            got += 1;
            d.ack().await.unwrap();
        }
        assert_eq!(got, budget, "the stream ends after its budget");
        let delivered = topic.stats().await.unwrap().total.delivered - before;
        assert_eq!(
            delivered, budget,
            "nothing taken beyond it (c={concurrency})"
        );
    }
}

#[tokio::test]
async fn run_handles_exactly_its_budget() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 2).await;
    let msgs: Vec<_> = (0..30).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&msgs).await.unwrap();
    let report = topic
        .consumer()
        .concurrency(8)
        .max_deliveries(12)
        .run(rmq::CancellationToken::new(), |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Outcome::Ack
        })
        .await
        .unwrap();
    let t = topic.stats().await.unwrap().total;
    assert_eq!(
        (t.delivered, t.acked, t.pending),
        (12, 12, 18),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_pools_budget_spans_its_topics() {
    let (s, client, a) = setup(TopicKind::Priority, 2).await;
    let b = client
        .define_topic(rmq::TopicSpec::new("u", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    for t in [&a, &b] {
        let msgs: Vec<_> = (0..20).map(|i| Message::new(format!("m{i}"))).collect();
        t.send_batch(&msgs).await.unwrap();
    }
    let mut st = Pool::new([a.clone(), b.clone()])
        .concurrency(16)
        .max_deliveries(9)
        .stream(rmq::CancellationToken::new());
    let mut got = 0;
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_secs(10), st.next()).await {
        got += 1;
        d.ack().await.unwrap();
    }
    let delivered =
        a.stats().await.unwrap().total.delivered + b.stats().await.unwrap().total.delivered;
    assert_eq!((got, delivered), (9, 9));
    drop(s);
}
