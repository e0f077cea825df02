//! Serial mode: all messages of one slot are handled one at a time across
//! every process of a consumer group.
//!
//! Members announce themselves to a [`Coordinator`] (a heartbeat in Redis
//! by default, or ZooKeeper with `rmq-zk`); each member computes the same
//! assignment of slots to live members by rendezvous hashing ([`assign`]),
//! so a join or a leave moves only the slots it must. Owning a slot means
//! holding its **lease**, a hash in the slot's own hash tag with an owner,
//! an expiry and an **epoch** that grows on every change of owner. The pop
//! and settle scripts check the caller's epoch atomically, so a consumer
//! that was paused, partitioned or slow past its lease can never take or
//! settle a message of a slot it lost (see `lease.rs`). Membership only
//! decides who *tries* to own what; safety never depends on it.

mod assign;
mod calls;
mod claim;
mod lease;
mod plan;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use assign::assign;
pub(crate) use claim::Claim;
pub(crate) use lease::keep_leases;
pub(crate) use plan::Ownership;

use crate::error::{Error, ErrorKind, Result};
use crate::keys;
use crate::scripts::lease::{LeaseAnswer, LeaseOp, LeaseRequest};
use crate::scripts::{membership, registry};
use crate::topic::Topic;

/// A serial-mode consumer's claim on a slot: its member id and the lease's
/// epoch. Sent with every pop and settle of that slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub(crate) owner: Arc<str>,
    pub(crate) epoch: u64,
}

/// How serial mode's lease keeper and claims tell the consumer that a slot
/// may have work now (a lease was acquired, a delivery of it ended) or that
/// its ownership changed, without knowing the consumer's insides.
pub(crate) trait SlotEvents: Send + Sync + 'static {
    /// Look at `slot` soon, whatever was known of it.
    fn slot_may_have_work(&self, slot: u32);
    /// Slots were gained or lost: look again at what may be taken.
    fn ownership_changed(&self);
}

/// Settings of serial mode.
#[derive(Debug, Clone)]
pub(crate) struct SerialConfig {
    pub(crate) group: String,
    /// A member that has not sent a heartbeat for this long is gone.
    pub(crate) member_timeout: Duration,
    /// A slot lease lasts this long unless renewed.
    pub(crate) lease_ttl: Duration,
}

impl SerialConfig {
    /// How often leases are renewed and membership refreshed.
    pub(crate) fn tick(&self) -> Duration {
        (self.member_timeout.min(self.lease_ttl) / 4).max(Duration::from_millis(20))
    }
}

/// What a membership backend may fail with: it is only logged, and a
/// round whose heartbeat failed keeps the slots it owns and takes nothing new.
pub type CoordinatorError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A boxed future of a [`Membership`] call.
pub type CoordinatorFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The consumer group a member joins: where a backend keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRef {
    prefix: String,
    topic: String,
    group: String,
    member_timeout: Duration,
}

impl GroupRef {
    /// The topic's key prefix (namespace).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The group's name (checked: 1 to 100 of `A-Z a-z 0-9 _ . -`).
    pub fn group(&self) -> &str {
        &self.group
    }
    /// How long a silent member stays in the group (the consumer's
    /// `member_timeout`): a backend with sessions may use it as theirs.
    pub fn member_timeout(&self) -> Duration {
        self.member_timeout
    }
}

/// A membership backend: where the members of consumer groups announce
/// themselves. Redis is the built-in one; `rmq-zk` is a ZooKeeper one.
/// Correctness never depends on it: it only decides which member *tries*
/// to own which slot, and fencing is always checked in Redis by the lease
/// epoch.
pub trait Coordinator: Send + Sync + 'static {
    /// One member's place in `group`; nothing is sent until its first
    /// heartbeat.
    fn join(&self, group: &GroupRef, member: &str) -> Arc<dyn Membership>;
}

/// One member of one group, as its backend keeps it.
pub trait Membership: Send + Sync + 'static {
    /// Records that this member is alive (or, with `leaving`, that it
    /// left) and returns the live members' ids, including this one unless
    /// it is leaving or the backend counts it out (e.g. its session
    /// expired). Called once per lease round; an error makes that round
    /// keep what it owns and take nothing new.
    fn heartbeat(
        &self,
        leaving: bool,
    ) -> CoordinatorFuture<'_, Result<Vec<String>, CoordinatorError>>;

    /// Resolves when the members may have changed since the last
    /// heartbeat, so that the next round runs at once instead of at the
    /// next tick. The default never resolves: membership is then seen at
    /// the tick.
    fn changed(&self) -> CoordinatorFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

