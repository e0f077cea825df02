//! Taking on demand and settling by receipt: what `rmq serve`'s HTTP take
//! and settle stand on. Every message taken is settled exactly once, a
//! waiting caller is answered as soon as work is due (and not before), a
//! caller that gives up loses nothing, and a receipt settles from another
//! connection as long as its delivery is current, and only then.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use rmq::{Ending, ErrorKind, Message, Settled, TopicKind, TopicSpec};

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn callers_racing_take_every_message_once_and_settle_it_by_receipt() {
    let (s, client, topic) = setup(TopicKind::Priority, 8).await;
    let n = 2_000;
    let batch: Vec<_> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&batch).await.unwrap();
    let taker = topic.on_demand();
    let key = client.receipt_key().await.unwrap();
    // "Another server": its own connection, its own copy of the key.
    let other = s.connect().await;
    let other_topic = other.topic("t").await.unwrap();
    let other_key = other.receipt_key().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (taker, key, other_key, other_topic) = (
            taker.clone(),
            key.clone(),
            other_key.clone(),
            other_topic.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let got = taker
                    .take(37, LEASE, Duration::from_millis(300))
                    .await
                    .unwrap();
                if got.is_empty() {
                    return seen;
                }
                let mut settle = Vec::new();
                for d in got {
                    seen.push(String::from_utf8(d.payload.clone()).unwrap());
                    let sealed = key.seal("t", &d.into_receipt());
                    settle.push((other_key.open("t", &sealed).unwrap(), Ending::Ack));
                }
                for r in other_topic.settle_receipts(settle).await {
                    assert_eq!(r.unwrap(), Settled::Done);
                }
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (n, n),
        "each message exactly once"
    );
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.pending, t.in_flight), (0, 0));
}

