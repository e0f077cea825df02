//! Property test of serial mode (I5) against a plain in-memory model of one
//! slot: random sequences of send / take under the slot's lease / ack /
//! nack / give back after the slot lease was lost (the `'l'` settle a
//! dropped serial delivery sends) / cancel / a handover (the owner's slot
//! lease runs out, another owner takes the slot at a higher epoch) / the
//! message lease running out. After every step the pending order, the
//! counts and every answer must match the model:
//!
//! - at most one delivery of the slot is in flight, whoever's it is: the
//!   new owner takes nothing while the old owner's delivery is out;
//! - a delivery given back after its slot lease was lost, or whose message
//!   lease ran out, goes back at its place (the score it was taken with,
//!   the attempt counted, no backoff), so the next take hands it out again
//!   before the entity's later messages; a nack waits out its backoff;
//! - a settle under a stale epoch is refused (`Fenced`) and changes
//!   nothing.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rmq::{
    CancelOutcome, Delivery, ErrorKind, Message, Settled, State, Topic, TopicKind, TopicSpec,
};

const MAX_ATTEMPTS: u32 = 3;
/// The message lease: long enough that none runs out between ordinary
/// steps on a loaded machine; `Expire` waits past it.
const LEASE: Duration = Duration::from_millis(2000);
const EXPIRE_WAIT: Duration = Duration::from_millis(2300);
/// A nack's backoff: longer than any case, so a nacked message waits.
const BACKOFF: Duration = Duration::from_secs(600);
/// The slot lease of the owner in charge (it never runs out by itself).
const SLOT_LEASE: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
enum Op {
    Send {
        key: u8,
        prio: u32,
    },
    Take,
    Ack(usize),
    Nack(usize),
    /// The `'l'` settle: given back after the slot lease was lost.
    Lost(usize),
    Cancel {
        key: u8,
    },
    /// The owner's slot lease runs out; another owner acquires the slot.
    Handover,
    /// Every delivery's message lease runs out (their owners are frozen:
    /// the deliveries in hand are abandoned).
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u32..3).prop_map(|(key, prio)| Op::Send { key, prio }),
        4 => Just(Op::Take),
        2 => any::<usize>().prop_map(Op::Ack),
        1 => any::<usize>().prop_map(Op::Nack),
        3 => any::<usize>().prop_map(Op::Lost),
        1 => (0u8..4).prop_map(|key| Op::Cancel { key }),
        2 => Just(Op::Handover),
        1 => Just(Op::Expire),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct Rec {
    payload: String,
    prio: u32,
    seq: u64,
    attempts: u32,
}

/// The one delivery in flight.
#[derive(Debug, Clone)]
struct Flight {
    key: String,
    rec: Rec,
    /// Its message lease ran out: the next take rolls it back.
    expired: bool,
}

#[derive(Default, Debug)]
struct Model {
    pending: BTreeMap<String, Rec>,
    /// Nacked: waiting out the backoff.
    retrying: BTreeMap<String, Rec>,
    in_flight: Option<Flight>,
    parked: BTreeMap<String, Rec>,
    dead: BTreeMap<String, (String, u32)>,
    cancelled_in_flight: BTreeSet<String>,
    seq: u64,
    sent: u64,
    merged: u64,
    acked: u64,
    cancelled: u64,
}

/// How a failed delivery comes back.
#[derive(Clone, Copy, PartialEq)]
enum Back {
    /// At once, with the score it was taken with (`'l'`, an expired lease).
    AtPlace,
    /// After the backoff (a nack).
    Later,
}

impl Model {
    fn flying(&self, key: &str) -> bool {
        self.in_flight.as_ref().is_some_and(|f| f.key == key)
    }

