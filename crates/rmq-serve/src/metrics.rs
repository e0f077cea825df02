//! `/metrics`: every topic's depth by state and its counters, in the
//! Prometheus text format (names by its conventions, a `topic` label).
//!
//! A scrape reads every slot of every topic (one script call per slot,
//! pipelined), so readings are reused for `Options::scrape_cache`: a
//! dozen scrapers or a short scrape interval cost no more Redis work than
//! one. Nothing here lists keys; topics come from the registry.
//!
//! One reading at a time (single flight): scrapes that arrive while a
//! reading is under way wait for it and share it, instead of each making
//! its own (16 scrapes just after the cache expired used to make ~19
//! full readings).

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::error::ApiResult;
use crate::AppState;

/// The last scrape's text and when its reading started; the refresh
/// lock lets one reading run at a time.
#[derive(Default)]
pub(crate) struct Cache {
    last: Mutex<Option<(Instant, Arc<String>)>>,
    refresh: tokio::sync::Mutex<()>,
}

impl Cache {
    /// The last text if its reading started at or after `since`.
    fn since(&self, since: Instant) -> Option<Arc<String>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|(at, _)| *at >= since)
            .map(|(_, text)| text.clone())
    }
}

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) async fn scrape(State(st): State<Arc<AppState>>) -> ApiResult<impl IntoResponse> {
    let arrived = Instant::now();
    let fresh_since = arrived.checked_sub(st.options.scrape_cache);
    let text = match fresh_since.and_then(|t| st.scrape.since(t)) {
        Some(t) => t,
        None => {
            let _one_at_a_time = st.scrape.refresh.lock().await;
            // A reading that started after this scrape arrived (it ran
            // while this one waited) is as fresh as a new one.
            let fresh = fresh_since.map_or(arrived, |t| t.min(arrived));
            match st.scrape.since(fresh) {
                Some(t) => t,
                None => {
                    let started = Instant::now();
                    let t = Arc::new(render(&st).await?);
                    *st.scrape.last.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((started, t.clone()));
                    t
                }
            }
        }
    };
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], (*text).clone()))
}

/// One metric family: its name, type, help, and one sample per topic.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, u64)>,
}

/// Label value escaping of the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