#[tokio::test]
async fn a_waiting_caller_is_answered_when_a_message_arrives() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 4).await;
    let taker = topic.on_demand();
    let empty = taker
        .take(5, LEASE, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(empty.is_empty(), "nothing due: empty after the wait");
    let waiting = {
        let taker = taker.clone();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let got = taker.take(5, LEASE, Duration::from_secs(20)).await;
            (got, t0.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    topic.send(Message::new("hello")).await.unwrap();
    let (got, waited) = waiting.await.unwrap();
    let got = got.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"hello");
    assert!(
        waited < Duration::from_secs(15),
        "answered on arrival, not at the end of the wait ({waited:?})"
    );
}

#[tokio::test]
async fn a_time_based_message_goes_to_a_waiting_caller_once_due_and_not_before() {
    let (_s, client, topic) = setup(TopicKind::FixedTime, 4).await;
    let taker = topic.on_demand();
    let waiting = {
        let taker = taker.clone();
        tokio::spawn(async move { taker.take(1, LEASE, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let due = client.server_time_ms().await.unwrap() + 800;
    topic.send(Message::new("later").at_ms(due)).await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert_eq!(got.len(), 1, "taken when due, within the wait");
    assert_eq!(got[0].due_ms, Some(due));
    assert!(got[0].taken_ms >= due, "never before its time");
}

#[tokio::test]
async fn a_caller_that_gives_up_loses_nothing() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 2).await;
    let taker = topic.on_demand();
    for round in 0..20 {
        let quitter = {
            let taker = taker.clone();
            tokio::spawn(async move { taker.take(3, LEASE, Duration::from_secs(20)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Gives up while the message may be on its way to it.
        let send = topic.send(Message::new(format!("r{round}")));
        let (sent, ()) = tokio::join!(send, async { quitter.abort() });
        sent.unwrap();
        let got = taker.take(3, LEASE, Duration::from_secs(10)).await.unwrap();
        let got = if got.is_empty() {
            // It reached the quitter's task before the abort: it ended
            // with that task's drop (a nack) and comes back.
            taker.take(3, LEASE, Duration::from_secs(10)).await.unwrap()
        } else {
            got
        };
        assert_eq!(got.len(), 1, "round {round}");
        assert_eq!(got[0].payload, format!("r{round}").as_bytes());
        for d in got {
            d.ack().await.unwrap();
        }
    }
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.pending, t.in_flight, t.dead), (0, 0, 0));
}

#[tokio::test]
async fn receipts_nack_dead_extend_and_release_as_a_delivery_does() {
    let (_s, client, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .max_attempts(5)
            .lease(Duration::from_millis(600)),
    )
    .await;
    let taker = topic.on_demand();
    let one = |payload: &'static str| Message::new(payload).key(payload);
    for p in ["nack", "dead", "extend", "release"] {
        topic.send(one(p)).await.unwrap();
    }
    let short = Duration::from_millis(600);
    let got = taker.take(4, short, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 4);
    let mut by_key = std::collections::HashMap::new();
    for d in got {
        by_key.insert(String::from_utf8(d.key.clone()).unwrap(), d.into_receipt());
    }
    let endings = vec![
        (
            by_key["nack"].clone(),
            Ending::Nack {
                delay: Some(Duration::from_secs(60)),
                error: "later".into(),
            },
        ),
        (
            by_key["dead"].clone(),
            Ending::Dead {
                error: "bad".into(),
            },
        ),
        (
            by_key["extend"].clone(),
            Ending::Extend(Duration::from_secs(30)),
        ),
        (by_key["release"].clone(), Ending::Release),
    ];
    let answers: Vec<_> = topic.settle_receipts(endings).await;
    let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        answers,
        [Settled::Done, Settled::Dead, Settled::Done, Settled::Done]
    );
    let nacked = topic.get(b"nack").await.unwrap();
    assert!(format!("{nacked:?}").contains("later"), "{nacked:?}");
    // Past the first lease: the extended one is still in flight, the
    // released one is back (its attempt not counted).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let again = taker.take(4, LEASE, Duration::ZERO).await.unwrap();
    let keys: Vec<_> = again.iter().map(|d| (d.key.clone(), d.attempt)).collect();
    assert_eq!(keys, vec![(b"release".to_vec(), 1)]);
    let t = topic.stats().await.unwrap().total;
    assert_eq!((t.in_flight, t.dead), (2, 1), "extend + release in flight");
    let acked = topic
        .settle_receipts(vec![(by_key["extend"].clone(), Ending::Ack)])
        .await;
    assert_eq!(acked[0].as_ref().ok(), Some(&Settled::Done));
    drop(client);
}

#[tokio::test]
async fn a_receipt_whose_lease_ran_out_is_stale_and_changes_nothing() {
    let (_s, client, topic) = setup(TopicKind::Priority, 1).await;
    topic.send(Message::new("m")).await.unwrap();
    let taker = topic.on_demand();
    let key = client.receipt_key().await.unwrap();
    let d = taker
        .take(1, Duration::from_millis(300), Duration::ZERO)
        .await
        .unwrap()
        .pop()
        .unwrap();
    let sealed = key.seal("t", &d.into_receipt());
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Rolled back (a failed attempt, retried after the backoff) and taken
    // again: the old receipt names the old delivery.
    let again = taker.take(1, LEASE, Duration::from_secs(10)).await.unwrap();
    assert_eq!(again[0].attempt, 2);
    let old = key.open("t", &sealed).unwrap();
    let r = topic.settle_receipts(vec![(old, Ending::Ack)]).await;
    assert_eq!(
        r[0].as_ref().err().map(|e| e.kind()),
        Some(ErrorKind::StaleDelivery)
    );
    let t = topic.stats().await.unwrap().total;
    assert_eq!(t.in_flight, 1, "the current delivery is untouched");
}

#[tokio::test]
async fn a_receipt_is_refused_when_changed_or_shown_to_another_topic() {
    let (_s, client, topic) = setup(TopicKind::Priority, 1).await;
    client
        .define_topic(TopicSpec::new("u", TopicKind::Priority).slots(1))
        .await
        .unwrap();
    topic.send(Message::new("m")).await.unwrap();
    let key = client.receipt_key().await.unwrap();
    let d = topic.take(1).await.unwrap().pop().unwrap();
    let sealed = key.seal("t", &d.into_receipt());
    let e = key.open("u", &sealed).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidReceipt);
    let mut forged = sealed.clone().into_bytes();
    forged[10] = if forged[10] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(
        key.open("t", &forged).unwrap_err().kind(),
        ErrorKind::InvalidReceipt
    );
    assert_eq!(topic.stats().await.unwrap().total.in_flight, 1);
}

#[tokio::test]
async fn a_capped_topics_receipt_carries_its_permit_and_frees_it() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .max_in_flight(3),
    )
    .await;
    for i in 0..5 {
        topic.send(Message::new(format!("m{i}"))).await.unwrap();
    }
    let taker = topic.on_demand();
    let got = taker.take(5, LEASE, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 3, "the cap holds");
    let receipts: Vec<_> = got.into_iter().map(|d| d.into_receipt()).collect();
    assert_eq!(topic.in_flight_permits().await.unwrap(), 3);
    let more = taker.take(5, LEASE, Duration::ZERO).await.unwrap();
    assert!(more.is_empty(), "no permit left while receipts hold them");
    let acks = receipts.into_iter().map(|r| (r, Ending::Ack)).collect();
    for r in topic.settle_receipts(acks).await {
        r.unwrap();
    }
    assert_eq!(topic.in_flight_permits().await.unwrap(), 0);
    let rest = taker.take(5, LEASE, Duration::from_secs(5)).await.unwrap();
    assert_eq!(rest.len(), 2);
}

#[tokio::test]
async fn one_take_gets_as_many_as_are_due_across_slots() {
    let (_s, _c, topic) = setup(TopicKind::Priority, 4).await;
    let taker = topic.on_demand();
    for n in [1usize, 2, 5, 9, 17] {
        let batch: Vec<_> = (0..n).map(|i| Message::new(format!("{n}-{i}"))).collect();
        topic.send_batch(&batch).await.unwrap();
        let got = taker.take(n, LEASE, Duration::ZERO).await.unwrap();
        assert_eq!(got.len(), n, "{n} due in 4 slots, {n} asked");
        for d in got {
            d.ack().await.unwrap();
        }
    }
}
