//! A topic's life after its definition: its settings updated, or the
//! topic deleted with everything it holds.
//!
//! An update replaces the stored definition only if it is still the one
//! read (compare and set, retried), and refuses to change the kind or the
//! slot count, which decide where every message lives. Every handle reads
//! the definition again at most every 2 s while it is used (`topic/live.rs`),
//! so running consumers and producers follow within seconds.
//!
//! A delete refuses while the topic holds messages or has live consumers
//! (subscribers of its wake-up channels), unless forced. Then it pauses
//! every slot (no delivery starts), removes the definition (handles refuse
//! sends and consumers stop with `UnknownTopic` at their next reading),
//! waits out that reading interval, and unlinks the ten keys of every slot,
//! a bounded script call per slot (no `KEYS` scan).

use std::time::Duration;

use super::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys;
use crate::scripts::membership;
use crate::scripts::registry::{self, Replaced};
use crate::topic::{Topic, TopicSpec, LIVE_REFRESH};

/// Slots per pipeline when deleting.
const SLOTS_PER_ROUND: usize = 256;
/// Tries of an update's compare-and-set before giving up.
const CAS_TRIES: usize = 10;

/// What a delete removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// Messages the topic held (pending, retry-waiting, in flight, parked
    /// and dead letters) when its keys were removed.
    pub messages: u64,
    /// Its slot count.
    pub slots: u32,
}

impl Client {
    /// Changes a topic's settings: `change` gets the stored definition and
    /// returns the new one. The kind and the slot count cannot change (a
    /// clear [`ErrorKind::InvalidArgument`], nothing changed); the new
    /// definition is validated like a new one. Running consumers and
    /// producers follow within seconds. Bounding a topic that was not
    /// bounded waits for that (a few seconds) and counts its messages
    /// again, so that sends of handles that had not seen the bound yet are
    /// counted. Returns the topic as updated.
    pub async fn update_topic(
        &self,
        name: &str,
        change: impl Fn(TopicSpec) -> TopicSpec,
    ) -> Result<Topic> {
        let topic = self.topic(name).await?;
        let index = keys::topic_index(self.prefix());
        let mut old = (*topic.spec()).clone();
        let mut old_json = old.to_json();
        for _ in 0..CAS_TRIES {
            let new = change(old.clone());
            check_update(&old, &new)?;
            if new == old {
                return Ok(topic);
            }
            let (id, cmd) = registry::replace(&index, name, &old_json, &new.to_json());
            let reply = self.inner.ctx.redis.run_one(id, cmd).await?;
            match Replaced::parse(reply) {
                Some(Replaced::Done) => {
                    self.set_flow(&new, true).await?;
                    return self.topic(name).await;
                }
                Some(Replaced::Changed(current)) => {
                    old = serde_json::from_str(&current).map_err(|e| unreadable(name, e))?;
                    old_json = current;
                }
                Some(Replaced::Absent) => return Err(unknown(name)),
                None => return Err(unexpected()),
            }
        }
        Err(Error::new(
            ErrorKind::Redis,
            format!(
                "topic {name:?} kept changing under the update; nothing was changed, try again"
            ),
        ))
    }

