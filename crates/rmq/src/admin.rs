//! Inspection and operations, apart from the hot path: depth per state and
//! counters, peeking at the next messages, and the dead letters (list,
//! requeue, purge). The CLI is a thin layer over these calls.

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::scripts::{self, ScriptId};
use crate::topic::{Topic, TopicKind};
use crate::value::{as_int, bytes_at, int_at, items};

/// Slots per pipeline in admin calls.
const SLOTS_PER_ROUND: usize = 256;

/// Dead letters one requeue call takes at most (the default dead-letter
/// cap of a slot): tens of milliseconds of Redis time.
const REQUEUE_PER_CALL: i64 = 10_000;

/// Depth and counters of one slot, or of a whole topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Waiting to be consumed (due or not).
    pub pending: u64,
    /// Of those, due now (priority: all pending).
    pub due_now: u64,
    /// Of those, due later (time-based topics).
    pub scheduled: u64,
    /// Priority retries waiting out their backoff.
    pub retry_waiting: u64,
    /// Being handled.
    pub in_flight: u64,
    /// Duplicates waiting for an in-flight delivery of their key to end.
    pub behind_in_flight: u64,
    /// Dead letters.
    pub dead: u64,
    /// Messages accepted by send.
    pub sent: u64,
    /// Sends merged into a waiting message.
    pub merged: u64,
    /// Deliveries (phase one).
    pub delivered: u64,
    /// Acknowledged.
    pub acked: u64,
    /// Failed deliveries given a retry (including expired leases).
    pub retried: u64,
    /// Moved to the dead letters.
    pub dead_lettered: u64,
    /// Dead letters dropped by the per-slot limit.
    pub dead_dropped: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.pending += o.pending;
        self.due_now += o.due_now;
        self.scheduled += o.scheduled;
        self.retry_waiting += o.retry_waiting;
        self.in_flight += o.in_flight;
        self.behind_in_flight += o.behind_in_flight;
        self.dead += o.dead;
        self.sent += o.sent;
        self.merged += o.merged;
        self.delivered += o.delivered;
        self.acked += o.acked;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.dead_dropped += o.dead_dropped;
    }
}

/// Stats of a topic: totals and per slot.
#[derive(Debug, Clone, Serialize)]
pub struct TopicStats {
    /// Sum over the slots.
    pub total: Stats,
    /// Index = slot.
    pub slots: Vec<Stats>,
    /// Server time of the reading (Unix ms).
    pub server_ms: i64,
}

/// A pending message, as peek shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Merge key.
    pub key: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
    /// Slot.
    pub slot: u32,
    /// Deliveries so far.
    pub attempts: u32,
    /// Priority topics: its priority.
    pub priority: Option<u32>,
    /// Time-based topics: its due time (Unix ms).
    pub due_ms: Option<i64>,
    score: i64,
}

/// A dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Merge key.
    pub key: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
    /// Slot.
    pub slot: u32,
    /// Deliveries it had.
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// When it died (Unix ms, server clock).
    pub dead_at_ms: i64,
    /// How many times this key died (dead letters of one key merge).
    pub deaths: u32,
}

/// Which dead letters an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadSelection {
    /// The dead letter of one merge key.
    Key(Vec<u8>),
    /// All of them.
    All,
}

impl Topic {
    async fn per_slot(&self, id: ScriptId, args: &[&[u8]]) -> Result<Vec<redis::Value>> {
        let mut out = Vec::with_capacity(self.spec.slots as usize);
        let all: Vec<u32> = (0..self.spec.slots).collect();
        for chunk in all.chunks(SLOTS_PER_ROUND) {
            let calls = chunk
                .iter()
                .map(|&s| (id, scripts::call(id, &self.slot_keys(s), args)))
                .collect();
            for r in self.redis().run(calls).await? {
                out.push(r?);
            }
        }
        Ok(out)
    }

