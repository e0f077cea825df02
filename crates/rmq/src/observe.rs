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
//!   `rmq_wakeups_total` (notices received).
//! - `rmq_redis_call_duration_seconds` (`script`: send, pop, settle, ...):
//!   one round trip to Redis, a pipeline of calls of that script (the one
//!   metric labelled by script rather than topic: a round trip may serve
//!   several topics; recorded in `conn`, which sits below this module).
//!
//! A program that runs its handlers itself (on [`Deliveries`](crate::Deliveries))
//! records them with [`handled`], as `rmq consume` does.

use metrics::{counter, histogram};

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

pub(crate) fn lease_extended(topic: &str) {
    counter!("rmq_lease_extensions_total", "topic" => topic.to_string()).increment(1);
}

pub(crate) fn fenced(topic: &str) {
    counter!("rmq_fenced_total", "topic" => topic.to_string()).increment(1);
}

pub(crate) fn woken(topic: &str) {
    counter!("rmq_wakeups_total", "topic" => topic.to_string()).increment(1);
}
