//! A bounded topic's room (`max_pending`): one count per topic in Redis
//! (`room.lua`), shared by every process. Sends reserve room for their new
//! messages before they send and give back what they did not use; every
//! way a message ends gives its unit back (a settle, a pop's rollback of an
//! expired lease, a cancel); a requeue of dead letters counts them in.
//!
//! A send's reservation is named (a token) and runs out after
//! [`RESERVATION_LEASE`]: a recount adds the room of sends between their
//! reserve and their commit, but not that of a process that died between
//! them.
//!
//! The count errs on one side only: a process that dies between its two
//! steps, or a give-back lost to a broken connection, leaves it too high,
//! so the topic refuses a little early until a recount
//! ([`Topic::recount_bound`]); it never lets the topic hold more than its
//! bound. (Two narrow exceptions, documented where they happen: a process
//! killed between a dead-letter requeue and its count, and sends of
//! handles that have not yet seen a bound set on a live topic, which the
//! recount after the definitions' refresh takes in.)

use super::Topic;
use crate::error::Result;
use crate::keys;
use crate::scripts::room::{self, RoomKeys};

/// How long a send's reservation counts in a recount at most (a send
/// takes a round trip or two; a cluster failover can stretch one to its
/// window): after it, a reservation is taken for a dead process's.
pub(crate) const RESERVATION_LEASE: std::time::Duration = std::time::Duration::from_secs(120);

impl Topic {
    /// Messages counted against the topic's bound now, and the bound
    /// (None when the topic is not bounded).
    pub async fn bound_usage(&self) -> Result<Option<(u64, u64)>> {
        let (id, cmd) = room::count(&self.room_keys());
        let (held, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        Ok((bound > 0).then_some((held, bound)))
    }

    /// Counts the topic's messages again and makes that the bound's count
    /// (plus the room of sends in progress, and of sends during the
    /// reading: counted twice rather than missed); returns the new count
    /// and the bound, None when the topic is not bounded. For a count left
    /// too high by processes that died between their two steps: `rmq topic
    /// show` prints both numbers.
    pub async fn recount_bound(&self) -> Result<Option<(u64, u64)>> {
        let keys = self.room_keys();
        let (id, cmd) = room::count(&keys);
        let before = self.redis().run_one(id, cmd).await?;
        let used_before = room::used(&before);
        if room::pair(before).1 == 0 {
            return Ok(None);
        }
        let held = self.stats().await?.total.held();
        let (id, cmd) = room::recount(&keys, held, used_before);
        let (live, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        Ok((bound > 0).then_some((live, bound)))
    }

    fn room_keys(&self) -> RoomKeys {
        keys::room_keys(self.prefix(), self.name())
    }

    fn bounded(&self) -> bool {
        self.cached().spec.max_pending > 0
    }

    /// Reserves room for up to `n` new messages of one send: what it may
    /// add (None when the topic is not bounded: nothing reserved), held
    /// until [`RoomHold::commit`] or its drop.
    pub(crate) async fn reserve_room(&self, n: usize) -> Result<RoomHold> {
        let mut hold = RoomHold {
            topic: self.clone(),
            token: format!("{:016x}", rand::random::<u64>()),
            granted: None,
            unused: 0,
        };
        if !self.bounded() || n == 0 {
            return Ok(hold);
        }
        let lease = u64::try_from(RESERVATION_LEASE.as_millis()).unwrap_or(u64::MAX);
        let (id, cmd) = room::reserve(&self.room_keys(), n as u64, &hold.token, lease);
        let (granted, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        // No bound in Redis (removed, or not yet written): nothing reserved.
        if bound > 0 {
            let granted = usize::try_from(granted).unwrap_or(0).min(n);
            hold.granted = Some(granted);
            hold.unused = granted;
        }
        Ok(hold)
    }

    /// Gives back room for `n` messages that ended. Its error is only
    /// logged: a lost give-back keeps the room until the next recount.
    pub(crate) async fn give_back_room(&self, n: u64) {
        if n == 0 || !self.bounded() {
            return;
        }
        let (id, cmd) = room::give(&self.room_keys(), n);
        if let Err(e) = self.redis().run_one(id, cmd).await {
            tracing::debug!(topic = %self.name(), "giving back room failed: {e}");
        }
    }

    /// The same in the background (for callers that cannot wait).
    pub(crate) fn give_back_room_later(&self, n: u64) {
        if n == 0 || !self.bounded() {
            return;
        }
        let topic = self.clone();
        tokio::spawn(async move { topic.give_back_room(n).await });
    }

    /// Counts `n` more messages without asking (requeued dead letters may
    /// take the topic beyond its bound; sends wait until it is below).
    pub(crate) async fn count_in_room(&self, n: u64) -> Result<()> {
        if n == 0 || !self.bounded() {
            return Ok(());
        }
        let (id, cmd) = room::add(&self.room_keys(), n);
        self.redis().run_one(id, cmd).await.map(|_| ())
    }
}

/// Room a send reserved, until it commits: how much it may add, and how
/// much of that is surely unused (its calls not sent yet, or sent and
/// answered with fewer new messages). Dropped without a commit (the send's
/// future was dropped mid-way), it commits in the background: room its
/// unanswered calls may have used stays counted, the rest comes back.
pub(crate) struct RoomHold {
    topic: Topic,
    token: String,
    granted: Option<usize>,
    unused: usize,
}

impl RoomHold {
    /// New messages the send may add (None: not bounded).
    pub(crate) fn granted(&self) -> Option<usize> {
        self.granted
    }

    /// Calls holding `room` are about to be sent: their room may be used.
    pub(crate) fn sending(&mut self, room: usize) {
        self.unused = self.unused.saturating_sub(room);
    }

    /// A call answered: `room - new` of its room was not used.
    pub(crate) fn answered(&mut self, room: usize, new: usize) {
        self.unused += room.saturating_sub(new);
    }

    fn commit_call(&self, granted: usize) -> (crate::scripts::ScriptId, redis::Cmd) {
        room::commit(
            &self.topic.room_keys(),
            granted as u64,
            self.unused as u64,
            &self.token,
        )
    }

    /// Ends the reservation: the unused room comes back, and a recount no
    /// longer adds the reservation. (Awaited even when all the room was
    /// used: in the background, a short-lived process such as `rmq send`
    /// would exit first, and recounts would count its messages twice until
    /// the reservation ran out.) Its error is only logged (the room stays
    /// counted until a recount).
    pub(crate) async fn commit(mut self) {
        let Some(granted) = self.granted.take() else {
            return;
        };
        let (id, cmd) = self.commit_call(granted);
        if let Err(e) = self.topic.redis().run_one(id, cmd).await {
            tracing::debug!(topic = %self.topic.name(), "committing room failed: {e}");
        }
    }
}

impl Drop for RoomHold {
    fn drop(&mut self) {
        let Some(granted) = self.granted.take() else {
            return;
        };
        let (id, cmd) = self.commit_call(granted);
        let topic = self.topic.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = topic.redis().run_one(id, cmd).await;
            });
        }
    }
}
