//! Steering by key: get, cancel and reschedule against every state a key
//! can be in (pending, retry-waiting, in flight, in flight with a parked
//! duplicate, dead, absent) for all three kinds; pause and resume.
//! Every operation is atomic per slot: what it reports is what the next
//! consumer sees.
#![allow(clippy::unwrap_used)]
mod common;
use std::time::Duration;

use common::*;
use rmq::{
    CancelOutcome, Delivery, ErrorKind, Message, Moved, Reschedule, Settled, State, Topic,
    TopicKind, TopicSpec,
};

const KINDS: [TopicKind; 3] = [
    TopicKind::Priority,
    TopicKind::FixedTime,
    TopicKind::RangeMerge,
];

/// The states a key is put in, one per test case.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Put {
    Pending,
    RetryWaiting,
    InFlight,
    Parked,
    Dead,
    Absent,
}

const ALL: [Put; 6] = [
    Put::Pending,
    Put::RetryWaiting,
    Put::InFlight,
    Put::Parked,
    Put::Dead,
    Put::Absent,
];

fn spec(name: &str, kind: TopicKind) -> TopicSpec {
    TopicSpec::new(name, kind)
        .slots(4)
        .max_attempts(3)
        .lease(Duration::from_secs(30))
        .backoff(Duration::from_millis(20), Duration::from_millis(100))
}

async fn topic_of(kind: TopicKind) -> (Backend, Topic) {
    let (b, _c, t) = setup_with(spec("t", kind)).await;
    (b, t)
}

/// One server, and a fresh topic per state (so that taking a message takes
/// the one of the case).
async fn topics_of(kind: TopicKind) -> (Backend, Vec<(Put, Topic)>) {
    let backend = Backend::start();
    let client = backend.connect().await;
    let mut out = Vec::new();
    for (i, p) in ALL.into_iter().enumerate() {
        let t = client
            .define_topic(spec(&format!("t{i}"), kind))
            .await
            .unwrap();
        out.push((p, t));
    }
    (backend, out)
}

/// A message of `key` that is due at once.
fn message(kind: TopicKind, key: &str, payload: &str) -> Message {
    let m = Message::new(payload).key(key);
    match kind {
        TopicKind::Priority => m.priority(5),
        TopicKind::FixedTime => m.delay(Duration::ZERO),
        TopicKind::RangeMerge => m.range(Duration::from_millis(1)),
    }
}

