//! The relay's look at its topics, every `poll`: which definitions the
//! store holds and can use, whether Redis still has each topic (defining
//! and recovering one it lost), and whether Redis's settings changed since
//! the store's copy was written (`rmq topic update`): the store follows
//! them, or a recovery after Redis lost data would define the topic with
//! its old settings again.

use std::collections::HashSet;

use rmq::ErrorKind;

use super::Relay;
use crate::error::{Result, StoreError};
use crate::topics::{self, StoredTopic};

impl Relay {
    /// Loads the store's topics; defines and recovers any that Redis lost.
    /// The need is written in the store (`rmq_topics.needs_recovery`)
    /// before the topic is defined again, so a recovery that fails, or
    /// whose relay dies, is done at a later check, by this relay or
    /// another. A recovery runs beside the rounds ([`super::recovering`]):
    /// the other topics' rows keep moving meanwhile. A definition that cannot be read is reported (once per
    /// change) and its topic left out: its rows stay stored.
    pub(super) async fn check_topics(&mut self) -> Result<()> {
        self.collect_recoveries().await?;
        let mut seen = HashSet::new();
        for (name, read) in topics::load_all(&self.pg).await? {
            seen.insert(name.clone());
            let stored = match read {
                Ok(t) => {
                    if self.unusable.remove(&name).is_some() {
                        tracing::info!(relay = %self.options.name, topic = %name,
                            "the topic's definition in the store is readable again");
                    }
                    t
                }
                Err(e) => {
                    let why = e.to_string();
                    if self.unusable.get(&name) != Some(&why) {
                        tracing::warn!(relay = %self.options.name, topic = %name, error = %why,
                            "topic skipped: its definition in the store cannot be used; its rows stay stored");
                    }
                    self.unusable.insert(name.clone(), why);
                    self.topics.remove(&name);
                    continue;
                }
            };
            let mut recover_it = stored.needs_recovery;
            let mut vanished = false;
            let (stored, topic) = match self.redis.topic(&name).await {
                Ok(t) => (self.follow(stored, &t).await?, t),
                Err(e) if e.kind() == ErrorKind::UnknownTopic => {
                    recover_it = true;
                    vanished = true;
                    // Said in the store first: a relay that dies before the
                    // recovery is done leaves it to the next one.
                    topics::needs_recovery(&self.pg, &name, true).await?;
                    let t = self.redis.define_topic(stored.spec().clone()).await?;
                    (stored, t)
                }
                Err(e) => return Err(e.into()),
            };
            self.topics.insert(name.clone(), (stored.clone(), topic));
            if recover_it {
                self.recoveries.start(&name, &stored, vanished);
            }
        }
        self.topics.retain(|n, _| seen.contains(n));
        self.unusable.retain(|n, _| seen.contains(n));
        Ok(())
    }

    /// The store's copy of a topic Redis has, made the same as Redis's
    /// definition if its settings changed there. Kind and slot count never
    /// change; a topic deleted and defined again in Redis with others is
    /// reported (once) and the store's copy kept.
    async fn follow(&mut self, stored: StoredTopic, topic: &rmq::Topic) -> Result<StoredTopic> {
        let current = topic.spec();
        if *current == *stored.spec() {
            self.diverged.remove(stored.name());
            return Ok(stored);
        }
        match topics::define(&self.pg, &current).await {
            Ok(mut updated) => {
                tracing::info!(relay = %self.options.name, topic = %current.name,
                    "the topic's settings changed in Redis: the store's copy follows");
                updated.needs_recovery = stored.needs_recovery;
                Ok(updated)
            }
            Err(e @ (StoreError::TopicConflict(_) | StoreError::Refused(_))) => {
                if self.diverged.insert(current.name.clone()) {
                    tracing::warn!(relay = %self.options.name, topic = %current.name, error = %e,
                        "Redis defines the topic unlike the store; the store's copy is kept");
                }
                Ok(stored)
            }
            Err(e) => Err(e),
        }
    }
}
