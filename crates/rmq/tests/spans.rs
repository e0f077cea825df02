//! Tracing: send, pop, settle and every handler run are spans with
//! OpenTelemetry's messaging attribute names; what a handler logs belongs
//! to its message's span.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rmq::{CancellationToken, Message, Outcome, TopicKind};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as the layer saw it: its name and fields.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

/// An event's message and the name of the span it happened in.
type Event = (String, Option<&'static str>);

#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<BTreeMap<u64, Seen>>>,
    events: Arc<Mutex<Vec<Event>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name(),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.spans.lock().unwrap().insert(id.into_u64(), seen);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(seen) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut f = BTreeMap::new();
        event.record(&mut Fields(&mut f));
        let within = ctx.event_span(event).map(|s| s.name());
        let message = f.remove("message").unwrap_or_default();
        self.events.lock().unwrap().push((message, within));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_pop_settle_and_process_are_messaging_spans() {
    let recorder = Recorder::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(recorder.clone()))
        .unwrap();
    let (_b, _c, topic) = setup(TopicKind::Priority, 2).await;
    topic
        .send_batch(&[
            Message::new("a").key("k1").priority(1),
            Message::new("b").key("k2").priority(1),
        ])
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let run = {
        let (topic, stop) = (topic.clone(), stop.clone());
        tokio::spawn(async move {
            topic
                .consumer()
                .run(stop, |m| async move {
                    tracing::info!("handling {}", String::from_utf8_lossy(&m.payload));
                    Outcome::Ack
                })
                .await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while topic.stats().await.unwrap().total.acked < 2 {
        assert!(std::time::Instant::now() < deadline, "never acked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap().unwrap();

    let spans: Vec<Seen> = recorder.spans.lock().unwrap().values().cloned().collect();
    let of = |name: &str| -> Vec<&Seen> { spans.iter().filter(|s| s.name == name).collect() };
    for (name, op) in [
        ("rmq.send", "send"),
        ("rmq.receive", "receive"),
        ("rmq.settle", "settle"),
        ("rmq.process", "process"),
    ] {
        let all = of(name);
        assert!(!all.is_empty(), "no {name} span in {spans:?}");
        for s in all {
            assert_eq!(s.fields["messaging.system"], "rmq", "{s:?}");
            assert_eq!(s.fields["messaging.destination.name"], "t", "{s:?}");
            assert_eq!(s.fields["messaging.operation.type"], op, "{s:?}");
            assert_eq!(s.fields["otel.name"], format!("{op} t"), "{s:?}");
        }
    }
    assert_eq!(
        of("rmq.send")[0].fields["messaging.batch.message_count"],
        "2"
    );
    let received: u64 = of("rmq.receive")
        .iter()
        .filter_map(|s| s.fields.get("messaging.batch.message_count"))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(received, 2, "every pop round records what it took");
    let mut keys: Vec<(String, String)> = of("rmq.process")
        .iter()
        .map(|s| {
            assert_eq!(s.fields["messaging.rmq.message.attempt"], "1");
            assert!(s.fields.contains_key("messaging.destination.partition.id"));
            (
                s.fields["messaging.rmq.message.key"].clone(),
                s.fields["otel.kind"].clone(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("k1".into(), "consumer".into()),
            ("k2".into(), "consumer".into())
        ]
    );
    // The handler's own log lines belong to its message's span.
    let events = recorder.events.lock().unwrap().clone();
    for payload in ["a", "b"] {
        let line = format!("handling {payload}");
        assert!(
            events.contains(&(line.clone(), Some("rmq.process"))),
            "{line:?} not within rmq.process: {events:?}"
        );
    }
}
