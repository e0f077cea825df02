//! Requeueing dead letters: each letter back as a fresh message (no
//! attempts counted), and what became of each one, so that a caller (the
//! CLI's `dead requeue --json`, say) can tell which merged and when each is
//! due without a lookup per key.

use super::DeadSelection;
use crate::error::{Error, ErrorKind, Result};
use crate::message::Received;
use crate::outcome::RequeuedLetter;
use crate::scripts::admin::{RequeueRequest, Requeued, Which};
use crate::topic::{Topic, TopicKind};

/// Dead letters one requeue call takes at most (the default dead-letter
/// cap of a slot): tens of milliseconds of Redis time.
const REQUEUE_PER_CALL: u64 = 10_000;

impl Topic {
    /// Puts dead letters back as fresh messages (no attempts counted).
    /// Returns how many were requeued and how many merged into a message
    /// of the same key that was already waiting. [`DeadSelection::All`]
    /// takes the letters that were dead when the call started (server
    /// clock, per slot), each at most once: a message requeued and dead
    /// again while the call runs stays dead, so the call always ends.
    /// On a bounded topic, requeued letters count against the bound even
    /// beyond it (sends are refused until the topic is below it again).
    pub async fn requeue_dead(&self, which: DeadSelection) -> Result<(u64, u64)> {
        let mut total = (0, 0);
        self.requeue_calls(which, |_, r| {
            total = (total.0 + r.requeued, total.1 + r.merged);
        })
        .await?;
        Ok(total)
    }

    /// Like [`requeue_dead`](Self::requeue_dead), and says what became of
    /// each letter, in the order each slot's call took them (slot by
    /// slot): merged or not, behind an in-flight delivery or not, and its
    /// priority or due time as stored (a requeued time-based letter is due
    /// at once, by the server's clock).
    pub async fn requeue_dead_each(&self, which: DeadSelection) -> Result<Vec<RequeuedLetter>> {
        let kind = self.spec.kind;
        let mut letters = Vec::new();
        self.requeue_calls(which, |slot, r| {
            for (key, code, score) in r.each {
                letters.push(letter(slot, kind, r.server_ms, key, code, score));
            }
        })
        .await?;
        Ok(letters)
    }

    /// Runs the requeue calls `which` needs, handing each call's reply to
    /// `each_call` with its slot.
    async fn requeue_calls(
        &self,
        which: DeadSelection,
        mut each_call: impl FnMut(u32, Requeued),
    ) -> Result<()> {
        match which {
            DeadSelection::Key(key) => {
                // Every slot with dead letters: a message sent with a slot
                // basis lives apart from its key's hash.
                self.check_key(&key)?;
                let slots = self.dead_slots(None).await?;
                let replies = self
                    .each_slot_of(&slots, |keys, slot| {
                        let (slot, channel) = (slot.to_string(), self.channel_for(slot));
                        self.requeue_request(keys, &channel, &slot, Which::Key(&key), "")
                            .call()
                    })
                    .await?;
                // Every requeue that ran is counted before a failed one's
                // error is passed on.
                let mut failed = None;
                let mut requeued = 0;
                for (&slot, r) in slots.iter().zip(replies) {
                    match r {
                        Ok(v) => {
                            let r = Requeued::parse(v);
                            requeued += r.requeued;
                            each_call(slot, r);
                        }
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                self.count_in_room(requeued).await?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            DeadSelection::OlderThan(_) => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "requeue takes one key or all dead letters, not an age; nothing was requeued",
                ))
            }
            DeadSelection::All => {
                for slot in self.dead_slots(None).await? {
                    self.requeue_all_of(slot, &mut each_call).await?;
                }
            }
        }
        Ok(())
    }

    fn requeue_request<'a>(
        &'a self,
        keys: &'a [String],
        channel: &'a str,
        slot: &'a str,
        which: Which<'a>,
        before_ms: &'a str,
    ) -> RequeueRequest<'a> {
        RequeueRequest {
            keys,
            kind: self.spec.script_kind(),
            channel,
            slot,
            which,
            before_ms,
        }
    }

    /// Requeues what was dead in `slot` when its first call ran, each
    /// letter at most once: a message that dies again meanwhile stays dead.
    /// A call takes up to 10,000 letters (the default cap per slot), so a
    /// slot is usually done in one atomic call.
    async fn requeue_all_of(
        &self,
        slot: u32,
        each_call: &mut impl FnMut(u32, Requeued),
    ) -> Result<()> {
        let (keys, channel) = (self.slot_keys(slot), self.channel_for(slot));
        let (slot_arg, limit) = (slot.to_string(), REQUEUE_PER_CALL.to_string());
        let mut before = String::new();
        loop {
            let which = Which::All { limit: &limit };
            let (id, cmd) = self
                .requeue_request(&keys, &channel, &slot_arg, which, &before)
                .call();
            let r = Requeued::parse(self.redis().run_one(id, cmd).await?);
            // Counted call by call: an error later leaves the count right
            // for what was requeued.
            self.count_in_room(r.requeued).await?;
            if before.is_empty() {
                before = r.before_ms.to_string();
            }
            let done = r.requeued + r.merged < REQUEUE_PER_CALL;
            each_call(slot, r);
            if done {
                return Ok(());
            }
        }
    }
}

/// One letter as dead_requeue.lua told it: code 1 requeued, 2 merged, 3
/// requeued behind the in-flight delivery, 4 merged into the message
/// behind it; score 0 when not told (merged into a retry-waiting message).
fn letter(
    slot: u32,
    kind: TopicKind,
    server_ms: i64,
    key: Vec<u8>,
    code: i64,
    score: i64,
) -> RequeuedLetter {
    let (priority, due_ms) = match score {
        0 => (None, None),
        s => Received::score_fields(kind, s),
    };
    RequeuedLetter {
        key,
        slot,
        merged: code == 2 || code == 4,
        behind_in_flight: code == 3 || code == 4,
        priority,
        due_ms,
        server_ms,
    }
}
