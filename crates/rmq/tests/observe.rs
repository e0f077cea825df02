//! The metrics the library records through the `metrics` facade, read back
//! with a debugging recorder: deliveries, lateness, handler durations and
//! outcomes, wake-ups, lease extensions. (Its own test process: the
//! recorder is global.)
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use rmq::{Message, Outcome, TopicKind, TopicSpec};

#[tokio::test]
async fn a_consumer_records_deliveries_lateness_handlers_and_wakeups() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();

    let (_b, _c, topic) = setup_with(
        TopicSpec::new("obs", TopicKind::FixedTime)
            .slots(4)
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    let batch: Vec<Message> = (0..20)
        .map(|i| Message::new("v").key(format!("k{i}")).delay(Duration::ZERO))
        .collect();
    let seen = Arc::new(AtomicU32::new(0));
    let stop = rmq::CancellationToken::new();
    let run = {
        let (seen, stop) = (seen.clone(), stop.clone());
        let topic = topic.clone();
        tokio::spawn(async move {
            topic
                .consumer()
                .concurrency(4)
                .run(stop.clone(), move |m| {
                    let seen = seen.clone();
                    async move {
                        // Every even key fails once, then succeeds.
                        let n: u32 = String::from_utf8_lossy(&m.key[1..]).parse().unwrap();
                        seen.fetch_add(1, Ordering::SeqCst);
                        if n % 2 == 0 && m.attempt == 1 {
                            Outcome::retry("again")
                        } else {
                            Outcome::Ack
                        }
                    }
                })
                .await
        })
    };
    // Sent once the consumer listens: the notices wake it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    topic.send_batch(&batch).await.unwrap();
    for _ in 0..600 {
        if seen.load(Ordering::SeqCst) >= 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    let report = run.await.unwrap().unwrap();
    assert_eq!((report.acked, report.retried), (20, 10));

    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut histograms: HashMap<String, usize> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                counters.insert(name, n);
            }
            (MetricKind::Histogram, DebugValue::Histogram(v)) => {
                histograms.insert(name, v.len());
            }
            _ => {}
        }
    }
    assert_eq!(
        counters["rmq_deliveries_total{topic=obs}"], 30,
        "{counters:?}"
    );
    assert_eq!(
        counters["rmq_handler_outcomes_total{topic=obs,outcome=acked}"],
        20
    );
    assert_eq!(
        counters["rmq_handler_outcomes_total{topic=obs,outcome=retried}"],
        10
    );
    assert_eq!(histograms["rmq_delivery_lateness_seconds{topic=obs}"], 30);
    assert_eq!(histograms["rmq_handler_duration_seconds{topic=obs}"], 30);
    assert!(
        counters
            .get("rmq_wakeups_total{topic=obs}")
            .copied()
            .unwrap_or(0)
            > 0,
        "{counters:?}"
    );
    // Every round trip to Redis is timed, by script (ends that take their
    // slot's next message settle with settle_take).
    let timed = |script: &str| {
        histograms
            .get(&format!(
                "rmq_redis_call_duration_seconds{{script={script}}}"
            ))
            .copied()
            .unwrap_or(0)
    };
    for script in ["send", "pop"] {
        assert!(
            timed(script) > 0,
            "no {script} round trips timed: {histograms:?}"
        );
    }
    assert!(
        timed("settle") + timed("settle_take") > 0,
        "no settle round trips timed: {histograms:?}"
    );
}
