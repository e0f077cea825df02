//! Property test: random sequences of send / take / ack / ack-and-take
//! (one call: the ack, then the slot's next messages) / nack / dead /
//! release / extend / consumer crash (deliveries abandoned, their leases
//! expire and the next take reclaims them) / cancel / reschedule / pause /
//! resume against a plain in-memory model of one priority slot. After
//! every step the pending order (I3), the merge state (I2) and the ledger
//! (I1: every message in exactly one place, counters balanced) must match,
//! and so must what each cancel and reschedule answered. Every delivery's
//! stable id must name exactly one message version (the model's identity
//! of the message and its payload): retries after a nack or an expired
//! lease, and reschedules, keep it; a new message, a merged payload, or a
//! first delivery handed back with a release get another.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rmq::{
    CancelOutcome, Delivery, Ending, ErrorKind, Message, Moved, PendingLayout, Reschedule, Settled,
    State, Topic, TopicKind, TopicSpec,
};

const MAX_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
enum Op {
    Send {
        key: u8,
        prio: u32,
    },
    /// One batch of keys b0..b(n-1), merging into those already there:
    /// enough of them to turn the slot's flat pending set into buckets and
    /// split them (pending.lua); large takes turn it flat again.
    SendMany {
        n: usize,
        prio: u32,
    },
    Take {
        n: usize,
    },
    Ack(usize),
    Nack(usize),
    Dead(usize),
    Release(usize),
    /// Acks everything in hand at once (one batched settle call).
    AckAll,
    /// Acks a delivery in hand and takes up to `n` of the slot's next
    /// messages in the same call.
    AckTake(usize, usize),
    /// Extends the lease of a delivery in hand (by the lease).
    Extend(usize),
    /// Takes through the topic's on-demand engine (what HTTP take uses).
    TakeOnDemand {
        n: usize,
    },
    /// Ends a delivery in hand by its receipt, sealed and opened again
    /// (what HTTP settle does): 0 ack, 1 nack, 2 dead, 3 release.
    ByReceipt(usize, u8),
    /// The consumer dies: every delivery in hand is abandoned without a
    /// word; after their leases expire, the next take rolls them back as
    /// failed attempts (dead after the maximum).
    Crash,
    Cancel {
        key: u8,
    },
    Reschedule {
        key: u8,
        prio: u32,
    },
    Pause,
    Resume,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u32..3).prop_map(|(key, prio)| Op::Send { key, prio }),
        3 => (1usize..4).prop_map(|n| Op::Take { n }),
        1 => (60usize..200, 0u32..3).prop_map(|(n, prio)| Op::SendMany { n, prio }),
        1 => (20usize..120).prop_map(|n| Op::Take { n }),
        2 => any::<usize>().prop_map(Op::Ack),
        2 => any::<usize>().prop_map(Op::Nack),
        1 => any::<usize>().prop_map(Op::Dead),
        1 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::AckAll),
        2 => (any::<usize>(), 1usize..4).prop_map(|(i, n)| Op::AckTake(i, n)),
        3 => (0u8..3).prop_map(|key| Op::Cancel { key }),
        2 => (0u8..3, 0u32..3).prop_map(|(key, prio)| Op::Reschedule { key, prio }),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        2 => (1usize..4).prop_map(|n| Op::TakeOnDemand { n }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(i, how)| Op::ByReceipt(i, how)),
    ]
}

fn op_with_crashes() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => op(),
        2 => any::<usize>().prop_map(Op::Extend),
        1 => Just(Op::Crash),
    ]
}

/// Expired leases a take rolls back at most (take.lua's step 1).
const ROLLBACKS_PER_TAKE: usize = 100;

/// Crash runs: leases this long (long enough that no lease expires between
/// ordinary steps even on a loaded machine), and a crash waits this long.
const CRASH_LEASE: Duration = Duration::from_millis(1500);
const CRASH_WAIT: Duration = Duration::from_millis(1700);

#[derive(Debug, Clone, PartialEq)]
struct Rec {
    payload: String,
    prio: u32,
    seq: u64,
    attempts: u32,
    /// Which message this is: set when it is sent as a new one, kept by its
    /// retries (a released first delivery starts again as a new one).
    ident: u64,
}