    /// Depth per state and counters, per slot and in total.
    pub async fn stats(&self) -> Result<TopicStats> {
        let replies = self
            .per_slot(ScriptId::Stats, &[self.spec.kind.code().as_bytes()])
            .await?;
        let mut total = Stats::default();
        let mut slots = Vec::with_capacity(replies.len());
        let mut server_ms = 0;
        for v in replies {
            let a = items(v);
            server_ms = int_at(&a, 0).unwrap_or(0);
            let n = |i| u64::try_from(int_at(&a, i).unwrap_or(0)).unwrap_or(0);
            let mut s = Stats {
                pending: n(1),
                due_now: n(2),
                scheduled: n(1).saturating_sub(n(2)),
                retry_waiting: n(3),
                in_flight: n(4),
                behind_in_flight: n(5),
                dead: n(6),
                ..Stats::default()
            };
            let mut i = 7;
            while i + 1 < a.len() {
                let name = bytes_at(&a, i).unwrap_or_default();
                let v = a
                    .get(i + 1)
                    .and_then(as_int)
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0);
                match name.as_slice() {
                    b"sent" => s.sent = v,
                    b"merged" => s.merged = v,
                    b"delivered" => s.delivered = v,
                    b"acked" => s.acked = v,
                    b"retried" => s.retried = v,
                    b"dead" => s.dead_lettered = v,
                    b"dropped" => s.dead_dropped = v,
                    _ => {}
                }
                i += 2;
            }
            total.add(&s);
            slots.push(s);
        }
        Ok(TopicStats {
            total,
            slots,
            server_ms,
        })
    }

    /// The next `limit` pending messages in consumption order (priority:
    /// highest first, FIFO among equals; time-based: earliest due first),
    /// merged across slots. Takes nothing.
    pub async fn peek(&self, limit: usize) -> Result<Vec<Pending>> {
        let lim = limit.min(10_000).to_string();
        let replies = self
            .per_slot(
                ScriptId::Peek,
                &[self.spec.kind.code().as_bytes(), lim.as_bytes()],
            )
            .await?;
        let mut all = Vec::new();
        for (slot, v) in replies.into_iter().enumerate() {
            let a = items(v);
            let mut i = 1;
            while i + 3 < a.len() {
                let score = int_at(&a, i + 3).unwrap_or(0);
                let (priority, due_ms) =
                    crate::message::Received::score_fields(self.spec.kind, score);
                all.push(Pending {
                    key: bytes_at(&a, i).unwrap_or_default(),
                    payload: bytes_at(&a, i + 1).unwrap_or_default(),
                    slot: slot as u32,
                    attempts: u32::try_from(int_at(&a, i + 2).unwrap_or(0)).unwrap_or(0),
                    priority,
                    due_ms,
                    score,
                });
                i += 4;
            }
        }
        match self.spec.kind {
            TopicKind::Priority => {
                all.sort_by(|a, b| b.score.cmp(&a.score).then(a.slot.cmp(&b.slot)))
            }
            _ => all.sort_by(|a, b| a.score.cmp(&b.score).then(a.slot.cmp(&b.slot))),
        }
        all.truncate(limit);
        Ok(all)
    }

    /// Up to `limit` dead letters, oldest death first within each slot.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>> {
        let lim = limit.min(100_000).to_string();
        let replies = self.per_slot(ScriptId::DeadList, &[lim.as_bytes()]).await?;
        let mut all = Vec::new();
        for (slot, v) in replies.into_iter().enumerate() {
            let a = items(v);
            let mut i = 0;
            while i + 6 < a.len() {
                all.push(DeadLetter {
                    key: bytes_at(&a, i).unwrap_or_default(),
                    payload: bytes_at(&a, i + 1).unwrap_or_default(),
                    slot: slot as u32,
                    attempts: u32::try_from(int_at(&a, i + 2).unwrap_or(0)).unwrap_or(0),
                    dead_at_ms: int_at(&a, i + 4).unwrap_or(0),
                    deaths: u32::try_from(int_at(&a, i + 5).unwrap_or(1)).unwrap_or(1),
                    error: String::from_utf8_lossy(&bytes_at(&a, i + 6).unwrap_or_default())
                        .into_owned(),
                });
                i += 7;
            }
        }
        all.sort_by(|a, b| a.dead_at_ms.cmp(&b.dead_at_ms).then(a.slot.cmp(&b.slot)));
        all.truncate(limit);
        Ok(all)
    }

    /// Puts dead letters back as fresh messages (no attempts counted).
    /// Returns how many were requeued and how many merged into a message
    /// of the same key that was already waiting. [`DeadSelection::All`]
    /// takes the letters that were dead when the call started (server
    /// clock, per slot), each at most once: a message requeued and dead
    /// again while the call runs stays dead, so the call always ends.
    pub async fn requeue_dead(&self, which: DeadSelection) -> Result<(u64, u64)> {
        let kind = self.spec.kind.code().as_bytes();
        let mut requeued = 0;
        let mut merged = 0;
        let mut run = |v: redis::Value| {
            let a = items(v);
            requeued += u64::try_from(int_at(&a, 0).unwrap_or(0)).unwrap_or(0);
            merged += u64::try_from(int_at(&a, 1).unwrap_or(0)).unwrap_or(0);
            int_at(&a, 0).unwrap_or(0) + int_at(&a, 1).unwrap_or(0)
        };
        match which {
            DeadSelection::Key(key) => {
                // Every slot: a message sent with a slot basis lives apart from its key's hash.
                self.check_key(&key)?;
                for chunk in (0..self.spec.slots)
                    .collect::<Vec<_>>()
                    .chunks(SLOTS_PER_ROUND)
                {
                    let slot_names: Vec<String> = chunk.iter().map(|s| s.to_string()).collect();
                    let channels: Vec<_> = chunk.iter().map(|&s| self.channel_for(s)).collect();
                    let calls = chunk
                        .iter()
                        .zip(&slot_names)
                        .zip(&channels)
                        .map(|((&slot, s), channel)| {
                            let args: [&[u8]; 6] =
                                [kind, channel.as_bytes(), s.as_bytes(), b"0", b"1", &key];
                            (
                                ScriptId::DeadRequeue,
                                scripts::call(ScriptId::DeadRequeue, &self.slot_keys(slot), &args),
                            )
                        })
                        .collect();
                    for r in self.redis().run(calls).await? {
                        run(r?);
                    }
                }
            }
            DeadSelection::All => {
                // What was dead when the slot's first call ran, each at most
                // once: a message that dies again meanwhile stays dead. A
                // call takes up to 10,000 letters (the default cap per slot)
                // at once, so a slot is usually done in one atomic call.
                for slot in 0..self.spec.slots {
                    let s = slot.to_string();
                    let channel = self.channel_for(slot);
                    let mut before = String::new();
                    let per_call = REQUEUE_PER_CALL.to_string();
                    loop {
                        let args: [&[u8]; 7] = [
                            kind,
                            channel.as_bytes(),
                            s.as_bytes(),
                            b"1",
                            per_call.as_bytes(),
                            b"",
                            before.as_bytes(),
                        ];
                        let cmd =
                            scripts::call(ScriptId::DeadRequeue, &self.slot_keys(slot), &args);
                        let reply = self.redis().run_one(ScriptId::DeadRequeue, cmd).await?;
                        if before.is_empty() {
                            let bound = int_at(&items(reply.clone()), 2).unwrap_or(0);
                            before = bound.to_string();
                        }
                        if run(reply) < REQUEUE_PER_CALL {
                            break;
                        }
                    }
                }
            }
        }
        Ok((requeued, merged))
    }

    /// Deletes dead letters for good; returns how many.
    pub async fn purge_dead(&self, which: DeadSelection) -> Result<u64> {
        let mut purged = 0u64;
        match which {
            DeadSelection::Key(key) => {
                self.check_key(&key)?;
                let args: [&[u8]; 3] = [b"0", b"1", &key];
                for r in self.per_slot(ScriptId::DeadPurge, &args).await? {
                    purged += u64::try_from(as_int(&r).unwrap_or(0)).unwrap_or(0);
                }
            }
            DeadSelection::All => {
                for slot in 0..self.spec.slots {
                    loop {
                        let args: [&[u8]; 3] = [b"1", b"1000", b""];
                        let cmd = scripts::call(ScriptId::DeadPurge, &self.slot_keys(slot), &args);
                        let v = self.redis().run_one(ScriptId::DeadPurge, cmd).await?;
                        let n = u64::try_from(as_int(&v).unwrap_or(0)).unwrap_or(0);
                        purged += n;
                        if n < 1000 {
                            break;
                        }
                    }
                }
            }
        }
        Ok(purged)
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "the merge key is empty",
            ));
        }
        Ok(())
    }
}
