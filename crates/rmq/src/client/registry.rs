//! The topic registry: one hash per prefix (`<prefix>:topics`, name ->
//! definition as JSON) that every process reads, so that all agree on a
//! topic's kind, slots and settings; a second definition must be identical.

use super::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::keys;
use crate::scripts::registry::{self, Defined};
use crate::scripts::{inflight, rate, room};
use crate::topic::index::mark_complete;
use crate::topic::{validate_topic_name, Topic, TopicSpec, LIVE_REFRESH};

impl Client {
    /// Defines a topic, or checks that it is already defined exactly so.
    /// A different definition under the same name is refused
    /// ([`ErrorKind::TopicConflict`]) and changes nothing.
    pub async fn define_topic(&self, spec: TopicSpec) -> Result<Topic> {
        spec.validate()?;
        let json = spec.to_json();
        let (id, cmd) = registry::define(&keys::topic_index(self.prefix()), &spec.name, &json);
        let reply = self.inner.ctx.redis.run_one(id, cmd).await?;
        let defined = Defined::parse(reply).ok_or_else(|| {
            Error::new(
                ErrorKind::Redis,
                "unexpected reply from define_topic: is this server running another rmq version?",
            )
        })?;
        if let Defined::Different(existing) = defined {
            let old = serde_json::from_str::<TopicSpec>(&existing)
                .map(|o| describe_difference(&o, &spec))
                .unwrap_or_else(|_| existing.clone());
            return Err(Error::new(
                ErrorKind::TopicConflict,
                format!(
                    "topic {:?} already exists with another definition ({old}); \
                     use the existing definition or another name",
                    spec.name
                ),
            ));
        }
        if defined == Defined::Created && self.inner.ctx.redis.head_index {
            // A topic defined now holds nothing: its head index is complete
            // from the start, and its first consumer need not look at
            // every slot.
            let redis = &self.inner.ctx.redis;
            if let Err(e) = mark_complete(redis, self.prefix(), &spec.name, spec.slots).await {
                // Its first consumer looks at every slot, then marks it.
                tracing::warn!(topic = %spec.name, "marking the head index failed: {e}");
            }
        }
        self.set_flow(&spec, false).await?;
        Ok(Topic::new(self.inner.ctx.clone(), spec))
    }

    /// Writes the topic's rate limit into its bucket and its in-flight cap
    /// into its permit set, where every consumer reads them at each pop
    /// round (a change is followed at once, before the consumers'
    /// definitions refresh), and its bound into its room count (see
    /// `set_bound`).
    pub(crate) async fn set_flow(&self, spec: &TopicSpec, settle: bool) -> Result<()> {
        let bucket = keys::rate_key(self.prefix(), &spec.name);
        let (id, cmd) = rate::set(&bucket, spec.rate_per_sec, spec.rate_burst);
        self.inner.ctx.redis.run_one(id, cmd).await?;
        let cap = keys::cap_keys(self.prefix(), &spec.name);
        let (id, cmd) = inflight::set(&cap, spec.max_in_flight);
        self.inner.ctx.redis.run_one(id, cmd).await?;
        self.set_bound(spec, settle).await
    }

    /// Writes the topic's bound into its room count. A topic bounded until
    /// now keeps its running count under a new bound; one not bounded
    /// until now starts from a count of the messages it holds. Handles
    /// that have not seen the bound yet send without counting for up to a
    /// refresh of their definitions: with `settle`, the call waits that
    /// long and counts again (`update_topic`; a topic just defined has no
    /// such handles).
    async fn set_bound(&self, spec: &TopicSpec, settle: bool) -> Result<()> {
        let key = keys::room_keys(self.prefix(), &spec.name);
        let (id, cmd) = room::count(&key);
        let (_, limit) = room::pair(self.inner.ctx.redis.run_one(id, cmd).await?);
        if limit == spec.max_pending {
            return Ok(());
        }
        let topic = Topic::new(self.inner.ctx.clone(), spec.clone());
        let held = if limit == 0 && spec.max_pending > 0 {
            topic.stats().await?.total.held()
        } else {
            0
        };
        let (id, cmd) = room::set(&key, spec.max_pending, held);
        self.inner.ctx.redis.run_one(id, cmd).await?;
        if settle && limit == 0 && spec.max_pending > 0 {
            tokio::time::sleep(LIVE_REFRESH + std::time::Duration::from_millis(500)).await;
            topic.recount_bound().await?;
        }
        Ok(())
    }

    /// Opens a defined topic.
    pub async fn topic(&self, name: &str) -> Result<Topic> {
        validate_topic_name(name)?;
        let mut get = redis::cmd("HGET");
        get.arg(keys::topic_index(self.prefix())).arg(name);
        let json: Option<String> = self.inner.ctx.redis.query(&get).await?;
        let Some(json) = json else {
            return Err(Error::new(
                ErrorKind::UnknownTopic,
                format!(
                    "topic {name:?} does not exist under prefix {:?}: define it first (rmq topic create)",
                    self.prefix()
                ),
            ));
        };
        let spec: TopicSpec = serde_json::from_str(&json).map_err(|e| {
            Error::new(
                ErrorKind::Redis,
                format!("the stored definition of topic {name:?} is unreadable: {e}"),
            )
        })?;
        Ok(Topic::new(self.inner.ctx.clone(), spec))
    }

    /// Every topic defined under this prefix, by name.
    pub async fn topics(&self) -> Result<Vec<TopicSpec>> {
        let mut get = redis::cmd("HGETALL");
        get.arg(keys::topic_index(self.prefix()));
        let all: Vec<(String, String)> = self.inner.ctx.redis.query(&get).await?;
        let mut out: Vec<TopicSpec> = all
            .into_iter()
            .filter_map(|(_, json)| serde_json::from_str(&json).ok())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Every topic defined under this prefix, opened, by name: one read of
    /// the registry for all of them (opening each by name reads it again).
    pub async fn open_topics(&self) -> Result<Vec<Topic>> {
        Ok(self
            .topics()
            .await?
            .into_iter()
            .map(|spec| Topic::new(self.inner.ctx.clone(), spec))
            .collect())
    }

    /// Every topic's serial consumer groups (those that ever ran), by
    /// topic name, from one read of the topic index.
    pub async fn serial_group_names(
        &self,
    ) -> Result<std::collections::BTreeMap<String, Vec<String>>> {
        crate::control::group_names(&self.inner.ctx.redis, self.prefix()).await
    }
}

fn describe_difference(old: &TopicSpec, new: &TopicSpec) -> String {
    let mut d = Vec::new();
    if old.kind != new.kind {
        d.push(format!("kind {} vs {}", old.kind, new.kind));
    }
    if old.slots != new.slots {
        d.push(format!("slots {} vs {}", old.slots, new.slots));
    }
    if d.is_empty() {
        d.push(format!("settings differ: existing {}", old.to_json()));
    }
    format!("existing vs requested: {}", d.join(", "))
}