/// Takes the one due message of `key`'s slot (waits for range-merge's 1 ms).
async fn take_one(topic: &Topic) -> Delivery {
    for _ in 0..100 {
        if let Some(d) = topic.take(1).await.unwrap().pop() {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing to take");
}

/// Puts `key` in state `put`; returns the delivery when it is in flight.
async fn put(topic: &Topic, kind: TopicKind, key: &str, put: Put) -> Option<Delivery> {
    if put == Put::Absent {
        return None;
    }
    topic.send(message(kind, key, "v1")).await.unwrap();
    if put == Put::Pending {
        return None;
    }
    let d = take_one(topic).await;
    match put {
        Put::RetryWaiting => {
            let s = d.nack(Some(Duration::from_secs(60)), "boom").await.unwrap();
            assert_eq!(s, Settled::Done);
            None
        }
        Put::Dead => {
            d.dead("fatal").await.unwrap();
            None
        }
        Put::Parked => {
            let sent = topic.send(message(kind, key, "v2")).await.unwrap();
            assert!(sent.behind_in_flight);
            Some(d)
        }
        _ => Some(d),
    }
}

#[tokio::test]
async fn get_reports_every_state_of_every_kind() {
    for kind in KINDS {
        let (_b, topics) = topics_of(kind).await;
        for (p, topic) in topics {
            let key = "k";
            let held = put(&topic, kind, key, p).await;
            let l = topic.get(key.as_bytes()).await.unwrap();
            let want = match p {
                Put::Pending => State::Pending,
                Put::RetryWaiting => State::RetryWaiting,
                Put::InFlight | Put::Parked => State::InFlight,
                Put::Dead => State::Dead,
                Put::Absent => State::Absent,
            };
            assert_eq!(l.state, want, "{kind} {p:?}");
            assert_eq!(l.slot, topic.slot_of(key.as_bytes()));
            match p {
                Put::Pending => {
                    assert_eq!((l.payload.as_deref(), l.attempts), (Some(&b"v1"[..]), 0));
                    assert_eq!(l.priority.is_some(), kind == TopicKind::Priority);
                    assert_eq!(l.due_ms.is_some(), kind != TopicKind::Priority);
                }
                Put::RetryWaiting => {
                    assert_eq!(l.attempts, 1, "{kind}");
                    assert_eq!(l.error.as_deref(), Some("boom"));
                    let next = l.next_attempt_ms.unwrap();
                    assert!(next > l.server_ms + 50_000, "{kind}: next attempt in ~60 s");
                }
                Put::InFlight | Put::Parked => {
                    assert_eq!(l.attempts, 1);
                    assert!(l.lease_until_ms.unwrap() > l.server_ms + 20_000);
                    assert!(!l.cancelled);
                    assert_eq!(l.fence, None, "parallel mode: no fence");
                    let parked = l.parked.as_ref().map(|p| p.payload.as_slice());
                    let want = (p == Put::Parked).then_some(&b"v2"[..]);
                    assert_eq!(parked, want, "{kind} {p:?}");
                }
                Put::Dead => {
                    let dead = l.dead.as_ref().unwrap();
                    assert_eq!((dead.error.as_str(), dead.attempts), ("fatal", 1));
                    assert_eq!(dead.payload, b"v1");
                    assert_eq!(l.payload, None);
                }
                Put::Absent => assert_eq!((l.payload, l.dead), (None, None)),
            }
            drop(held);
        }
    }
}

#[tokio::test]
async fn cancel_removes_waiting_messages_and_ends_in_flight_ones_without_retry() {
    for kind in KINDS {
        let (_b, topics) = topics_of(kind).await;
        let mut totals = rmq::Stats::default();
        for (p, topic) in &topics {
            let (p, key) = (*p, "k");
            let held = put(topic, kind, key, p).await;
            let out = topic.cancel(&[key.as_bytes()]).await.unwrap();
            let want = match p {
                Put::Pending => CancelOutcome::Cancelled(State::Pending),
                Put::RetryWaiting => CancelOutcome::Cancelled(State::RetryWaiting),
                Put::InFlight | Put::Parked => CancelOutcome::WillNotRetry { already: false },
                Put::Dead => CancelOutcome::Dead,
                Put::Absent => CancelOutcome::Absent,
            };
            assert_eq!(out, vec![want], "{kind} {p:?}");
            // Twice is harmless.
            let again = topic.cancel(&[key.as_bytes()]).await.unwrap();
            let want_again = match p {
                Put::InFlight | Put::Parked => CancelOutcome::WillNotRetry { already: true },
                Put::Dead => CancelOutcome::Dead,
                _ => CancelOutcome::Absent,
            };
            assert_eq!(again, vec![want_again], "{kind} {p:?} twice");
            let l = topic.get(key.as_bytes()).await.unwrap();
            if let Some(d) = held {
                assert!(l.cancelled && l.parked.is_none(), "{kind} {p:?}: {l:?}");
                // A nack ends it: not retried, nothing kept.
                assert_eq!(d.nack(None, "x").await.unwrap(), Settled::Cancelled);
            }
            let l = topic.get(key.as_bytes()).await.unwrap();
            let gone = if p == Put::Dead {
                State::Dead
            } else {
                State::Absent
            };
            assert_eq!(l.state, gone, "{kind} {p:?}");
            assert!(topic.take(10).await.unwrap().is_empty(), "{kind} {p:?}");
            let t = topic.stats().await.unwrap().total;
            totals.pending += t.pending;
            totals.retry_waiting += t.retry_waiting;
            totals.in_flight += t.in_flight;
            totals.behind_in_flight += t.behind_in_flight;
            totals.dead += t.dead;
            totals.cancelled += t.cancelled;
        }
        let t = totals;
        assert_eq!(
            (t.pending, t.retry_waiting, t.in_flight),
            (0, 0, 0),
            "{kind}"
        );
        // Four cancelled messages, and the duplicate parked behind one.
        assert_eq!(
            (t.behind_in_flight, t.dead, t.cancelled),
            (0, 1, 5),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_delivery_still_acks_and_its_lease_expiry_does_not_retry_it() {
    let (_b, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .lease(Duration::from_millis(300)),
    )
    .await;
    for key in ["acked", "expired", "released", "dead"] {
        topic.send(Message::new("v").key(key)).await.unwrap();
    }
    let mut ds = Vec::new();
    while ds.len() < 4 {
        ds.extend(topic.take(4).await.unwrap());
    }
    let keys: Vec<&[u8]> = ["acked", "expired", "released", "dead"]
        .iter()
        .map(|k| k.as_bytes())
        .collect();
    let out = topic.cancel(&keys).await.unwrap();
    assert!(out
        .iter()
        .all(|o| *o == CancelOutcome::WillNotRetry { already: false }));
    for d in ds {
        match d.key.as_slice() {
            b"acked" => d.ack().await.unwrap(),
            b"released" => d.release().await.unwrap(),
            b"dead" => assert_eq!(d.dead("x").await.unwrap(), Settled::Cancelled),
            _ => std::mem::forget(d),
        }
    }
    // The expired lease is rolled back by the next pop: it ends instead.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(topic.take(10).await.unwrap().is_empty());
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.pending, t.in_flight, t.dead, t.retried), (0, 0, 0, 0));
    assert_eq!((t.acked, t.cancelled), (1, 3));
}

#[tokio::test]
async fn a_send_after_cancelling_an_in_flight_key_is_a_new_message_behind_it() {
    let (_b, _c, topic) = setup_with(spec("t", TopicKind::Priority).max_attempts(1)).await;
    topic.send(Message::new("old").key("k")).await.unwrap();
    let d = take_one(&topic).await;
    topic.cancel(&[b"k"]).await.unwrap();
    let sent = topic.send(Message::new("new").key("k")).await.unwrap();
    assert!(sent.behind_in_flight && !sent.merged);
    // Never two deliveries of one key at once: the new one waits.
    assert!(topic.take(10).await.unwrap().is_empty());
    let l = topic.get(b"k").await.unwrap();
    assert!(l.cancelled && l.parked.is_some(), "{l:?}");
    // The cancelled delivery ends (even at its last attempt it is not a
    // dead letter); the new message moves in.
    assert_eq!(d.nack(None, "x").await.unwrap(), Settled::Cancelled);
    let next = take_one(&topic).await;
    assert_eq!((next.payload.as_slice(), next.attempt), (&b"new"[..], 1));
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.dead, t.retried, t.cancelled), (0, 0, 1));
}

#[tokio::test]
async fn reschedule_moves_a_waiting_message_and_refuses_everything_else() {
    for kind in KINDS {
        let (_b, topics) = topics_of(kind).await;
        for (p, topic) in &topics {
            let (p, key) = (*p, "k");
            let held = put(topic, kind, key, p).await;
            let to = match kind {
                TopicKind::Priority => Reschedule::Priority(9),
                _ => Reschedule::Delay(3_600_000),
            };
            let r = topic.reschedule(key.as_bytes(), to).await;
            match p {
                Put::Pending | Put::RetryWaiting | Put::Parked => {
                    let r = r.unwrap();
                    let moved = match p {
                        Put::Pending => Moved::Pending,
                        Put::RetryWaiting => Moved::RetryWaiting,
                        _ => Moved::Parked,
                    };
                    assert_eq!(r.moved, moved, "{kind} {p:?}");
                    let l = topic.get(key.as_bytes()).await.unwrap();
                    let (priority, due) = match p {
                        Put::Parked => {
                            let parked = l.parked.unwrap();
                            (parked.priority, parked.due_ms)
                        }
                        _ => (l.priority, l.due_ms),
                    };
                    if kind == TopicKind::Priority {
                        assert_eq!(priority, Some(9), "{kind} {p:?}");
                    } else {
                        assert!(due.unwrap() > l.server_ms + 3_500_000, "{kind} {p:?}");
                    }
                }
                Put::InFlight | Put::Dead | Put::Absent => {
                    assert_eq!(r.unwrap_err().kind(), ErrorKind::NotWaiting, "{kind} {p:?}");
                }
            }
            drop(held);
        }
        // The wrong kind of new place, and a past due time: refused.
        let topic = &topics[0].1;
        topic.send(message(kind, "w", "v")).await.unwrap();
        let wrong = match kind {
            TopicKind::Priority => Reschedule::Delay(5),
            _ => Reschedule::Priority(1),
        };
        let e = topic.reschedule(b"w", wrong).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        if kind != TopicKind::Priority {
            let e = topic
                .reschedule(b"w", Reschedule::At(1_000))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PastDue);
        }
        let l = topic.get(b"w").await.unwrap();
        assert_eq!(l.state, State::Pending, "refusals change nothing");
    }
}