async fn render(st: &AppState) -> ApiResult<String> {
    let client = &st.client;
    let mut families: Vec<Family> = [
        ("rmq_messages", "gauge", "Messages of a topic by state."),
        ("rmq_topic_paused", "gauge", "1 when every slot of the topic is paused, else 0."),
        ("rmq_topic_slots", "gauge", "The topic's slot count."),
        ("rmq_oldest_due_age_seconds", "gauge", "How long the earliest due message of a time-based topic has been due (0 when none is): the queue's latency."),
        ("rmq_sent_total", "counter", "Messages accepted by send."),
        ("rmq_merged_total", "counter", "Sends merged into a waiting message of the same key."),
        ("rmq_delivered_total", "counter", "Deliveries (phase one)."),
        ("rmq_acked_total", "counter", "Deliveries acknowledged."),
        ("rmq_retried_total", "counter", "Failed deliveries given a retry, lease expiries included."),
        ("rmq_dead_lettered_total", "counter", "Messages moved to the dead letters."),
        ("rmq_dead_dropped_total", "counter", "Dead letters dropped by the count or age limit."),
        ("rmq_cancelled_total", "counter", "Messages cancelled, waiting or in flight."),
        ("rmq_consumers", "gauge", "Consumer processes listening to the topic's notices."),
        ("rmq_serial_members", "gauge", "Live members of a serial consumer group."),
        ("rmq_serial_owners", "gauge", "Members of a serial group that hold at least one slot's lease."),
        ("rmq_serial_unowned_slots", "gauge", "Slots of the topic whose serial lease nobody holds (all of them when no serial group runs)."),
        ("rmq_topic_rate_limit", "gauge", "The topic's global rate limit in deliveries per second (0: none)."),
        ("rmq_topic_max_in_flight", "gauge", "The topic's global in-flight cap (0: none)."),
        ("rmq_topic_in_flight_permits", "gauge", "In-flight cap permits held now across all consumers of the topic (0 without a cap)."),
        ("rmq_topic_max_pending", "gauge", "The topic's bound: messages it may hold at once, waiting or in flight (0: not bounded)."),
        ("rmq_topic_bound_held", "gauge", "Messages counted against the topic's bound now (0 when not bounded)."),
    ]
    .into_iter()
    .map(|(name, kind, help)| Family { name, kind, help, samples: Vec::new() })
    .collect();
    let groups = client.serial_group_names().await?;
    for topic in client.open_topics().await? {
        let spec = topic.spec();
        // A topic deleted during the scrape is left out, not an error.
        let stats = match st
            .slot_readings
            .read(&topic, st.options.large_topic_reuse)
            .await
        {
            Ok(r) => r,
            Err(e) if e.kind() == rmq::ErrorKind::UnknownTopic => continue,
            Err(e) => return Err(e.into()),
        };
        let t = stats.total;
        let label = escape(&spec.name);
        let states = [
            ("due-now", t.due_now),
            ("scheduled", t.scheduled),
            ("retry-waiting", t.retry_waiting),
            ("in-flight", t.in_flight),
            ("parked", t.behind_in_flight),
            ("dead", t.dead),
        ];
        for (state, n) in states {
            families[0]
                .samples
                .push((format!("topic=\"{label}\",state=\"{state}\""), n));
        }
        let topic_label = format!("topic=\"{label}\"");
        let paused = u64::from(t.paused_slots > 0 && t.paused_slots == u64::from(spec.slots));
        families[1].samples.push((topic_label.clone(), paused));
        families[2]
            .samples
            .push((topic_label.clone(), u64::from(spec.slots)));
        if spec.kind.is_time_based() {
            let oldest = match t.due_now {
                0 => Vec::new(),
                _ => topic.peek(1).await?,
            };
            let age_ms = oldest
                .first()
                .and_then(|p| p.due_ms)
                .map_or(0, |due| (stats.server_ms - due).max(0));
            families[3]
                .samples
                .push((topic_label.clone(), u64::try_from(age_ms).unwrap_or(0)));
        }
        let counters = [
            t.sent,
            t.merged,
            t.delivered,
            t.acked,
            t.retried,
            t.dead_lettered,
            t.dead_dropped,
            t.cancelled,
        ];
        for (f, n) in families[4..12].iter_mut().zip(counters) {
            f.samples.push((topic_label.clone(), n));
        }
        families[12]
            .samples
            .push((topic_label.clone(), topic.consumers().await?));
        let mine = groups.get(&spec.name).map_or(&[][..], Vec::as_slice);
        let serial = topic.serial_groups_with(&stats, mine).await?;
        for g in &serial.groups {
            let labels = format!("topic=\"{label}\",group=\"{}\"", escape(&g.name));
            let alive = g.members.iter().filter(|m| m.alive).count() as u64;
            let owners = g.members.iter().filter(|m| !m.slots.is_empty()).count() as u64;
            families[13].samples.push((labels.clone(), alive));
            families[14].samples.push((labels, owners));
        }
        let unowned = serial.leases.iter().filter(|l| l.owner.is_none()).count() as u64;
        families[15].samples.push((topic_label.clone(), unowned));
        families[16]
            .samples
            .push((topic_label.clone(), u64::from(spec.rate_per_sec)));
        families[17]
            .samples
            .push((topic_label.clone(), u64::from(spec.max_in_flight)));
        let held = if spec.max_in_flight > 0 {
            topic.in_flight_permits().await?
        } else {
            0
        };
        families[18].samples.push((topic_label.clone(), held));
        families[19]
            .samples
            .push((topic_label.clone(), spec.max_pending));
        let counted = if spec.max_pending > 0 {
            topic.bound_usage().await?.map_or(0, |(held, _)| held)
        } else {
            0
        };
        families[20].samples.push((topic_label.clone(), counted));
    }
    let mut out = String::new();
    for f in &families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, v) in &f.samples {
            if f.name == "rmq_oldest_due_age_seconds" {
                let _ = writeln!(out, "{}{{{labels}}} {:.3}", f.name, *v as f64 / 1000.0);
            } else {
                let _ = writeln!(out, "{}{{{labels}}} {v}", f.name);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
