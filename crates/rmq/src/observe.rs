//! What the library records through the `metrics` facade, so that an
//! application exports it with the recorder of its choice (Prometheus,
//! StatsD, ...; nothing is recorded without one, at the cost of a branch).
//! Every metric but the Redis round trip has a `topic` label.
//!
//! - `rmq_deliveries_total`: deliveries handed to this process.
//! - `rmq_delivery_lateness_seconds`: time-based topics, how long after its
//!   due time (server clock) a message was taken: the queue's latency as a
//!   consumer sees it, per message.
//! - `rmq_handler_duration_seconds` and `rmq_handler_outcomes_total`
//!   (`outcome`: acked, retried, dead, released, cancelled, failed): the
//!   handlers `ConsumerBuilder::run` runs.
//! - `rmq_lease_extensions_total`, `rmq_fenced_total` (serial mode: calls
//!   refused because this consumer no longer holds the slot),
//!   `rmq_wakeups_total` (notices of new heads or of freed in-flight
//!   permits, and takes of marks, that woke the consumer), `rmq_marks_handed_back_total` (marks of work a consumer could
//!   not serve soon, given back to the others), `rmq_pops_total` (`outcome`:
//!   taken or empty; the fetch loop's pop calls, one per slot, so that
//!   empty pops per delivery show how often consumers wake for nothing),
//!   `rmq_takes_on_settle_total` (`outcome`: taken or empty; takes made
//!   inside a settle call, by deliveries that ended and handed on their
//!   room: no round trip of their own).
//! - `rmq_redis_call_duration_seconds` (`script`: send, pop, settle, ...):
//!   one round trip to Redis, a pipeline of calls of that script (the one
//!   metric labelled by script rather than topic: a round trip may serve
//!   several topics; recorded in `conn`, which sits below this module).
//!
//! **Tracing.** Spans carry OpenTelemetry's messaging attribute names,
//! so a `tracing-opentelemetry` layer exports them as messaging spans
//! (`otel.name` and `otel.kind` set the exported name and kind):
//!
//! | span | `messaging.operation.type` | `otel.kind` | other fields |
//! |---|---|---|---|
//! | `rmq.send` | `send` | producer | `messaging.batch.message_count` |
//! | `rmq.receive` | `receive` | consumer | `messaging.batch.message_count` (recorded after the pop) |
//! | `rmq.settle` | `settle` | consumer | `messaging.batch.message_count` |
//! | `rmq.process` | `process` | consumer | `messaging.rmq.message.key`, `messaging.rmq.message.attempt`, `messaging.destination.partition.id` (the slot) |
//!
//! Every span has `messaging.system = "rmq"` and
//! `messaging.destination.name` (the topic). All are at INFO level; with
//! no subscriber, or one that filters them out, a span costs one check.
//!
//! A program that runs its handlers itself (on [`Deliveries`](crate::Deliveries))
//! records them with [`handled`], as `rmq consume` does.

use metrics::{counter, histogram};
use tracing::{field, info_span, Span};

use crate::message::Received;

pub(crate) fn delivered(m: &Received) {
    counter!("rmq_deliveries_total", "topic" => m.topic.clone()).increment(1);
    if let Some(due) = m.due_ms {
        let late_ms = (m.taken_ms - due).max(0);
        histogram!("rmq_delivery_lateness_seconds", "topic" => m.topic.clone())
            .record(late_ms as f64 / 1000.0);
    }
}

/// Records one handler run of `topic` that ended with `outcome` (acked,
/// retried, dead, released, cancelled, failed) after `seconds`.
pub fn handled(topic: &str, outcome: &'static str, seconds: f64) {
    histogram!("rmq_handler_duration_seconds", "topic" => topic.to_string()).record(seconds);
    counter!("rmq_handler_outcomes_total", "topic" => topic.to_string(), "outcome" => outcome)
        .increment(1);
}

/// A pool's current limit for a topic (`rmq_pool_limit`).
pub(crate) fn pool_limit(topic: &str, limit: usize) {
    metrics::gauge!("rmq_pool_limit", "topic" => topic.to_string()).set(limit as f64);
}

pub(crate) fn lease_extended(topic: &str) {
    counter!("rmq_lease_extensions_total", "topic" => topic.to_string()).increment(1);
}

pub(crate) fn fenced(topic: &str) {
    counter!("rmq_fenced_total", "topic" => topic.to_string()).increment(1);
}

pub(crate) fn popped(topic: &str, taken: bool) {
    let outcome = if taken { "taken" } else { "empty" };
    counter!("rmq_pops_total", "topic" => topic.to_string(), "outcome" => outcome).increment(1);
}

pub(crate) fn taken_on_settle(topic: &str, taken: bool) {
    let outcome = if taken { "taken" } else { "empty" };
    counter!("rmq_takes_on_settle_total", "topic" => topic.to_string(), "outcome" => outcome)
        .increment(1);
}

pub(crate) fn marks_handed_back(topic: &str, n: usize) {
    counter!("rmq_marks_handed_back_total", "topic" => topic.to_string()).increment(n as u64);
}

pub(crate) fn woken(topic: &str) {
    counter!("rmq_wakeups_total", "topic" => topic.to_string()).increment(1);
}

/// The span of one send call (a batch of `count` messages).
pub(crate) fn send_span(topic: &str, count: usize) -> Span {
    info_span!(
        "rmq.send",
        "otel.name" = format!("send {topic}"),
        "otel.kind" = "producer",
        "messaging.system" = "rmq",
        "messaging.destination.name" = topic,
        "messaging.operation.type" = "send",
        "messaging.batch.message_count" = count,
    )
}

/// The span of one pop round; `messaging.batch.message_count` is recorded
/// once the replies are read.
pub(crate) fn receive_span(topic: &str) -> Span {
    info_span!(
        "rmq.receive",
        "otel.name" = format!("receive {topic}"),
        "otel.kind" = "consumer",
        "messaging.system" = "rmq",
        "messaging.destination.name" = topic,
        "messaging.operation.type" = "receive",
        "messaging.batch.message_count" = field::Empty,
    )
}

/// The span of one settle round trip (`count` acks, nacks and the like).
pub(crate) fn settle_span(topic: &str, count: usize) -> Span {
    info_span!(
        "rmq.settle",
        "otel.name" = format!("settle {topic}"),
        "otel.kind" = "consumer",
        "messaging.system" = "rmq",
        "messaging.destination.name" = topic,
        "messaging.operation.type" = "settle",
        "messaging.batch.message_count" = count,
    )
}

/// The span of one handler run, from the delivery to its settle.
pub(crate) fn process_span(m: &Received) -> Span {
    info_span!(
        "rmq.process",
        "otel.name" = format!("process {}", m.topic),
        "otel.kind" = "consumer",
        "messaging.system" = "rmq",
        "messaging.destination.name" = &*m.topic,
        "messaging.operation.type" = "process",
        "messaging.destination.partition.id" = m.slot,
        "messaging.rmq.message.key" = %String::from_utf8_lossy(&m.key),
        "messaging.rmq.message.attempt" = m.attempt,
    )
}