    /// Deletes a topic: its definition, every key of every slot, and with
    /// them every message it holds. Refused with [`ErrorKind::TopicInUse`]
    /// while it holds messages or has live consumers, unless `force`.
    /// Consumers of a deleted topic stop with [`ErrorKind::UnknownTopic`]
    /// within seconds; so do sends through handles opened before.
    pub async fn delete_topic(&self, name: &str, force: bool) -> Result<Deleted> {
        let topic = self.topic(name).await?;
        if !force {
            refuse_if_in_use(&topic).await?;
        }
        topic.pause().await?;
        let index = keys::topic_index(self.prefix());
        let json = topic.spec().to_json();
        let (id, cmd) = registry::replace(&index, name, &json, "");
        match Replaced::parse(self.inner.ctx.redis.run_one(id, cmd).await?) {
            Some(Replaced::Done) => {}
            Some(Replaced::Absent) => return Err(unknown(name)),
            Some(Replaced::Changed(_)) => {
                return Err(Error::new(
                    ErrorKind::TopicInUse,
                    format!(
                        "topic {name:?} was updated while being deleted; it is paused now: \
                         delete it again (or resume it)"
                    ),
                ))
            }
            None => return Err(unexpected()),
        }
        // Every handle reads the definition at most this often: after it,
        // no send or pop of the old topic starts any more.
        tokio::time::sleep(LIVE_REFRESH + Duration::from_millis(500)).await;
        let slots = topic.spec.slots;
        let mut messages = 0;
        let all: Vec<u32> = (0..slots).collect();
        for chunk in all.chunks(SLOTS_PER_ROUND) {
            let keys: Vec<[String; 10]> = chunk.iter().map(|&s| topic.slot_keys(s)).collect();
            let calls = keys.iter().map(|k| registry::drop_slot(k)).collect();
            for r in self.inner.ctx.redis.run(calls).await? {
                messages += crate::value::as_int(&r?)
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0);
            }
        }
        // (Each slot's drop took the head index with it: see drop_slot.lua.)
        self.drop_groups(name).await?;
        let (id, cmd) = crate::scripts::rate::drop_bucket(&keys::rate_key(self.prefix(), name));
        self.inner.ctx.redis.run_one(id, cmd).await?;
        let (id, cmd) = crate::scripts::inflight::drop_cap(&keys::cap_keys(self.prefix(), name));
        self.inner.ctx.redis.run_one(id, cmd).await?;
        let (id, cmd) = crate::scripts::room::drop_room(&keys::room_keys(self.prefix(), name));
        self.inner.ctx.redis.run_one(id, cmd).await?;
        Ok(Deleted { messages, slots })
    }

    /// Deletes the membership hashes of the topic's serial groups, and
    /// their notes in the index.
    async fn drop_groups(&self, name: &str) -> Result<()> {
        let index = keys::topic_index(self.prefix());
        let mut all = redis::cmd("HGETALL");
        all.arg(&index);
        let fields: Vec<(String, String)> = self.inner.ctx.redis.query(&all).await?;
        let prefix = keys::group_field(name, "");
        for (field, _) in fields {
            let Some(group) = field.strip_prefix(&prefix) else {
                continue;
            };
            let group_key = keys::group_key(self.prefix(), name, group);
            let (id, cmd) = membership::drop_group(&group_key);
            self.inner.ctx.redis.run_one(id, cmd).await?;
            let (id, cmd) = registry::groups(&index, false, &field);
            self.inner.ctx.redis.run_one(id, cmd).await?;
        }
        Ok(())
    }
}

/// Refuses a delete while the topic holds messages or has consumers.
async fn refuse_if_in_use(topic: &Topic) -> Result<()> {
    let t = topic.stats().await?.total;
    let held = t.pending + t.retry_waiting + t.in_flight + t.behind_in_flight + t.dead;
    let consumers = topic.consumers().await?;
    if held == 0 && consumers == 0 {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::TopicInUse,
        format!(
            "topic {:?} holds {held} messages ({} pending, {} in flight, {} dead) and has \
             {consumers} live consumers; stop them and drain it, or delete with force; \
             nothing was changed",
            topic.name(),
            t.pending + t.retry_waiting + t.behind_in_flight,
            t.in_flight,
            t.dead
        ),
    ))
}

/// The kind and slot count stay; the rest must be valid.
fn check_update(old: &TopicSpec, new: &TopicSpec) -> Result<()> {
    if new.name != old.name || new.kind != old.kind || new.slots != old.slots {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "the name, kind and slot count of topic {:?} cannot change (they decide where \
                 every message lives): create a new topic instead; nothing was changed",
                old.name
            ),
        ));
    }
    new.validate()
}

fn unknown(name: &str) -> Error {
    Error::new(
        ErrorKind::UnknownTopic,
        format!("topic {name:?} does not exist (any more); nothing was changed"),
    )
}

fn unreadable(name: &str, e: serde_json::Error) -> Error {
    Error::new(
        ErrorKind::Redis,
        format!("the stored definition of topic {name:?} is unreadable: {e}"),
    )
}

fn unexpected() -> Error {
    Error::new(
        ErrorKind::Redis,
        "unexpected reply from replace_topic: is this server running another rmq version?",
    )
}
