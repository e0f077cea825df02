//! Inspection and operations, apart from the hot path: depth per state and
//! counters, peeking at the next messages, and the dead letters (list,
//! requeue, purge). The CLI is a thin layer over these calls.
//!
//! Their cost is bounded per call whatever the slot count: readings cover
//! many slots per call (`readings`), peek and the dead-letter listing
//! fetch only from slots that can hold what they show (`ordered`), and
//! the dead-letter operations visit only slots that hold dead letters.

mod dead;
mod due;
mod ordered;
mod readings;
mod requeue;

pub use dead::{DeadLetter, DeadSelection};

use std::cmp::Reverse;
use std::collections::HashSet;

use ordered::Page;

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::scripts::admin::{self, Firsts, FirstsOf, Peeked, SlotStats};
use crate::scripts::ScriptId;
use crate::topic::{Topic, TopicKind};

/// Single-slot calls per pipeline in admin operations.
const SLOTS_PER_ROUND: usize = 256;

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
    /// Messages cancelled ([`Topic::cancel`]), waiting or in flight.
    pub cancelled: u64,
    /// Paused slots (1 or 0 for a slot; a topic's total says how many of
    /// its slots are paused: all of them after [`Topic::pause`]).
    pub paused_slots: u64,
}

impl Stats {
    /// Messages held, waiting or in flight (what a bound counts): pending,
    /// retry-waiting, in flight and parked behind an in-flight delivery.
    /// Dead letters are not held.
    pub fn held(&self) -> u64 {
        self.pending + self.retry_waiting + self.in_flight + self.behind_in_flight
    }

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
        self.cancelled += o.cancelled;
        self.paused_slots += o.paused_slots;
    }
}

/// Stats of a topic: totals and per slot.
#[derive(Debug, Clone, Serialize)]
pub struct TopicStats {
    /// Sum over the slots.
    pub total: Stats,
    /// Index = slot.
    pub slots: Vec<Stats>,
    /// Serial mode's lease of each slot (index = slot): who owns it now,
    /// under which epoch, until when.
    pub leases: Vec<SlotLease>,
    /// Server time of the reading (Unix ms).
    pub server_ms: i64,
}

/// A slot's serial-mode lease as a reading saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SlotLease {
    /// The member holding it now; `None` when nobody does (never taken,
    /// released, or expired).
    pub owner: Option<String>,
    /// Its fencing epoch: grows on every change of owner, never resets.
    pub epoch: u64,
    /// When the lease ends unless renewed (Unix ms; 0 when never taken).
    pub until_ms: i64,
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

impl Topic {
    /// One call per slot of `slots`, `call(keys of the slot, slot)` making
    /// it; each slot's own result, in the order of `slots` (a failed round
    /// trip stops the rounds; a slot's failed call does not).
    async fn each_slot_of(
        &self,
        slots: &[u32],
        call: impl Fn(&[String], u32) -> (ScriptId, redis::Cmd),
    ) -> Result<Vec<Result<redis::Value>>> {
        let calls = slots.iter().map(|&s| call(&self.slot_keys(s), s)).collect();
        self.in_rounds(calls).await
    }

    /// Runs single-slot calls, pipelined 256 per round trip; each call's
    /// own result, in order.
    async fn in_rounds(
        &self,
        calls: Vec<(ScriptId, redis::Cmd)>,
    ) -> Result<Vec<Result<redis::Value>>> {
        let mut out = Vec::with_capacity(calls.len());
        let mut calls = calls.into_iter().peekable();
        while calls.peek().is_some() {
            let round: Vec<_> = calls.by_ref().take(SLOTS_PER_ROUND).collect();
            out.extend(self.redis().run(round).await?);
        }
        Ok(out)
    }

    /// Where each slot's queues (those `of` names) begin, and the server
    /// time: many slots per call on a single node.
    async fn firsts(&self, of: FirstsOf) -> Result<(i64, Vec<(u32, Firsts)>)> {
        let kind = self.spec.kind.code();
        let slots = self.all_slots();
        let r = self
            .read_slots(&slots, Firsts::PER_SLOT, |keys| {
                admin::firsts(keys, kind, of)
            })
            .await?;
        let firsts = (r.parts.chunks_exact(Firsts::PER_SLOT).map(Firsts::parse))
            .zip(slots)
            .map(|(f, slot)| (slot, f))
            .collect();
        Ok((r.server_ms, firsts))
    }

    /// The topic's in-flight cap permits held now across all its consumers
    /// (0 without a cap): with the cap C, at most C deliveries are in
    /// flight, and this says how close to it the topic runs.
    pub async fn in_flight_permits(&self) -> Result<u64> {
        let keys = crate::keys::cap_keys(self.prefix(), self.name());
        let (id, cmd) = crate::scripts::inflight::count(&keys);
        Ok(crate::scripts::inflight::pair(self.redis().run_one(id, cmd).await?).0)
    }

