//! Who serves a topic in serial mode: its consumer groups, their live
//! members (from the membership hash each heartbeat refreshes) and the
//! slots each member holds the lease of (from one stats reading). Reads
//! only; for operators and the dashboard.

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

impl Topic {
    /// The topic's serial groups, their members and the slots each owns.
    pub async fn serial_groups(&self) -> Result<SerialView> {
        self.serial_groups_seen(&self.stats().await?).await
    }

    /// [`serial_groups`](Topic::serial_groups) with the leases of a stats
    /// reading already made (a metrics scrape reads each slot once).
    pub async fn serial_groups_seen(&self, stats: &TopicStats) -> Result<SerialView> {
        let now = stats.server_ms;
        let index = keys::topic_index(self.prefix());
        let mut all = redis::cmd("HGETALL");
        all.arg(&index);
        let fields: Vec<(String, String)> = self.redis().query(&all).await?;
        let noted = keys::group_field(self.name(), "");
        let mut names: Vec<String> = fields
            .into_iter()
            .filter_map(|(f, _)| f.strip_prefix(&noted).map(str::to_string))
            .collect();
        names.sort();
        let mut groups = Vec::with_capacity(names.len());
        for name in names {
            let mut members = redis::cmd("HGETALL");
            members.arg(keys::group_key(self.prefix(), self.name(), &name));
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
            groups.push(SerialGroup { name, members });
        }
        Ok(SerialView {
            groups,
            leases: stats.leases.clone(),
            server_ms: now,
        })
    }

    /// Consumer processes listening to the topic's wake-up notices: each
    /// running consumer, parallel or serial, subscribes to them.
    pub async fn consumers(&self) -> Result<u64> {
        self.redis()
            .subscribers(&self.channels(), self.ctx.is_cluster())
            .await
    }
}
