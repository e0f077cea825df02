//! Who serves a topic in serial mode: its consumer groups, their live
//! members (from the membership hash each heartbeat refreshes) and the
//! slots each member holds the lease of (from one stats reading). Reads
//! only; for operators and the dashboard.

use std::collections::BTreeMap;

use crate::admin::{SlotLease, TopicStats};
use crate::error::Result;
use crate::keys;
use crate::topic::Topic;

/// One serial consumer group of a topic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SerialGroup {
    /// The group's name (`ConsumerBuilder::serial`).
    pub name: String,
    /// Its members, live or not yet forgotten, by id.
    pub members: Vec<GroupMember>,
}

/// A member of a serial group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GroupMember {
    /// The member's random id (also the owner name of its leases).
    pub id: String,
    /// Its heartbeat's deadline (Unix ms): past it, the member is gone and
    /// its slots go to the others.
    pub deadline_ms: i64,
    /// Whether the deadline is still ahead.
    pub alive: bool,
    /// The slots whose lease it holds now.
    pub slots: Vec<u32>,
}

/// A topic's serial groups and its slots' leases, read together.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SerialView {
    /// Groups by name.
    pub groups: Vec<SerialGroup>,
    /// Each slot's lease (index = slot).
    pub leases: Vec<SlotLease>,
    /// Server time of the reading (Unix ms).
    pub server_ms: i64,
}

/// Every topic's serial groups, from the topic index (one read).
pub(crate) async fn group_names(
    redis: &crate::conn::Redis,
    prefix: &str,
) -> Result<BTreeMap<String, Vec<String>>> {
    let mut all = redis::cmd("HGETALL");
    all.arg(keys::topic_index(prefix));
    let fields: Vec<(String, String)> = redis.query(&all).await?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (field, _) in fields {
        if let Some((topic, group)) = keys::parse_group_field(&field) {
            if group == keys::PARALLEL_GROUP {
                continue; // parallel consumers' slot affinity, no serial group
            }
            out.entry(topic.to_string())
                .or_default()
                .push(group.to_string());
        }
    }
    for groups in out.values_mut() {
        groups.sort();
    }
    Ok(out)
}

impl Topic {
    /// The topic's serial groups, their members and the slots each owns.
    pub async fn serial_groups(&self) -> Result<SerialView> {
        let stats = self.stats().await?;
        let names = group_names(self.redis(), self.prefix()).await?;
        let mine = names.get(self.name()).map_or(&[][..], Vec::as_slice);
        self.serial_groups_with(&stats, mine).await
    }

    /// [`serial_groups`](Topic::serial_groups) from a stats reading and the
    /// topic's group names already read
    /// ([`Client::serial_group_names`](crate::Client::serial_group_names)):
    /// a metrics scrape reads each slot and the topic index once.
    pub async fn serial_groups_with(
        &self,
        stats: &TopicStats,
        groups: &[String],
    ) -> Result<SerialView> {
        let now = stats.server_ms;
        let mut out = Vec::with_capacity(groups.len());
        for name in groups {
            let mut members = redis::cmd("HGETALL");
            members.arg(keys::group_key(self.prefix(), self.name(), name));
            let members: Vec<(String, String)> = self.redis().query(&members).await?;
            let mut members: Vec<GroupMember> = members
                .into_iter()
                .map(|(id, deadline)| {
                    let deadline_ms = deadline.parse().unwrap_or(0);
                    let slots = (0u32..)
                        .zip(&stats.leases)
                        .filter(|(_, l)| l.owner.as_deref() == Some(id.as_str()))
                        .map(|(s, _)| s)
                        .collect();
                    GroupMember {
                        alive: deadline_ms > now,
                        id,
                        deadline_ms,
                        slots,
                    }
                })
                .collect();
            members.sort_by(|a, b| a.id.cmp(&b.id));
            out.push(SerialGroup {
                name: name.clone(),
                members,
            });
        }
        Ok(SerialView {
            groups: out,
            leases: stats.leases.clone(),
            server_ms: now,
        })
    }

    /// Consumer processes listening to the topic's wake-up notices: each
    /// running consumer, parallel or serial, subscribes to them (on a
    /// single node, a parallel consumer that waits on the marks to the
    /// room channel instead).
    pub async fn consumers(&self) -> Result<u64> {
        let mut channels = self.channels();
        if !self.ctx.is_cluster() {
            channels.push(crate::keys::room_channel(self.prefix(), self.name()));
        }
        self.redis()
            .subscribers(&channels, self.ctx.is_cluster())
            .await
    }
}