    fn send(&mut self, key: &str, prio: u32, payload: String) -> (bool, bool) {
        self.sent += 1;
        let behind = self.flying(key);
        let waiting = if behind {
            &mut self.parked
        } else if self.retrying.contains_key(key) {
            &mut self.retrying
        } else {
            &mut self.pending
        };
        if let Some(r) = waiting.get_mut(key) {
            r.payload = payload;
            r.prio = prio;
            self.merged += 1;
            return (true, behind);
        }
        self.seq += 1;
        let rec = Rec {
            payload,
            prio,
            seq: self.seq,
            attempts: 0,
        };
        waiting.insert(key.into(), rec);
        (false, behind)
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

    /// A take under the slot's current lease: an expired delivery goes
    /// back at its place first; then one message, unless one is in flight.
    fn take(&mut self) -> Option<(String, Rec)> {
        if self.in_flight.as_ref().is_some_and(|f| f.expired) {
            self.fail(Back::AtPlace);
        }
        if self.in_flight.is_some() {
            return None;
        }
        let (key, mut rec) = self.order().into_iter().next()?;
        self.pending.remove(&key);
        rec.attempts += 1;
        self.in_flight = Some(Flight {
            key: key.clone(),
            rec: rec.clone(),
            expired: false,
        });
        Some((key, rec))
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

    fn ack(&mut self) {
        let Some(f) = self.in_flight.take() else {
            return;
        };
        self.cancelled_in_flight.remove(&f.key);
        self.acked += 1;
        self.unpark(&f.key);
    }

    /// The delivery in flight failed (lifecycle.lua's `fail`).
    fn fail(&mut self, back: Back) -> Settled {
        let Some(Flight { key, rec, .. }) = self.in_flight.take() else {
            return Settled::Done;
        };
        if self.cancelled_in_flight.remove(&key) {
            self.cancelled += 1;
            self.unpark(&key);
            return Settled::Cancelled;
        }
        if rec.attempts >= MAX_ATTEMPTS {
            self.dead.insert(key.clone(), (rec.payload, rec.attempts));
            self.unpark(&key);
            return Settled::Dead;
        }
        if self.unpark(&key) {
            self.merged += 1;
            return Settled::Superseded;
        }
        match back {
            Back::AtPlace => self.pending.insert(key, rec),
            Back::Later => self.retrying.insert(key, rec),
        };
        Settled::Done
    }

    fn cancel(&mut self, key: &str) -> CancelOutcome {
        if self.pending.remove(key).is_some() {
            self.cancelled += 1;
            return CancelOutcome::Cancelled(State::Pending);
        }
        if self.retrying.remove(key).is_some() {
            self.cancelled += 1;
            return CancelOutcome::Cancelled(State::RetryWaiting);
        }
        if self.flying(key) {
            if self.parked.remove(key).is_some() {
                self.cancelled += 1;
            }
            let already = !self.cancelled_in_flight.insert(key.into());
            return CancelOutcome::WillNotRetry { already };
        }
        if self.dead.contains_key(key) {
            return CancelOutcome::Dead;
        }
        CancelOutcome::Absent
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

async fn check(topic: &Topic, m: &Model) -> Result<(), TestCaseError> {
    let peek = topic.peek(100).await.map_err(fail)?;
    let got: Vec<_> = peek
        .iter()
        .map(|p| {
            let prio = p.priority.unwrap_or(99);
            (text(&p.key), text(&p.payload), prio, p.attempts)
        })
        .collect();
    let want: Vec<_> = m
        .order()
        .into_iter()
        .map(|(k, r)| (k, r.payload, r.prio, r.attempts))
        .collect();
    prop_assert_eq!(got, want, "pending order and contents");
    let st = topic.stats().await.map_err(fail)?.total;
    prop_assert_eq!(st.in_flight, u64::from(m.in_flight.is_some()), "in flight");
    prop_assert_eq!(st.behind_in_flight as usize, m.parked.len(), "parked");
    prop_assert_eq!(st.retry_waiting as usize, m.retrying.len(), "retrying");
    prop_assert_eq!(st.dead as usize, m.dead.len(), "dead");
    prop_assert_eq!(
        (st.sent, st.merged, st.acked, st.cancelled),
        (m.sent, m.merged, m.acked, m.cancelled),
        "sent, merged, acked, cancelled"
    );
    Ok(())
}

/// A delivery in hand and the epoch it was taken under.
struct Held {
    delivery: Delivery,
    epoch: u64,
}

#[test]
fn serial_slot_matches_the_model_across_handovers_and_lost_leases() {
    let backend = Backend::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(backend.connect());
    let case = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 16,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..30), |ops| {
            rt.block_on(async {
                let name = format!("s{}", case.fetch_add(1, Ordering::SeqCst));
                let topic = client
                    .define_topic(
                        TopicSpec::new(name, TopicKind::Priority)
                            .slots(1)
                            .max_attempts(MAX_ATTEMPTS)
                            .lease(LEASE)
                            .backoff(BACKOFF, BACKOFF),
                    )
                    .await
                    .unwrap();
                let mut owner = 0u32;
                let first = topic
                    .slot_lease(0, "acquire", "o0", 0, SLOT_LEASE)
                    .await
                    .unwrap();
                prop_assert!(first.granted);
                let mut epoch = first.epoch;
                let mut model = Model::default();
                let mut hand: Vec<Held> = Vec::new();
                let mut payloads = 0;
                for op in ops {
                    match op {
                        Op::Send { key, prio } => {
                            payloads += 1;
                            let (key, payload) = (format!("k{key}"), format!("p{payloads}"));
                            let m = Message::new(payload.clone())
                                .key(key.clone())
                                .priority(prio);
                            let sent = topic.send(m).await.unwrap();
                            let want = model.send(&key, prio, payload);
                            prop_assert_eq!(
                                (sent.merged, sent.behind_in_flight),
                                want,
                                "send {}",
                                key
                            );
                        }
                        Op::Take => {
                            let me = format!("o{owner}");
                            let got = topic.take_fenced(0, &me, epoch).await.unwrap();
                            let want = model.take();
                            let g = got.as_ref().map(|d| {
                                let prio = d.priority.unwrap_or(99);
                                (text(&d.key), text(&d.payload), prio, d.attempt)
                            });
                            let w = want.map(|(k, r)| (k, r.payload, r.prio, r.attempts));
                            prop_assert_eq!(g, w, "take by {} at epoch {}", me, epoch);
                            hand.extend(got.map(|delivery| Held { delivery, epoch }));
                        }
                        Op::Ack(i) | Op::Nack(i) | Op::Lost(i) if !hand.is_empty() => {
                            let Held {
                                delivery,
                                epoch: taken_at,
                            } = hand.remove(i % hand.len());
                            let key = text(&delivery.key);
                            let got = match op {
                                Op::Ack(_) => delivery.ack().await.map(|()| Settled::Done),
                                Op::Nack(_) => delivery.nack(None, "failed").await,
                                _ => delivery.give_back_lost().await,
                            };
                            if taken_at != epoch {
                                // Another owner holds the slot: refused, nothing changes.
                                let kind = got.map_err(|e| e.kind());
                                prop_assert_eq!(
                                    kind,
                                    Err(ErrorKind::Fenced),
                                    "{:?} of {} under a stale epoch",
                                    op,
                                    key
                                );
                            } else {
                                let want = match op {
                                    Op::Ack(_) => {
                                        model.ack();
                                        Settled::Done
                                    }
                                    Op::Nack(_) => model.fail(Back::Later),
                                    _ => model.fail(Back::AtPlace),
                                };
                                prop_assert_eq!(got.unwrap(), want, "{:?} of {}", op, key);
                            }
                        }
                        Op::Cancel { key } => {
                            let key = format!("k{key}");
                            let got = topic.cancel(&[key.as_bytes()]).await.unwrap();
                            prop_assert_eq!(got, vec![model.cancel(&key)], "cancel {}", key);
                        }
                        Op::Handover => {
                            // The owner is cut off: its slot lease runs out.
                            let me = format!("o{owner}");
                            let cut = topic
                                .slot_lease(0, "renew", &me, epoch, Duration::from_millis(1))
                                .await
                                .unwrap();
                            prop_assert!(cut.granted);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            owner += 1;
                            let next = topic
                                .slot_lease(0, "acquire", &format!("o{owner}"), 0, SLOT_LEASE)
                                .await
                                .unwrap();
                            prop_assert!(next.granted && next.epoch > epoch, "{:?}", next);
                            epoch = next.epoch;
                        }
                        Op::Expire => {
                            for held in hand.drain(..) {
                                // Frozen: never settled.
                                std::mem::forget(held.delivery);
                            }
                            if let Some(f) = model.in_flight.as_mut() {
                                f.expired = true;
                            }
                            tokio::time::sleep(EXPIRE_WAIT).await;
                        }
                        _ => {}
                    }
                    check(&topic, &model).await?;
                }
                for held in hand {
                    std::mem::forget(held.delivery);
                }
                Ok(())
            })
        })
        .unwrap();
}