#[derive(Default, Debug)]
struct Model {
    pending: BTreeMap<String, Rec>,
    in_flight: BTreeMap<String, Rec>,
    parked: BTreeMap<String, Rec>,
    dead: BTreeMap<String, (String, u32)>,
    seq: u64,
    idents: u64,
    sent: u64,
    merged: u64,
    acked: u64,
    /// In flight, abandoned by a crash: rolled back by the next take.
    abandoned: Vec<String>,
    /// In flight and cancelled: their delivery is the last.
    cancelled_in_flight: BTreeSet<String>,
    cancelled: u64,
    paused: bool,
    /// The topic's bound (max pending), if any.
    bound: Option<u64>,
}

impl Model {
    /// Messages held: what a bound counts.
    fn held(&self) -> u64 {
        (self.pending.len() + self.in_flight.len() + self.parked.len()) as u64
    }

    /// Whether a send of `key` now would be refused as full: it adds a
    /// message (merges never do) and the topic holds its bound.
    fn full_for(&self, key: &str) -> bool {
        let adds = if self.in_flight.contains_key(key) {
            !self.parked.contains_key(key)
        } else {
            !self.pending.contains_key(key)
        };
        adds && self.bound.is_some_and(|b| self.held() >= b)
    }

    fn new_ident(&mut self) -> u64 {
        self.idents += 1;
        self.idents
    }

    fn send(&mut self, key: &str, prio: u32, payload: String) -> (bool, bool) {
        self.sent += 1;
        if self.in_flight.contains_key(key) {
            if let Some(p) = self.parked.get_mut(key) {
                p.payload = payload;
                p.prio = prio;
                self.merged += 1;
                return (true, true);
            }
            self.seq += 1;
            let ident = self.new_ident();
            self.parked.insert(
                key.into(),
                Rec {
                    payload,
                    prio,
                    seq: self.seq,
                    attempts: 0,
                    ident,
                },
            );
            return (false, true);
        }
        if let Some(p) = self.pending.get_mut(key) {
            p.payload = payload;
            p.prio = prio;
            self.merged += 1;
            return (true, false);
        }
        self.seq += 1;
        let ident = self.new_ident();
        self.pending.insert(
            key.into(),
            Rec {
                payload,
                prio,
                seq: self.seq,
                attempts: 0,
                ident,
            },
        );
        (false, false)
    }

    fn order(&self) -> Vec<(String, Rec)> {
        let mut v: Vec<_> = self
            .pending
            .iter()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        v.sort_by(|a, b| b.1.prio.cmp(&a.1.prio).then(a.1.seq.cmp(&b.1.seq)));
        v
    }

    fn take(&mut self, n: usize) -> Vec<(String, Rec)> {
        // Expired leases are rolled back first, as failed attempts: at
        // most ROLLBACKS_PER_TAKE a call, the first to expire first (equal
        // deadlines: in the order they were taken, the ids' order); the
        // rest stay in flight until a later take.
        let back = self.abandoned.len().min(ROLLBACKS_PER_TAKE);
        let keys: Vec<String> = self.abandoned.drain(..back).collect();
        for key in keys {
            self.nack(&key);
        }
        if self.paused {
            return Vec::new();
        }
        let taken: Vec<_> = self.order().into_iter().take(n).collect();
        for (k, r) in &taken {
            self.pending.remove(k);
            let mut r = r.clone();
            r.attempts += 1;
            self.in_flight.insert(k.clone(), r);
        }
        taken
            .into_iter()
            .map(|(k, mut r)| {
                r.attempts += 1;
                (k, r)
            })
            .collect()
    }

    fn unpark(&mut self, key: &str) -> bool {
        match self.parked.remove(key) {
            Some(p) => {
                self.pending.insert(key.into(), p);
                true
            }
            None => false,
        }
    }

    fn ack(&mut self, key: &str) {
        self.cancelled_in_flight.remove(key);
        self.in_flight.remove(key);
        self.acked += 1;
        self.unpark(key);
    }

    fn bury(&mut self, key: &str, r: Rec) {
        self.dead.insert(key.into(), (r.payload, r.attempts));
        self.unpark(key);
    }

    /// A cancelled delivery that ends otherwise than by an ack: gone, and
    /// a duplicate parked behind it moves in.
    fn end_cancelled(&mut self, key: &str) -> bool {
        if !self.cancelled_in_flight.remove(key) {
            return false;
        }
        self.in_flight.remove(key);
        self.cancelled += 1;
        self.unpark(key);
        true
    }

    fn nack(&mut self, key: &str) {
        if self.end_cancelled(key) {
            return;
        }
        let Some(r) = self.in_flight.remove(key) else {
            return;
        };
        if r.attempts >= MAX_ATTEMPTS {
            return self.bury(key, r);
        }
        if self.unpark(key) {
            self.merged += 1;
        } else {
            self.pending.insert(key.into(), r);
        }
    }

