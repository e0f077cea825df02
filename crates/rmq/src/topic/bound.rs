//! A bounded topic's room (`max_pending`): one count per topic in Redis
//! (`room.lua`), shared by every process. Sends reserve room for their new
//! messages before they send and give back what they did not use; every
//! way a message ends gives its unit back (a settle, a pop's rollback of an
//! expired lease, a cancel); a requeue of dead letters counts them in.
//!
//! The count errs on one side only: a process that dies between its two
//! steps, or a give-back lost to a broken connection, leaves it too high,
//! so the topic refuses a little early until the next recount (setting a
//! new bound recounts); it never lets the topic hold more than its bound.

use super::Topic;
use crate::error::Result;
use crate::keys;
use crate::scripts::room;

impl Topic {
    /// Messages counted against the topic's bound now, and the bound
    /// (None when the topic is not bounded).
    pub async fn bound_usage(&self) -> Result<Option<(u64, u64)>> {
        let (id, cmd) = room::count(&self.room_key());
        let (held, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        Ok((bound > 0).then_some((held, bound)))
    }

    fn room_key(&self) -> String {
        keys::room_key(self.prefix(), self.name())
    }

    fn bounded(&self) -> bool {
        self.cached().spec.max_pending > 0
    }

    /// Reserves room for up to `n` new messages: None when the topic is not
    /// bounded (nothing reserved), else how many it may add.
    pub(crate) async fn reserve_room(&self, n: usize) -> Result<Option<usize>> {
        if !self.bounded() || n == 0 {
            return Ok(None);
        }
        let (id, cmd) = room::reserve(&self.room_key(), n as u64);
        let (granted, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        // No bound in Redis (removed, or not yet written): nothing reserved.
        Ok((bound > 0).then(|| usize::try_from(granted).unwrap_or(0).min(n)))
    }

    /// Gives back room for `n` messages (reserved and not used, or held by
    /// messages that ended). Its error is only logged: a lost give-back
    /// keeps the room until the next recount.
    pub(crate) async fn give_back_room(&self, n: u64) {
        if n == 0 || !self.bounded() {
            return;
        }
        let (id, cmd) = room::give(&self.room_key(), n);
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
        let (id, cmd) = room::add(&self.room_key(), n);
        self.redis().run_one(id, cmd).await.map(|_| ())
    }
}
