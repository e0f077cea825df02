//! A bounded topic's room (`max_pending`): one count per topic in Redis
//! (`room.lua`), shared by every process. Sends reserve room for their new
//! messages before they send and give back what they did not use; every
//! way a message ends gives its unit back (a settle, a pop's rollback of an
//! expired lease, a cancel); a requeue of dead letters counts them in.
//!
//! The count errs on one side only: a process that dies between its two
//! steps, or a give-back lost to a broken connection, leaves it too high,
//! so the topic refuses a little early until a recount
//! ([`Topic::recount_bound`]); it never lets the topic hold more than its
//! bound. (Two narrow exceptions, documented where they happen: a process
//! killed between a dead-letter requeue and its count, and sends of
//! handles that have not yet seen a bound set on a live topic, which the
//! recount after the definitions' refresh takes in.)

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::oneshot;

use super::Topic;
use crate::error::{Error, ErrorKind, Result};
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

    /// Counts the topic's messages again and makes that the bound's count
    /// (plus what sends reserved and used meanwhile, counted twice rather
    /// than missed); returns the new count and the bound, None when the
    /// topic is not bounded. For a count left too high by processes that
    /// died between their two steps: `rmq topic show` prints both numbers.
    pub async fn recount_bound(&self) -> Result<Option<(u64, u64)>> {
        let key = self.room_key();
        let (id, cmd) = room::count(&key);
        let before = self.redis().run_one(id, cmd).await?;
        let used_before = room::used(&before);
        if room::pair(before).1 == 0 {
            return Ok(None);
        }
        let held = self.stats().await?.total.held();
        let (id, cmd) = room::recount(&key, held, used_before);
        let (live, bound) = room::pair(self.redis().run_one(id, cmd).await?);
        Ok((bound > 0).then_some((live, bound)))
    }

    fn room_key(&self) -> String {
        keys::room_key(self.prefix(), self.name())
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
            granted: None,
            unused: 0,
        };
        if !self.bounded() || n == 0 {
            return Ok(hold);
        }
        let (granted, bound) = self.reserve_together(n as u64).await?;
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

/// Room a send reserved, until it commits: how much it may add, and how
/// much of that is surely unused (its calls not sent yet, or sent and
/// answered with fewer new messages). Dropped without a commit (the send's
/// future was dropped mid-way), it commits in the background: room its
/// unanswered calls may have used stays counted, the rest comes back.
pub(crate) struct RoomHold {
    topic: Topic,
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

    /// Ends the reservation: the unused room comes back at once. A send
    /// that used all its room has nothing to give back: its commit (which
    /// only tells a recount that the room is no longer reserved) goes out
    /// later, together with those of the sends beside it, so a bounded
    /// send costs one round trip more than an unbounded one, not two.
    /// Errors are only logged (the room stays counted until a recount).
    pub(crate) async fn commit(mut self) {
        let Some(granted) = self.granted.take() else {
            return;
        };
        if self.unused == 0 {
            self.topic.commit_later(granted as u64);
            return;
        }
        let (id, cmd) = room::commit(&self.topic.room_key(), granted as u64, self.unused as u64);
        if let Err(e) = self.topic.redis().run_one(id, cmd).await {
            tracing::debug!(topic = %self.topic.name(), "giving back unused room failed: {e}");
        }
    }
}

impl Drop for RoomHold {
    fn drop(&mut self) {
        let Some(granted) = self.granted.take() else {
            return;
        };
        let (topic, unused) = (self.topic.clone(), self.unused);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let (id, cmd) = room::commit(&topic.room_key(), granted as u64, unused as u64);
                let _ = topic.redis().run_one(id, cmd).await;
            });
        }
    }
}

/// What a reserve answers a send: room granted and the bound.
type Granted = Result<(u64, u64)>;

/// A bounded topic's round trips that concurrent sends share: reserves
/// asked for while none is being sent go out as one call (its room shared
/// out in the order asked), and commits of fully used room go out together.
#[derive(Debug, Default)]
pub(crate) struct SharedCalls {
    waiting: AtomicU64,
    asks: std::sync::Mutex<Vec<(u64, oneshot::Sender<Granted>)>>,
}

impl Topic {
    /// Reserves `n` together with the sends that ask at the same time.
    async fn reserve_together(&self, n: u64) -> Granted {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut asks = self
                .room_calls
                .asks
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            asks.push((n, tx));
            asks.len() == 1
        };
        if first {
            let topic = self.clone();
            tokio::spawn(async move { topic.reserve_asked().await });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Shutdown,
                "the runtime is shutting down",
            ))
        })
    }

    async fn reserve_asked(&self) {
        tokio::task::yield_now().await;
        let asks = std::mem::take(
            &mut *self
                .room_calls
                .asks
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let total = asks.iter().map(|(n, _)| n).sum();
        let (id, cmd) = room::reserve(&self.room_key(), total);
        match self.redis().run_one(id, cmd).await {
            Ok(v) => {
                let (mut left, bound) = room::pair(v);
                for (n, tx) in asks {
                    let g = n.min(left);
                    left -= g;
                    let _ = tx.send(Ok((g, bound)));
                }
            }
            Err(e) => {
                for (_, tx) in asks {
                    let _ = tx.send(Err(e.duplicate()));
                }
            }
        }
    }

    fn commit_later(&self, reserved: u64) {
        if self
            .room_calls
            .waiting
            .fetch_add(reserved, Ordering::AcqRel)
            != 0
        {
            return; // a flush is on its way and takes this too
        }
        let topic = self.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            let n = topic.room_calls.waiting.swap(0, Ordering::AcqRel);
            if n > 0 {
                let (id, cmd) = room::commit(&topic.room_key(), n, 0);
                if let Err(e) = topic.redis().run_one(id, cmd).await {
                    tracing::debug!(topic = %topic.name(), "committing used room failed: {e}");
                }
            }
        });
    }
}
