//! What HTTP take and settle share across requests: one on-demand taker
//! per topic (the library's engine: it takes only while clients wait, and
//! many waiting clients cost one look at Redis, not one each), the serial
//! group members the server keeps for clients that take with a group and
//! a member, and the prefix's receipt key, read from Redis once (every
//! server of the prefix reads the same one, so a receipt one server gave
//! out settles through another).
//!
//! A member lives while its client asks: each take and each settle of one
//! of its receipts counts as a sign of life, and a member silent for its
//! timeout is ended (it leaves the group and releases its slot leases;
//! what it still had out comes back after the deliveries' leases).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmq::{OnDemand, ReceiptKey, SerialMember, Topic, TopicKind};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How often silent members are looked for.
const REAP_EVERY: Duration = Duration::from_millis(100);

#[derive(Default)]
pub(crate) struct Takers {
    by_topic: Mutex<HashMap<String, Taker>>,
    members: Arc<Mutex<Members>>,
    key: OnceCell<ReceiptKey>,
}

/// (topic, group, member) -> the member the server keeps for a client.
type Members = HashMap<(String, String, String), Member>;

struct Member {
    serial: Arc<SerialMember>,
    /// Its client's last take or settle (or now, while a take runs).
    last_seen: Instant,
    /// Takes of it running now (it is not silent while one waits).
    taking: usize,
    timeout: Duration,
}

struct Taker {
    /// The definition it was made for: a topic deleted and defined anew
    /// with other slots or another kind gets a new engine.
    shape: (TopicKind, u32),
    engine: OnDemand,
}

impl Takers {
    /// The topic's taker, made on first use.
    pub(crate) fn of(&self, topic: &Topic) -> OnDemand {
        let spec = topic.spec();
        let shape = (spec.kind, spec.slots);
        let mut map = self.by_topic.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(topic.name()) {
            Some(t) if t.shape == shape => t.engine.clone(),
            _ => {
                let engine = topic.on_demand();
                map.insert(
                    topic.name().to_string(),
                    Taker {
                        shape,
                        engine: engine.clone(),
                    },
                );
                engine
            }
        }
    }

    /// The member `member` of `group` on `topic`, joined on first use, to
    /// take through: it is not silent until the take is dropped.
    pub(crate) fn member(
        &self,
        topic: &Topic,
        group: &str,
        member: &str,
        timeout: Duration,
    ) -> rmq::Result<Taking> {
        let mut map = self.lock_members();
        let id = (
            topic.name().to_string(),
            group.to_string(),
            member.to_string(),
        );
        if map.is_empty() {
            tokio::spawn(reap(Arc::downgrade(&self.members)));
        }
        let serial = match map.get_mut(&id) {
            Some(m) => {
                m.taking += 1;
                m.last_seen = Instant::now();
                m.timeout = timeout;
                m.serial.clone()
            }
            None => {
                let serial = Arc::new(topic.serial_member(group, member, timeout)?);
                let m = Member {
                    serial: serial.clone(),
                    last_seen: Instant::now(),
                    taking: 1,
                    timeout,
                };
                map.insert(id.clone(), m);
                serial
            }
        };
        Ok(Taking {
            serial,
            members: self.members.clone(),
            id,
        })
    }

    /// A client settled a receipt its member `member` took: a sign of life.
    pub(crate) fn seen(&self, topic: &str, member: &str) {
        let now = Instant::now();
        for ((t, _, m), v) in self.lock_members().iter_mut() {
            if t == topic && m == member {
                v.last_seen = now;
            }
        }
    }

    fn lock_members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The prefix's receipt key (read once; a failed read is tried again
    /// by the next request).
    pub(crate) async fn key(&self, client: &rmq::Client) -> rmq::Result<&ReceiptKey> {
        self.key.get_or_try_init(|| client.receipt_key()).await
    }
}

/// A take through a kept member: until it is dropped (answered, or its
/// client hung up), the member is not silent.
pub(crate) struct Taking {
    serial: Arc<SerialMember>,
    members: Arc<Mutex<Members>>,
    id: (String, String, String),
}

impl std::ops::Deref for Taking {
    type Target = SerialMember;
    fn deref(&self) -> &SerialMember {
        &self.serial
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        let mut map = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get_mut(&self.id) {
            m.taking = m.taking.saturating_sub(1);
            m.last_seen = Instant::now();
        }
    }
}

/// Ends the members whose clients fell silent, until the server is gone.
async fn reap(members: Weak<Mutex<Members>>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(members) = members.upgrade() else {
            return;
        };
        let (gone, last) = {
            let mut map = members.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let silent: Vec<_> = map
                .iter()
                .filter(|(_, m)| m.taking == 0 && now.duration_since(m.last_seen) >= m.timeout)
                .map(|(id, _)| id.clone())
                .collect();
            let gone: Vec<Arc<SerialMember>> = silent
                .into_iter()
                .filter_map(|id| map.remove(&id))
                .map(|m| m.serial)
                .collect();
            // None left: the next member starts another reaper.
            (gone, map.is_empty())
        };
        for m in gone {
            end(m).await;
        }
        if last {
            return;
        }
    }
}

/// Leaves the group (releasing its leases) once no take holds it.
async fn end(m: Arc<SerialMember>) {
    match Arc::try_unwrap(m) {
        Ok(m) => m.leave().await,
        // A take still holds it: dropped after that, it leaves then.
        Err(m) => drop(m),
    }
}