    fn dead(&mut self, key: &str) {
        if self.end_cancelled(key) {
            return;
        }
        if let Some(r) = self.in_flight.remove(key) {
            self.bury(key, r);
        }
    }

    fn release(&mut self, key: &str) {
        if self.end_cancelled(key) {
            return;
        }
        let Some(mut r) = self.in_flight.remove(key) else {
            return;
        };
        r.attempts -= 1;
        if r.attempts == 0 {
            // Handed back before any attempt counted: delivered again as
            // a first delivery, a new message downstream.
            r.ident = self.new_ident();
        }
        if self.unpark(key) {
            self.merged += 1;
        } else {
            self.pending.insert(key.into(), r);
        }
    }
}

impl Model {
    fn cancel(&mut self, key: &str) -> CancelOutcome {
        if self.pending.remove(key).is_some() {
            self.cancelled += 1;
            return CancelOutcome::Cancelled(State::Pending);
        }
        if self.in_flight.contains_key(key) {
            if self.parked.remove(key).is_some() {
                self.cancelled += 1; // the duplicate parked behind it goes
            }
            let already = !self.cancelled_in_flight.insert(key.into());
            return CancelOutcome::WillNotRetry { already };
        }
        if self.dead.contains_key(key) {
            return CancelOutcome::Dead;
        }
        CancelOutcome::Absent
    }

    /// The new priority of the waiting message of `key`, at the back of
    /// its FIFO: the pending one, or the one parked behind a delivery.
    fn reschedule(&mut self, key: &str, prio: u32) -> Option<Moved> {
        let (moved, rec) = match (self.pending.get_mut(key), self.parked.get_mut(key)) {
            (Some(r), _) => (Moved::Pending, r),
            (None, Some(r)) => (Moved::Parked, r),
            (None, None) => return None,
        };
        self.seq += 1;
        rec.prio = prio;
        rec.seq = self.seq;
        Some(moved)
    }
}

/// The head index (one node: `index` is a connection to it) never sends a
/// consumer to sleep past work: a slot with pending messages (not paused)
/// has an entry no later than its best one, a slot with messages in
/// flight has an entry (no later than their lease deadline).
async fn check_head_index(
    topic: &Topic,
    m: &Model,
    index: Option<&redis::aio::MultiplexedConnection>,
) -> Result<(), TestCaseError> {
    let Some(conn) = index else { return Ok(()) };
    let slot_key = &topic.keys_of_slot(0)[0];
    let prefix = slot_key.split(":{").next().unwrap_or_default();
    let key = format!("{prefix}:heads#{}", topic.name());
    let entry: Option<f64> = redis::cmd("ZSCORE")
        .arg(&key)
        .arg(0)
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let best = m.pending.values().map(|r| r.prio).max();
    if let (Some(best), false) = (best, m.paused) {
        let bound = -((i64::from(best)) << 32) as f64;
        prop_assert!(
            entry.is_some_and(|v| v <= bound),
            "pending priority {best}, yet the head index says {entry:?}"
        );
    }
    if !m.in_flight.is_empty() || !m.parked.is_empty() {
        prop_assert!(entry.is_some(), "in flight, yet no head index entry");
    }
    // No consumer waits on the marks here, so none is taken: every head
    // the slot had was marked, and a mark is only ever lowered.
    let marks = format!("{prefix}:marks#{}", topic.name());
    let mark: Option<f64> = redis::cmd("ZSCORE")
        .arg(&marks)
        .arg(0)
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    if let (Some(best), false) = (best, m.paused) {
        let bound = -((i64::from(best)) << 32) as f64;
        prop_assert!(
            mark.is_some_and(|v| v <= bound),
            "pending priority {best}, yet the slot's mark is {mark:?}"
        );
    }
    Ok(())
}