    /// Depth per state and counters, per slot and in total: on a single
    /// node one call per 128 slots, on a cluster one call per slot.
    pub async fn stats(&self) -> Result<TopicStats> {
        let kind = self.spec.kind.code();
        let reading = self
            .read_slots(&self.all_slots(), 1, |keys| admin::stats(keys, kind))
            .await?;
        let mut total = Stats::default();
        let mut slots = Vec::with_capacity(reading.parts.len());
        let mut leases = Vec::with_capacity(reading.parts.len());
        for v in reading.parts {
            let r = SlotStats::parse(v);
            leases.push(SlotLease {
                owner: (!r.lease_owner.is_empty())
                    .then(|| String::from_utf8_lossy(&r.lease_owner).into_owned()),
                epoch: r.lease_epoch,
                until_ms: r.lease_until_ms,
            });
            let mut s = Stats {
                pending: r.pending,
                due_now: r.due_now,
                scheduled: r.pending.saturating_sub(r.due_now),
                retry_waiting: r.retry_waiting,
                in_flight: r.in_flight,
                behind_in_flight: r.behind_in_flight,
                dead: r.dead,
                paused_slots: u64::from(r.paused),
                ..Stats::default()
            };
            for (name, v) in r.counters {
                match name.as_slice() {
                    b"sent" => s.sent = v,
                    b"merged" => s.merged = v,
                    b"delivered" => s.delivered = v,
                    b"acked" => s.acked = v,
                    b"retried" => s.retried = v,
                    b"dead" => s.dead_lettered = v,
                    b"dropped" => s.dead_dropped = v,
                    b"cancelled" => s.cancelled = v,
                    _ => {}
                }
            }
            total.add(&s);
            slots.push(s);
        }
        Ok(TopicStats {
            total,
            slots,
            leases,
            server_ms: reading.server_ms,
        })
    }

    /// The next `limit` pending messages in consumption order (priority:
    /// highest first, FIFO among equals; time-based: earliest due first),
    /// merged across slots. Takes nothing. Fetches only from the slots
    /// whose next message is among the `limit` best next messages. A
    /// reading, not a snapshot: under traffic, a message taken or sent
    /// while it runs may be there or not; none is shown twice.
    pub async fn peek(&self, limit: usize) -> Result<Vec<Pending>> {
        let kind = self.spec.kind;
        let (_, firsts) = self.firsts(FirstsOf::Pending).await?;
        let candidates = firsts
            .into_iter()
            .filter_map(|(slot, f)| Some((slot, (consumption_order(kind, f.pending?), slot))))
            .collect();
        let found = ordered::first_across(
            candidates,
            limit,
            |slot, p: &Peeked| (consumption_order(kind, p.score), slot),
            |asks| self.peek_pages(asks),
        )
        .await?;
        Ok(once_each(found, |p| &p.key)
            .into_iter()
            .map(|(slot, p)| {
                let (priority, due_ms) = crate::message::Received::score_fields(kind, p.score);
                Pending {
                    key: p.key,
                    payload: p.payload,
                    slot,
                    attempts: p.attempts,
                    priority,
                    due_ms,
                    score: p.score,
                }
            })
            .collect())
    }

    /// Pending messages of each (slot, from, count).
    async fn peek_pages(&self, asks: Vec<(u32, usize, usize)>) -> Result<Vec<Page<Peeked>>> {
        let kind = self.spec.kind.code();
        let calls: Vec<_> = asks
            .iter()
            .map(|&(slot, from, count)| {
                let (from, count) = (from.to_string(), count.to_string());
                admin::peek(&self.slot_keys(slot), kind, &count, &from)
            })
            .collect();
        self.pages(calls, Peeked::parse).await
    }

    /// Runs one single-slot reading call per page and parses each slot's part.
    async fn pages<T>(
        &self,
        calls: Vec<(ScriptId, redis::Cmd)>,
        parse: impl Fn(redis::Value) -> (usize, Vec<T>),
    ) -> Result<Vec<Page<T>>> {
        let mut out = Vec::with_capacity(calls.len());
        for reply in self.in_rounds(calls).await? {
            let (_, mut parts) = admin::split_reading(reply?, 1, 1).ok_or_else(|| {
                Error::new(
                    ErrorKind::Redis,
                    "a reading script answered in another shape",
                )
            })?;
            let (scanned, items) = parts.pop().map(&parse).unwrap_or_default();
            out.push(Page { scanned, items });
        }
        Ok(out)
    }
}

/// A pending message's place in consumption order, smallest first: the
/// highest score first on a priority topic, the earliest due time first on
/// the others.
fn consumption_order(kind: TopicKind, score: i64) -> (Reverse<i64>, i64) {
    match kind {
        TopicKind::Priority => (Reverse(score), 0),
        _ => (Reverse(0), score),
    }
}

/// Each (slot, merge key) once, the first kept: a listing's later page of
/// a slot may repeat an item when messages moved ahead of it meanwhile.
fn once_each<T>(found: Vec<(u32, T)>, key: impl Fn(&T) -> &Vec<u8>) -> Vec<(u32, T)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(found.len());
    for (slot, t) in found {
        if seen.insert((slot, key(&t).clone())) {
            out.push((slot, t));
        }
    }
    out
}
