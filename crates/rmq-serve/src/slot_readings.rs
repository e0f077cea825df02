//! The last whole reading (every slot) of each large topic, shared by all
//! who read it: the dashboard's sampler, `/metrics`, the topic list, a
//! topic's stats and its slots. Reading a topic costs one script call per
//! slot, so a 65,536-slot topic read anew by each of those (and by each
//! of their concurrent requests, before single flight) cost Redis and the
//! server in proportion. A topic of more than [`LIVE_SLOTS`] slots is
//! answered from a reading at most `Options::large_topic_reuse` old, and
//! one reading of it runs at a time; the answer's `server_ms` says when
//! it was read. Smaller topics are always read anew: cheap, and an answer
//! right after a send shows the send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmq::TopicStats;

/// Topics of at most this many slots are read anew for every answer.
pub(crate) const LIVE_SLOTS: u32 = 1_024;

/// The last reading of each large topic, and the lock that lets one
/// reading of a large topic run at a time.
#[derive(Default)]
pub(crate) struct SlotReadings {
    last: Mutex<HashMap<String, (Instant, Arc<TopicStats>)>>,
    refresh: tokio::sync::Mutex<()>,
}

impl SlotReadings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<TopicStats>)>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `topic`'s last reading if it began at or after `since` and fits the
    /// topic's slot count (a topic deleted and defined again may have
    /// another).
    fn since(&self, topic: &rmq::Topic, since: Instant) -> Option<Arc<TopicStats>> {
        let slots = topic.spec().slots as usize;
        self.lock()
            .get(&topic.spec().name)
            .filter(|(at, s)| *at >= since && s.slots.len() == slots)
            .map(|(_, s)| s.clone())
    }

    /// `topic`'s stats: read anew for a small topic; for a large one, the
    /// last reading if it is at most `reuse` old, else a new one (made
    /// once for everyone waiting on it).
    pub(crate) async fn read(
        &self,
        topic: &rmq::Topic,
        reuse: Duration,
    ) -> rmq::Result<Arc<TopicStats>> {
        if topic.spec().slots <= LIVE_SLOTS {
            return Ok(Arc::new(topic.stats().await?));
        }
        let arrived = Instant::now();
        let fresh_since = arrived.checked_sub(reuse).unwrap_or(arrived);
        if let Some(s) = self.since(topic, fresh_since) {
            return Ok(s);
        }
        let _one_at_a_time = self.refresh.lock().await;
        // The reading that ran while this one waited may do.
        if let Some(s) = self.since(topic, fresh_since) {
            return Ok(s);
        }
        let started = Instant::now();
        let s = Arc::new(topic.stats().await?);
        self.lock()
            .insert(topic.spec().name.clone(), (started, s.clone()));
        Ok(s)
    }

    /// Forgets `topic`'s reading (its settings or state changed).
    pub(crate) fn forget(&self, topic: &str) {
        self.lock().remove(topic);
    }

    /// Forgets the topics not in `names` (deleted).
    pub(crate) fn keep_only(&self, names: &[String]) {
        self.lock().retain(|n, _| names.contains(n));
    }
}
