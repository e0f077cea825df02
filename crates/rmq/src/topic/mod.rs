//! Topics: the definition (`spec.rs`; how a deep slot keeps its pending
//! messages: `layout.rs`), the settings as they are now
//! (`live.rs`: changed by `Client::update_topic`, seen by every handle
//! within seconds), and the [`Topic`] handle that sends, consumes and
//! inspects; a bounded topic's room (`bound.rs`); the calls that reach its
//! head index as a whole (`index.rs`).

mod bound;
pub(crate) mod index;
mod layout;
mod live;
mod spec;

pub use layout::PendingLayout;
use live::Live;
pub(crate) use live::{Current, REFRESH as LIVE_REFRESH};
pub use spec::{
    validate_prefix, validate_topic_name, TopicKind, TopicSpec, MAX_IN_FLIGHT, MAX_PENDING,
    MAX_PREFIX, MAX_PRIORITY, MAX_RATE, MAX_SLOTS, MAX_TOPIC_NAME,
};

/// A defined topic: send to it, consume from it, inspect it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Topic {
    pub(crate) ctx: std::sync::Arc<crate::context::Context>,
    /// The definition as opened: its name, kind and slot count never
    /// change; the other settings as they are now are in `live`.
    pub(crate) spec: std::sync::Arc<TopicSpec>,
    pub(crate) channel: std::sync::Arc<str>,
    live: std::sync::Arc<Live>,
    /// Durable sends: WAIT for this many replicas after each send.
    pub(crate) durability: Option<crate::conn::WaitFor>,
    /// The keys of the slots that sends, pops and settles used, built once.
    kept_keys: std::sync::Arc<KeptSlotKeys>,
}

/// Slots whose keys a topic's handles keep once built: every slot of a
/// topic up to this size (16 KiB of cells when empty), none of a larger
/// one, whose calls build them each time. A call on the hot path (send,
/// pop, settle) then formats and allocates none of its ten key names.
const KEPT_SLOTS: u32 = 1_024;

/// The slot keys kept for [`Topic::slot_keys_kept`], filled as used.
struct KeptSlotKeys(Vec<std::sync::OnceLock<std::sync::Arc<[String; 10]>>>);

impl std::fmt::Debug for KeptSlotKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeptSlotKeys({} slots)", self.0.len())
    }
}

impl Topic {
    pub(crate) fn new(ctx: std::sync::Arc<crate::context::Context>, spec: TopicSpec) -> Topic {
        let channel = crate::keys::wake_channel(&ctx.prefix, &spec.name).into();
        Topic {
            ctx,
            live: std::sync::Arc::new(Live::new(spec.clone())),
            kept_keys: std::sync::Arc::new(KeptSlotKeys(
                (0..spec.slots)
                    .take_while(|_| spec.slots <= KEPT_SLOTS)
                    .map(|_| std::sync::OnceLock::new())
                    .collect(),
            )),
            spec: std::sync::Arc::new(spec),
            channel,
            durability: None,
        }
    }