#[tokio::test]
async fn a_rescheduled_priority_goes_to_the_back_of_its_new_fifo() {
    let (_b, _c, topic) = setup_with(TopicSpec::new("t", TopicKind::Priority).slots(1)).await;
    for (key, p) in [("a", 9), ("b", 9), ("c", 1)] {
        topic
            .send(Message::new(key).key(key).priority(p))
            .await
            .unwrap();
    }
    topic
        .reschedule(b"c", Reschedule::Priority(9))
        .await
        .unwrap();
    topic
        .reschedule(b"a", Reschedule::Priority(9))
        .await
        .unwrap();
    let order: Vec<Vec<u8>> = topic
        .take(3)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.key.clone())
        .collect();
    assert_eq!(order, vec![b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]);
}

#[tokio::test]
async fn a_message_rescheduled_earlier_is_delivered_then_and_not_before() {
    let (_b, _c, topic) = setup_with(TopicSpec::new("t", TopicKind::FixedTime).slots(1)).await;
    topic
        .send(Message::new("v").key("k").delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let (mut s, _stop) = stream(&topic, 1);
    let r = topic
        .reschedule(b"k", Reschedule::Delay(300))
        .await
        .unwrap();
    let d = next(&mut s, 5).await.expect("delivered at its new time");
    assert!(d.taken_ms >= r.due_ms.unwrap(), "never before its due time");
}

#[tokio::test]
async fn a_paused_topic_delivers_nothing_until_resumed() {
    for kind in KINDS {
        let (_b, topic) = topic_of(kind).await;
        let (mut s, _stop) = stream(&topic, 4);
        let report = topic.pause().await.unwrap();
        assert_eq!((report.were_paused, report.slots), (0, 4));
        assert_eq!(topic.stats().await.unwrap().total.paused_slots, 4);
        for i in 0..20 {
            let sent = topic.send(message(kind, &format!("k{i}"), "v")).await;
            assert!(sent.is_ok(), "sends go on while paused");
        }
        assert!(topic.take(10).await.unwrap().is_empty(), "{kind}");
        assert!(
            next(&mut s, 1).await.is_none(),
            "{kind}: nothing while paused"
        );
        let resumed = topic.resume().await.unwrap();
        assert_eq!(resumed.were_paused, 4);
        let d = next(&mut s, 2).await.expect("delivered after resume");
        assert!(d.taken_ms >= resumed.server_ms - 1_000);
        d.ack().await.unwrap();
        let mut delivered = 1;
        while let Some(d) = next(&mut s, 1).await {
            d.ack().await.unwrap();
            delivered += 1;
            if delivered == 20 {
                break;
            }
        }
        assert_eq!(delivered, 20, "{kind}: every message after resume");
    }
}

#[tokio::test]
async fn in_flight_deliveries_settle_normally_while_paused() {
    let (_b, topic) = topic_of(TopicKind::Priority).await;
    topic
        .send(message(TopicKind::Priority, "a", "v"))
        .await
        .unwrap();
    topic
        .send(message(TopicKind::Priority, "b", "v"))
        .await
        .unwrap();
    let a = take_one(&topic).await;
    let b = take_one(&topic).await;
    topic.pause().await.unwrap();
    let nacked = b.key.clone();
    a.ack().await.unwrap();
    assert_eq!(b.nack(None, "x").await.unwrap(), Settled::Done);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        topic.take(10).await.unwrap().is_empty(),
        "the retry waits too"
    );
    topic.resume().await.unwrap();
    let again = take_one(&topic).await;
    assert_eq!((&again.key, again.attempt), (&nacked, 2));
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let (_b, topic) = topic_of(TopicKind::Priority).await;
    topic
        .send(message(TopicKind::Priority, "k", "v"))
        .await
        .unwrap();
    for e in [
        topic.get(b"").await.unwrap_err(),
        topic.cancel(&[b"k", b""]).await.unwrap_err(),
        topic
            .reschedule(b"k", Reschedule::Priority(u32::MAX))
            .await
            .unwrap_err(),
        topic
            .get(&vec![b'x'; rmq::MAX_KEY_BYTES + 1])
            .await
            .unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    let l = topic.get(b"k").await.unwrap();
    assert_eq!((l.state, l.priority), (State::Pending, Some(5)));
}

#[tokio::test]
async fn a_key_sent_with_a_slot_basis_is_found_in_the_basis_slot() {
    let (_b, _c, topic) = setup_with(TopicSpec::new("t", TopicKind::Priority).slots(64)).await;
    let (key, basis) = (b"order-1".as_slice(), b"merchant-7".as_slice());
    assert_ne!(
        topic.slot_of(key),
        topic.slot_of(basis),
        "pick another basis"
    );
    topic
        .send(Message::new("v").key(key).slot_basis(basis))
        .await
        .unwrap();
    assert_eq!(topic.get(key).await.unwrap().state, State::Absent);
    let l = topic.get_in(key, basis).await.unwrap();
    assert_eq!((l.state, l.slot), (State::Pending, topic.slot_of(basis)));
    let out = topic.cancel_in(&[key], basis).await.unwrap();
    assert_eq!(out, vec![CancelOutcome::Cancelled(State::Pending)]);
}

#[tokio::test]
async fn a_paused_topic_delivers_nothing_to_serial_consumers_either() {
    let (_b, topic) = topic_of(TopicKind::FixedTime).await;
    let stop = rmq::CancellationToken::new();
    let mut s = topic
        .consumer()
        .serial("g")
        .rescan(Duration::from_millis(200))
        .stream(stop.clone());
    topic.pause().await.unwrap();
    for i in 0..8 {
        let m = message(TopicKind::FixedTime, &format!("k{i}"), "v");
        topic.send(m.slot_basis("one-entity")).await.unwrap();
    }
    assert!(next(&mut s, 2).await.is_none(), "nothing while paused");
    let resumed = topic.resume().await.unwrap();
    let d = next(&mut s, 5).await.expect("delivered after resume");
    assert!(d.fence.is_some() && d.taken_ms >= resumed.server_ms - 1_000);
    d.ack().await.unwrap();
    stop.cancel();
}
