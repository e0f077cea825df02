//! Recoveries of topics Redis lost, each run beside the relay's rounds on
//! a connection of its own. A recovery looks up every queued row of its
//! topic in Redis, one lookup a row (200,000 rows take minutes); run inside
//! the topic check, it held back every other topic's rows that long.
//!
//! The relay clears a topic's mark in the store (`rmq_topics.needs_recovery`)
//! when it collects the finished recovery, unless Redis lost the topic again
//! while it ran: then the mark stays and the topic is recovered once more. A
//! recovery that fails is tried again at the next check. A relay that stops
//! waits briefly for its running recoveries, then drops them: their marks
//! stay, and the next relay's check does them again (a second recovery of
//! the same rows finds what the first put back and leaves it alone).

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::{Id, JoinSet};

use crate::error::Result;
use crate::recover::{self, Recovered};
use crate::store::connect;
use crate::topics::StoredTopic;

/// A finished recovery: its topic, whether Redis lost the topic again
/// while it ran, and what it did (or why it failed).
pub(super) struct Finished {
    pub(super) topic: String,
    pub(super) lost_again: bool,
    pub(super) outcome: Result<Recovered>,
}

/// The recoveries a relay runs.
pub(super) struct Recoveries {
    conninfo: String,
    application_name: String,
    redis: rmq::Client,
    running: JoinSet<Result<Recovered>>,
    /// Each running task's topic.
    tasks: HashMap<Id, String>,
    /// Topics being recovered, and whether Redis lost each again since.
    topics: HashMap<String, bool>,
}

impl Recoveries {
    pub(super) fn new(conninfo: &str, application_name: String, redis: rmq::Client) -> Self {
        Recoveries {
            conninfo: conninfo.to_string(),
            application_name,
            redis,
            running: JoinSet::new(),
            tasks: HashMap::new(),
            topics: HashMap::new(),
        }
    }

    /// Starts recovering `stored` unless it is being recovered already;
    /// `vanished`: Redis lost the topic just now (a running recovery of it
    /// must then be followed by another).
    pub(super) fn start(&mut self, name: &str, stored: &StoredTopic, vanished: bool) {
        if let Some(lost_again) = self.topics.get_mut(name) {
            *lost_again |= vanished;
            return;
        }
        let conninfo = self.conninfo.clone();
        let application_name = self.application_name.clone();
        let redis = self.redis.clone();
        let stored = stored.clone();
        let task = self.running.spawn(async move {
            let pg = connect(&conninfo, &application_name).await?;
            recover::topic(&pg, &redis, &stored).await
        });
        self.tasks.insert(task.id(), name.to_string());
        self.topics.insert(name.to_string(), false);
    }

    /// The recoveries that have finished since the last call.
    pub(super) fn finished(&mut self) -> Vec<Finished> {
        let mut done = Vec::new();
        while let Some(joined) = self.running.try_join_next_with_id() {
            done.extend(self.finish(joined));
        }
        done
    }

    /// Waits up to `wait` for the running recoveries, then drops the rest
    /// (their marks stay in the store); returns those that finished.
    pub(super) async fn end(&mut self, wait: Duration) -> Vec<Finished> {
        let mut done = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Some(joined)) =
            tokio::time::timeout_at(deadline, self.running.join_next_with_id()).await
        {
            done.extend(self.finish(joined));
        }
        for topic in self.topics.keys() {
            tracing::warn!(topic = %topic,
                "relay stopping: recovery cut short; the topic stays marked and the next relay recovers it");
        }
        self.running.abort_all();
        self.tasks.clear();
        self.topics.clear();
        done
    }

    fn finish(
        &mut self,
        joined: std::result::Result<(Id, Result<Recovered>), tokio::task::JoinError>,
    ) -> Option<Finished> {
        let (id, outcome) = match joined {
            Ok((id, outcome)) => (id, outcome),
            Err(e) => {
                // Not retried here but at the next check: the mark stays.
                let id = e.id();
                tracing::error!(topic = ?self.tasks.get(&id), error = %e, "a recovery task ended abnormally");
                let topic = self.tasks.remove(&id)?;
                self.topics.remove(&topic);
                return None;
            }
        };
        let topic = self.tasks.remove(&id)?;
        let lost_again = self.topics.remove(&topic).unwrap_or(false);
        Some(Finished {
            topic,
            lost_again,
            outcome,
        })
    }
}