async fn check(topic: &Topic, m: &Model) -> Result<(), TestCaseError> {
    let peek = topic
        .peek(1000)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let got: Vec<_> = peek
        .iter()
        .map(|p| {
            (
                text(&p.key),
                text(&p.payload),
                p.priority.unwrap_or(99),
                p.attempts,
            )
        })
        .collect();
    let want: Vec<_> = m
        .order()
        .into_iter()
        .map(|(k, r)| (k, r.payload, r.prio, r.attempts))
        .collect();
    prop_assert_eq!(got, want, "pending order and contents");
    let st = topic
        .stats()
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .total;
    prop_assert_eq!(st.in_flight as usize, m.in_flight.len());
    prop_assert_eq!(st.behind_in_flight as usize, m.parked.len());
    prop_assert_eq!(st.dead as usize, m.dead.len());
    prop_assert_eq!((st.sent, st.merged, st.acked), (m.sent, m.merged, m.acked));
    prop_assert_eq!(st.cancelled, m.cancelled);
    prop_assert_eq!(st.paused_slots, u64::from(m.paused));
    if let Some(bound) = m.bound {
        // The bound's count is what the topic holds, once the room given
        // back after settles (in the background) has landed.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let usage = topic
                .bound_usage()
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            if usage == Some((m.held(), bound)) || std::time::Instant::now() > deadline {
                prop_assert_eq!(usage, Some((m.held(), bound)), "the bound's count");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let dead = topic
        .dead_letters(100)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    for d in dead {
        let (payload, attempts) = m.dead.get(&text(&d.key)).cloned().unwrap_or_default();
        prop_assert_eq!((text(&d.payload), d.attempts), (payload, attempts));
    }
    Ok(())
}

#[test]
fn protocol_matches_the_model_after_every_step() {
    run_model(100, 50, op().boxed(), Duration::from_secs(600), None, None);
}

#[test]
fn crashes_and_lease_expiry_match_the_model() {
    run_model(12, 25, op_with_crashes().boxed(), CRASH_LEASE, None, None);
}

/// With a bound of 2 (three keys), a send that would add a message to a
/// topic holding two is refused as Full and changes nothing; merges pass;
/// every end (ack, dead, cancel, superseded, a crash's rolled-back lease)
/// gives its room back, so the count is always what the topic holds.
#[test]
fn a_bound_refuses_only_new_messages_of_a_full_topic_and_counts_exactly() {
    run_model(
        30,
        40,
        op().boxed(),
        Duration::from_secs(600),
        None,
        Some(2),
    );
    run_model(6, 25, op_with_crashes().boxed(), CRASH_LEASE, None, Some(2));
}

/// With an in-flight cap of 2, a take gets at most what the cap leaves
/// (permits are freed after the settle, in the background, so a take may
/// get fewer), and what it gets is the model's next messages in order:
/// the cap decides how many, never which.
#[test]
fn an_in_flight_cap_trims_takes_and_changes_nothing_else() {
    run_model(
        40,
        40,
        op().boxed(),
        Duration::from_secs(600),
        Some(2),
        None,
    );
}

/// What a take got must be the model's next messages, in order; and each
/// delivery's stable id must name exactly one message version (`ids`:
/// stable id -> version; `versions`: version -> stable id).
fn check_taken(
    got: &[Delivery],
    want: Vec<(String, Rec)>,
    ids: &mut BTreeMap<String, (u64, String)>,
    versions: &mut BTreeMap<(u64, String), String>,
) -> Result<(), TestCaseError> {
    let g: Vec<_> = got
        .iter()
        .map(|d| {
            (
                text(&d.key),
                text(&d.payload),
                d.priority.unwrap_or(99),
                d.attempt,
            )
        })
        .collect();
    let versions_taken: Vec<(u64, String)> = want
        .iter()
        .map(|(_, r)| (r.ident, r.payload.clone()))
        .collect();
    let w: Vec<_> = want
        .into_iter()
        .map(|(k, r)| (k, r.payload, r.prio, r.attempts))
        .collect();
    prop_assert_eq!(g, w, "take order");
    for (d, version) in got.iter().zip(versions_taken) {
        let id = d.stable_id();
        let named = ids.entry(id.clone()).or_insert(version.clone());
        prop_assert_eq!(&*named, &version, "stable id {} names two messages", id);
        let had = versions.entry(version).or_insert(id.clone());
        prop_assert_eq!(&*had, &id, "one message, two stable ids");
    }
    Ok(())
}

fn run_model(
    cases: u32,
    max_ops: usize,
    ops: BoxedStrategy<Op>,
    lease: Duration,
    cap: Option<u32>,
    bound: Option<u64>,
) {
    let backend = Backend::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(backend.connect());
    let index = match &backend {
        Backend::Single(server) => rt.block_on(async {
            let c = redis::Client::open(server.url()).unwrap();
            Some(c.get_multiplexed_async_connection().await.unwrap())
        }),
        Backend::Cluster(_) => None,
    };
    let case = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(ops, 1..max_ops), |ops| {
            rt.block_on(async {
                let n = case.fetch_add(1, Ordering::SeqCst);
                let name = format!("t{n}");
                // Half the cases on each layout: a compact topic's slot
                // crosses between one set and buckets as batches come and go.
                let layout = if n % 2 == 0 {
                    PendingLayout::Compact
                } else {
                    PendingLayout::Flat
                };
                let topic = client
                    .define_topic(
                        TopicSpec::new(name, TopicKind::Priority)
                            .slots(1)
                            .max_attempts(MAX_ATTEMPTS)
                            .lease(lease)
                            // A rolled-back lease goes straight back to its place.
                            .backoff(Duration::ZERO, Duration::ZERO)
                            .max_in_flight(cap.unwrap_or(0))
                            .max_pending(bound.unwrap_or(0))
                            .pending_layout(layout),
                    )
                    .await
                    .unwrap();
                let mut model = Model {
                    bound,
                    ..Model::default()
                };
                let mut hand: Vec<Delivery> = Vec::new();
                let on_demand = topic.on_demand();
                let receipt_key = client.receipt_key().await.unwrap();
                // Stable id <-> (identity, payload): one to one.
                let mut ids = BTreeMap::<String, (u64, String)>::new();
                let mut versions = BTreeMap::<(u64, String), String>::new();
                let mut payloads = 0;
                for op in ops {
                    match op {
                        Op::Send { key, prio } => {
                            payloads += 1;
                            let (key, payload) = (format!("k{key}"), format!("p{payloads}"));
                            let sent = topic
                                .send(
                                    Message::new(payload.clone())
                                        .key(key.clone())
                                        .priority(prio),
                                )
                                .await;
                            if model.full_for(&key) {
                                let kind = sent.map(|_| ()).map_err(|e| e.kind());
                                prop_assert_eq!(
                                    kind,
                                    Err(ErrorKind::Full),
                                    "send {} to a full topic",
                                    key
                                );
                                check(&topic, &model).await?;
                                check_head_index(&topic, &model, index.as_ref()).await?;
                                continue;
                            }
                            let sent = sent.unwrap();
                            let (merged, behind) = model.send(&key, prio, payload);
                            prop_assert_eq!((sent.merged, sent.behind_in_flight), (merged, behind));
                        }
                        Op::SendMany { n, prio } => {
                            let batch: Vec<(String, String)> = (0..n)
                                .map(|i| {
                                    payloads += 1;
                                    (format!("b{i}"), format!("p{payloads}"))
                                })
                                .collect();
                            let messages: Vec<Message> = batch
                                .iter()
                                .map(|(k, p)| Message::new(p.clone()).key(k.clone()).priority(prio))
                                .collect();
                            let report = topic.send_batch(&messages).await.unwrap();
                            for ((key, payload), sent) in batch.into_iter().zip(report.results) {
                                if model.full_for(&key) {
                                    let kind = sent.map(|_| ()).map_err(|e| e.kind());
                                    prop_assert_eq!(
                                        kind,
                                        Err(ErrorKind::Full),
                                        "batch send {} to a full topic",
                                        key
                                    );
                                    continue;
                                }
                                let sent = sent.unwrap();
                                let (merged, behind) = model.send(&key, prio, payload);
                                prop_assert_eq!(
                                    (sent.merged, sent.behind_in_flight),
                                    (merged, behind)
                                );
                            }
                        }
                        Op::Take { n } => {
                            let got = topic.take(n).await.unwrap();
                            let want = match cap {
                                None => model.take(n),
                                Some(c) => {
                                    prop_assert!(
                                        hand.len() + got.len() <= c as usize,
                                        "{} in hand and {} taken under a cap of {c}",
                                        hand.len(),
                                        got.len()
                                    );
                                    model.take(got.len())
                                }
                            };
                            check_taken(&got, want, &mut ids, &mut versions)?;
                            hand.extend(got);
                        }
                        Op::Ack(i) | Op::Nack(i) | Op::Dead(i) | Op::Release(i)
                            if !hand.is_empty() =>
                        {
                            let d = hand.remove(i % hand.len());
                            let key = text(&d.key);
                            match op {
                                Op::Ack(_) => {
                                    d.ack().await.unwrap();
                                    model.ack(&key);
                                }
                                Op::Nack(_) => {
                                    let was = model.cancelled_in_flight.contains(&key);
                                    let s = d.nack(Some(Duration::ZERO), "failed").await.unwrap();
                                    prop_assert_eq!(s == Settled::Cancelled, was);
                                    model.nack(&key);
                                }
                                Op::Dead(_) => {
                                    let was = model.cancelled_in_flight.contains(&key);
                                    let s = d.dead("poison").await.unwrap();
                                    prop_assert_eq!(s == Settled::Cancelled, was);
                                    model.dead(&key);
                                }
                                _ => {
                                    d.release().await.unwrap();
                                    model.release(&key);
                                }
                            }
                        }
                        Op::TakeOnDemand { n } => {
                            let got = on_demand.take(n, lease, Duration::ZERO).await.unwrap();
                            let want = match cap {
                                None => model.take(n),
                                Some(c) => {
                                    prop_assert!(hand.len() + got.len() <= c as usize);
                                    model.take(got.len())
                                }
                            };
                            check_taken(&got, want, &mut ids, &mut versions)?;
                            hand.extend(got);
                        }
                        Op::ByReceipt(i, how) if !hand.is_empty() => {
                            let d = hand.remove(i % hand.len());
                            let key = text(&d.key);
                            let was = model.cancelled_in_flight.contains(&key);
                            let sealed = receipt_key.seal(topic.name(), &d.into_receipt());
                            let r = receipt_key.open(topic.name(), &sealed).unwrap();
                            let ending = match how {
                                0 => Ending::Ack,
                                1 => Ending::Nack {
                                    delay: Some(Duration::ZERO),
                                    error: "failed".into(),
                                },
                                2 => Ending::Dead {
                                    error: "poison".into(),
                                },
                                _ => Ending::Release,
                            };
                            let s = topic
                                .settle_receipts(vec![(r, ending)])
                                .await
                                .pop()
                                .unwrap()
                                .unwrap();
                            match how {
                                0 => model.ack(&key),
                                1 => {
                                    prop_assert_eq!(s == Settled::Cancelled, was);
                                    model.nack(&key);
                                }
                                2 => {
                                    prop_assert_eq!(s == Settled::Cancelled, was);
                                    model.dead(&key);
                                }
                                _ => model.release(&key),
                            }
                        }
                        Op::AckTake(i, n) if !hand.is_empty() => {
                            let d = hand.remove(i % hand.len());
                            let key = text(&d.key);
                            let got = d.ack_and_take(n).await.unwrap();
                            model.ack(&key);
                            // A capped topic's take needs permits first: it
                            // only acks.
                            let want = match cap {
                                None => model.take(n),
                                Some(_) => Vec::new(),
                            };
                            check_taken(&got, want, &mut ids, &mut versions)?;
                            hand.extend(got);
                        }
                        Op::AckAll => {
                            let all = std::mem::take(&mut hand);
                            let keys: Vec<String> = all.iter().map(|d| text(&d.key)).collect();
                            for r in
                                futures::future::join_all(all.into_iter().map(|d| d.ack())).await
                            {
                                r.unwrap();
                            }
                            for k in keys {
                                model.ack(&k);
                            }
                        }
                        Op::Extend(i) if !hand.is_empty() => {
                            let d = &hand[i % hand.len()];
                            d.extend(lease).await.unwrap();
                        }
                        Op::Cancel { key } => {
                            let key = format!("k{key}");
                            let got = topic.cancel(&[key.as_bytes()]).await.unwrap();
                            prop_assert_eq!(got, vec![model.cancel(&key)], "cancel {}", key);
                        }
                        Op::Reschedule { key, prio } => {
                            let key = format!("k{key}");
                            let got = topic
                                .reschedule(key.as_bytes(), Reschedule::Priority(prio))
                                .await
                                .map(|r| r.moved)
                                .map_err(|e| e.kind());
                            let want = model.reschedule(&key, prio).ok_or(ErrorKind::NotWaiting);
                            prop_assert_eq!(got, want, "reschedule {}", key);
                        }
                        Op::Pause => {
                            topic.pause().await.unwrap();
                            model.paused = true;
                        }
                        Op::Resume => {
                            topic.resume().await.unwrap();
                            model.paused = false;
                        }
                        Op::Crash => {
                            for d in hand.drain(..) {
                                model.abandoned.push(text(&d.key));
                                // Gone without a word: no release, no nack.
                                std::mem::forget(d);
                            }
                            tokio::time::sleep(lease + (CRASH_WAIT - CRASH_LEASE)).await;
                        }
                        _ => {}
                    }
                    check(&topic, &model).await?;
                    check_head_index(&topic, &model, index.as_ref()).await?;
                }
                for d in hand {
                    d.release().await.unwrap();
                }
                Ok(())
            })
        })
        .unwrap();
}