impl Topic {
    /// The group `group` of this topic, as a [`Coordinator`] sees it.
    pub(crate) fn group_ref(&self, group: &str, member_timeout: Duration) -> GroupRef {
        GroupRef {
            prefix: self.prefix().to_string(),
            topic: self.name().to_string(),
            group: group.to_string(),
            member_timeout,
        }
    }
}

/// Membership kept in a Redis hash next to the topic, by heartbeats.
pub(crate) struct RedisCoordinator {
    topic: Topic,
}

impl RedisCoordinator {
    pub(crate) fn new(topic: Topic) -> Self {
        RedisCoordinator { topic }
    }
}

impl Coordinator for RedisCoordinator {
    fn join(&self, group: &GroupRef, member: &str) -> Arc<dyn Membership> {
        Arc::new(RedisMembership {
            key: keys::group_key(group.prefix(), group.topic(), group.group()),
            field: keys::group_field(group.topic(), group.group()),
            topic: self.topic.clone(),
            member: member.to_string(),
            timeout_ms: group.member_timeout().as_millis().to_string(),
            noted: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// One member's heartbeats in the group's Redis hash. Its first heartbeat
/// notes the group in the topic index, so that a topic delete finds the
/// hash and deletes it too.
struct RedisMembership {
    topic: Topic,
    key: String,
    field: String,
    member: String,
    timeout_ms: String,
    noted: std::sync::atomic::AtomicBool,
}

impl RedisMembership {
    async fn note_group(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.noted.load(Ordering::Relaxed) {
            return Ok(());
        }
        let index = keys::topic_index(self.topic.prefix());
        let (id, cmd) = registry::groups(&index, true, &self.field);
        self.topic.redis().run_one(id, cmd).await?;
        self.noted.store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn beat(&self, leaving: bool) -> Result<Vec<String>> {
        if !leaving {
            self.note_group().await?;
        }
        let (id, cmd) = membership::heartbeat(&self.key, &self.member, leaving, &self.timeout_ms);
        Ok(membership::members(
            self.topic.redis().run_one(id, cmd).await?,
        ))
    }
}

impl Membership for RedisMembership {
    fn heartbeat(
        &self,
        leaving: bool,
    ) -> CoordinatorFuture<'_, Result<Vec<String>, CoordinatorError>> {
        Box::pin(async move { self.beat(leaving).await.map_err(Into::into) })
    }
}

/// Checks a group name: 1 to 100 of `A-Z a-z 0-9 _ . -`.
pub(crate) fn validate_group(group: &str) -> Result<()> {
    crate::topic::validate_topic_name(group).map_err(|_| {
        Error::new(
            ErrorKind::InvalidName,
            format!("invalid group name {group:?}: use 1 to 100 letters, digits, '_', '.' or '-'"),
        )
    })
}

/// What a lease operation answered (see [`Topic::slot_lease`]).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseReply {
    /// The lease was granted (acquired, renewed or released).
    pub granted: bool,
    /// Granted: the epoch. Refused: 0.
    pub epoch: u64,
    /// Refused: the current owner.
    pub owner: String,
}

impl Topic {
    /// Low-level serial-mode primitive, for tools and tests: `op` is
    /// `acquire`, `renew` or `release` on one slot's lease.
    #[doc(hidden)]
    pub async fn slot_lease(
        &self,
        slot: u32,
        op: &str,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseReply> {
        let op = LeaseOp::parse(op).filter(|_| slot < self.spec().slots && !owner.is_empty());
        let Some(op) = op else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "bad slot, lease op or owner",
            ));
        };
        let keys = self.slot_keys(slot);
        let (id, cmd) = LeaseRequest {
            keys: &keys,
            op,
            owner,
            epoch,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
        .call();
        let answer = LeaseAnswer::of(self.redis().run_one(id, cmd).await?);
        let granted = answer.granted();
        Ok(LeaseReply {
            granted,
            epoch: if granted {
                answer.epoch.unwrap_or(0)
            } else {
                0
            },
            owner: if granted {
                owner.to_string()
            } else {
                answer.owner.unwrap_or_default()
            },
        })
    }
}
