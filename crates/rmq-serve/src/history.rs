//! The server's own memory of the last hour: every `Options::sample_every`
//! it reads each topic's totals once and keeps them in a ring per topic.
//! The dashboard's overview and charts read only this memory, so opening
//! the page costs Redis nothing, whatever the number of topics or viewers;
//! the Redis cost is one stats reading per topic per interval.
//!
//! An action that changes the topic list or a topic's state (create,
//! delete, pause, resume) asks for a new reading at once.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde::Serialize;
use tokio::sync::Notify;

use crate::slot_readings::SlotReadings;

/// Samples kept per topic at most (an hour at one a second).
const MAX_SAMPLES: u128 = 3_600;

/// Topics read at once in one sampling round.
const CONCURRENT_TOPICS: usize = 16;

/// One topic at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Point {
    /// Server time of the reading (Unix ms).
    pub(crate) at_ms: i64,
    pub(crate) due_now: u64,
    pub(crate) scheduled: u64,
    pub(crate) retry_waiting: u64,
    pub(crate) in_flight: u64,
    pub(crate) parked: u64,
    pub(crate) dead: u64,
    pub(crate) sent: u64,
    pub(crate) acked: u64,
    pub(crate) retried: u64,
    pub(crate) dead_lettered: u64,
    /// How long its earliest due message has waited (time-based topics).
    pub(crate) oldest_due_age_ms: u64,
}

/// What the overview shows of a topic.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TopicRow {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) slots: u32,
    pub(crate) paused: bool,
    pub(crate) last: Point,
    /// Sends and acks per second over the last minute of readings.
    pub(crate) send_rate: f64,
    pub(crate) ack_rate: f64,
}

#[derive(Default)]
struct Rings {
    rows: BTreeMap<String, (TopicRow, VecDeque<Point>)>,
    /// The last round's error, if it failed (shown on the overview).
    error: Option<String>,
    /// Server time of the last complete round.
    at_ms: i64,
}

/// The rings of every topic, and the bell that asks for a reading now.
pub(crate) struct History {
    rings: Mutex<Rings>,
    pub(crate) every: Duration,
    keep: usize,
    now: Notify,
}

impl History {
    pub(crate) fn new(every: Duration, span: Duration) -> History {
        let every = every.max(Duration::from_millis(100));
        History {
            rings: Mutex::default(),
            every,
            keep: (span.as_millis() / every.as_millis()).clamp(2, MAX_SAMPLES) as usize,
            now: Notify::new(),
        }
    }

    /// Ask for a new reading now (the topic list or a state changed).
    pub(crate) fn poke(&self) {
        self.now.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        self.rings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every topic's row, by name; the time of the reading; the last error.
    pub(crate) fn overview(&self) -> (Vec<TopicRow>, i64, Option<String>) {
        let r = self.lock();
        let rows = r.rows.values().map(|(row, _)| row.clone()).collect();
        (rows, r.at_ms, r.error.clone())
    }

    /// One topic's readings, oldest first.
    pub(crate) fn points(&self, topic: &str) -> Option<Vec<Point>> {
        let r = self.lock();
        r.rows
            .get(topic)
            .map(|(_, ring)| ring.iter().copied().collect())
    }

    /// Reads every topic and records the readings (a large topic's
    /// reading is shared with the server's other readers, `readings`).
    async fn sample(
        &self,
        client: &rmq::Client,
        readings: &SlotReadings,
        reuse: Duration,
    ) -> rmq::Result<()> {
        let topics = client.open_topics().await?;
        let names: Vec<String> = topics.iter().map(|t| t.spec().name.clone()).collect();
        readings.keep_only(&names);
        let read = stream::iter(topics)
            .map(|topic| async move {
                let spec = topic.spec();
                let stats = readings.read(&topic, reuse).await?;
                let t = stats.total;
                let mut oldest_due_age_ms = 0;
                if spec.kind.is_time_based() && t.due_now > 0 {
                    if let Some(due) = topic.peek(1).await?.first().and_then(|p| p.due_ms) {
                        oldest_due_age_ms = u64::try_from(stats.server_ms - due).unwrap_or(0);
                    }
                }
                let point = Point {
                    at_ms: stats.server_ms,
                    due_now: t.due_now,
                    scheduled: t.scheduled,
                    retry_waiting: t.retry_waiting,
                    in_flight: t.in_flight,
                    parked: t.behind_in_flight,
                    dead: t.dead,
                    sent: t.sent,
                    acked: t.acked,
                    retried: t.retried,
                    dead_lettered: t.dead_lettered,
                    oldest_due_age_ms,
                };
                let paused = t.paused_slots > 0 && t.paused_slots == u64::from(spec.slots);
                Ok::<_, rmq::Error>((spec, paused, point))
            })
            .buffer_unordered(CONCURRENT_TOPICS)
            .collect::<Vec<_>>()
            .await;
        let mut r = self.lock();
        let mut seen = BTreeMap::new();
        let mut at_ms = 0;
        for one in read {
            // A topic deleted between the listing and its reading is skipped.
            let (spec, paused, point) = match one {
                Ok(v) => v,
                Err(e) if e.kind() == rmq::ErrorKind::UnknownTopic => continue,
                Err(e) => return Err(e),
            };
            at_ms = at_ms.max(point.at_ms);
            let name = spec.name.clone();
            let (row, ring) = r.rows.remove(&name).unwrap_or_else(|| {
                let row = TopicRow {
                    name: name.clone(),
                    kind: spec.kind.as_str(),
                    slots: spec.slots,
                    paused,
                    last: point,
                    send_rate: 0.0,
                    ack_rate: 0.0,
                };
                (row, VecDeque::new())
            });
            let mut ring = ring;
            ring.push_back(point);
            while ring.len() > self.keep {
                ring.pop_front();
            }
            let minute_ago = point.at_ms - 60_000;
            let base = ring
                .iter()
                .find(|p| p.at_ms >= minute_ago)
                .copied()
                .unwrap_or(point);
            let secs = (point.at_ms - base.at_ms) as f64 / 1000.0;
            let rate = |now: u64, then: u64| match secs > 0.0 {
                true => now.saturating_sub(then) as f64 / secs,
                false => 0.0,
            };
            let row = TopicRow {
                kind: spec.kind.as_str(),
                slots: spec.slots,
                paused,
                last: point,
                send_rate: rate(point.sent, base.sent),
                ack_rate: rate(point.acked, base.acked),
                ..row
            };
            seen.insert(name, (row, ring));
        }
        // Topics that are gone are forgotten.
        r.rows = seen;
        r.at_ms = at_ms;
        r.error = None;
        Ok(())
    }

    /// Samples until the server stops (the task is dropped with it).
    pub(crate) async fn run(
        self: Arc<Self>,
        client: rmq::Client,
        readings: Arc<SlotReadings>,
        reuse: Duration,
    ) {
        loop {
            if let Err(e) = self.sample(&client, &readings, reuse).await {
                tracing::warn!("sampling the topics failed: {e}");
                self.lock().error = Some(e.to_string());
            }
            tokio::select! {
                () = tokio::time::sleep(self.every) => {}
                () = self.now.notified() => {}
            }
        }
    }
}