    /// The settings as they are now: read again from the registry when the
    /// last reading is older than 2 s. Refused with
    /// [`ErrorKind::UnknownTopic`](crate::ErrorKind::UnknownTopic) once
    /// the topic was deleted.
    pub(crate) async fn settings(&self) -> crate::error::Result<std::sync::Arc<Current>> {
        if self.live.take_turn() {
            let mut get = redis::cmd("HGET");
            get.arg(crate::keys::topic_index(&self.ctx.prefix))
                .arg(&self.spec.name);
            let json: Option<String> = self.ctx.redis.query(&get).await?;
            self.live
                .read(json.and_then(|j| serde_json::from_str(&j).ok()));
        }
        if self.live.is_gone() {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::UnknownTopic,
                format!(
                    "topic {:?} was deleted (or redefined with another kind or slot count)",
                    self.spec.name
                ),
            ));
        }
        Ok(self.live.current())
    }

    /// The settings as last read, without a Redis call.
    pub(crate) fn cached(&self) -> std::sync::Arc<Current> {
        self.live.current()
    }

    /// A handle on the same topic whose sends are durable: each send
    /// returns only after `replicas` replicas acknowledged its write (Redis
    /// `WAIT` on the connection that wrote it), or fails with
    /// [`ErrorKind::NotReplicated`](crate::ErrorKind::NotReplicated) when
    /// fewer did within `timeout` (at most 60 s; the write stays on the
    /// master; sending again is safe, it merges). Durable sends use a
    /// connection of their own, since `WAIT` holds the connection it runs
    /// on: consumers are never held up by a slow replica. On Redis 7.2+
    /// with the AOF on, `WAITAOF 1 n` is used instead: the write is also
    /// fsynced on the master and on the replicas that count. Redis replication stays asynchronous: a
    /// durable send survives the failover of its master to a replica that
    /// acknowledged it; a plain send may be lost by a failover.
    pub fn durable(&self, replicas: u32, timeout: std::time::Duration) -> Topic {
        let mut t = self.clone();
        t.durability = Some(crate::conn::WaitFor {
            aof: self.ctx.redis.waitaof,
            replicas,
            timeout_ms: u64::try_from(timeout.min(crate::conn::MAX_WAIT).as_millis())
                .unwrap_or(60_000)
                .max(1),
        });
        t
    }

    /// The definition, with the settings as last read (they are read
    /// again at most every 2 s while the topic is used: see
    /// [`Client::update_topic`](crate::Client::update_topic)).
    pub fn spec(&self) -> std::sync::Arc<TopicSpec> {
        self.live.current().spec.clone()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The kind.
    pub fn kind(&self) -> TopicKind {
        self.spec.kind
    }

    /// The slot a message with this slot basis goes to.
    pub fn slot_of(&self, basis: &[u8]) -> u32 {
        crate::slot::slot_of(basis, self.spec.slots)
    }

    /// The Redis keys that hold slot `slot` (all under one hash tag), for
    /// operators: `MEMORY USAGE`, ACL checks, finding a slot's node.
    pub fn keys_of_slot(&self, slot: u32) -> Vec<String> {
        self.slot_keys(slot).into()
    }

    pub(crate) fn slot_keys(&self, slot: u32) -> [String; 10] {
        crate::keys::slot_keys(&self.ctx.prefix, &self.spec.name, slot, self.spec.slots)
    }

    /// [`slot_keys`](Self::slot_keys), built once per slot on topics of
    /// up to [`KEPT_SLOTS`] slots (the hot path's calls: send, pop, settle).
    pub(crate) fn slot_keys_kept(&self, slot: u32) -> std::sync::Arc<[String; 10]> {
        let cell = usize::try_from(slot)
            .ok()
            .and_then(|i| self.kept_keys.0.get(i));
        match cell {
            Some(cell) => cell
                .get_or_init(|| std::sync::Arc::new(self.slot_keys(slot)))
                .clone(),
            None => std::sync::Arc::new(self.slot_keys(slot)),
        }
    }

    /// The channel on which scripts working on `slot` announce a new head:
    /// the topic's one channel on a single node, the sharded channel of the
    /// slot's hash tag on a cluster.
    pub(crate) fn channel_for(&self, slot: u32) -> std::borrow::Cow<'_, str> {
        if self.ctx.is_cluster() {
            let tag = crate::keys::slot_tag(&self.spec.name, slot, self.spec.slots);
            crate::keys::sharded_wake_channel(&self.ctx.prefix, &self.spec.name, tag).into()
        } else {
            std::borrow::Cow::Borrowed(&self.channel)
        }
    }

    /// Every distinct channel of the topic (see [`channel_for`](Self::channel_for)).
    pub(crate) fn channels(&self) -> Vec<String> {
        let mut all: Vec<String> = (0..self.spec.slots)
            .map(|s| self.channel_for(s).into_owned())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    pub(crate) fn redis(&self) -> &crate::conn::Redis {
        &self.ctx.redis
    }

    /// The key prefix (namespace).
    pub(crate) fn prefix(&self) -> &str {
        &self.ctx.prefix
    }
}
