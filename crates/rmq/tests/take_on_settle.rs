//! Taking on settle: a delivery that ends takes its slot's next due message
//! in the same call, so a consumer at concurrency 1 makes one round trip per
//! message (parallel and serial mode), and never at the cost of the order
//! the fetch loop keeps: a better message in another slot is not kept
//! waiting behind one slot's backlog. Every message is still handled once.
#![allow(clippy::unwrap_used)]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rmq::{CancellationToken, Message, Outcome, Topic, TopicKind, TopicSpec};

/// A slot basis that lands in `slot`.
fn basis_in(topic: &Topic, slot: u32) -> String {
    (0..)
        .map(|i| format!("b{i}"))
        .find(|b| topic.slot_of(b.as_bytes()) == slot)
        .unwrap()
}

/// Payloads in the order they were handled.
type Handled = Arc<Mutex<Vec<String>>>;

/// Handles every message of `topic` at concurrency 1 (serial mode in
/// group "g" when `serial`), noting payloads in `handled` in the order
/// handled, until `n` are handled; returns them.
async fn handle_all(
    topic: &Topic,
    n: usize,
    serial: bool,
    take_on_settle: bool,
    each: Duration,
    handled: Handled,
) -> Vec<String> {
    let stop = CancellationToken::new();
    let mut consumer = topic
        .consumer()
        .concurrency(1)
        .rescan(Duration::from_secs(600))
        .take_on_settle(take_on_settle);
    if serial {
        consumer = consumer.serial("g");
    }
    let run = {
        let (handled, stop2) = (handled.clone(), stop.clone());
        tokio::spawn(consumer.run(stop.clone(), move |m| {
            let (handled, stop) = (handled.clone(), stop2.clone());
            async move {
                tokio::time::sleep(each).await;
                let mut h = handled.lock().unwrap();
                h.push(text(&m.payload));
                if h.len() >= n {
                    stop.cancel();
                }
                Outcome::Ack
            }
        }))
    };
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every message handled within 60 s")
        .unwrap()
        .unwrap();
    assert_eq!(report.failed_settles, 0);
    let h = handled.lock().unwrap().clone();
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_at_concurrency_one_makes_one_call_per_message() {
    for serial in [false, true] {
        for take_on_settle in [true, false] {
            let (backend, _c, topic) = setup(TopicKind::Priority, 4).await;
            let n = 300;
            let batch: Vec<Message> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
            topic.send_batch(&batch).await.unwrap();
            let before = calls(&backend).await;
            let handled = handle_all(
                &topic,
                n,
                serial,
                take_on_settle,
                Duration::ZERO,
                Handled::default(),
            )
            .await;
            let used = calls(&backend).await - before;
            let mut unique = handled.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), n, "every message handled once");
            assert_eq!(handled.len(), n, "no message handled twice");
            // Start-up (the index or a look at each slot, and in serial mode
            // joining and taking the leases) and one take per slot that
            // emptied cost a few dozen calls; the rest is one per message.
            if take_on_settle {
                assert!(
                    used <= n as u64 + 60,
                    "serial={serial}: {used} script calls for {n} messages"
                );
            } else {
                // The measure tells the two apart: a pop and a settle each.
                assert!(
                    used >= 2 * n as u64,
                    "serial={serial}, off: {used} script calls for {n} messages"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_better_message_in_another_slot_is_not_kept_waiting_behind_a_backlog() {
    for serial in [false, true] {
        let (_backend, _c, topic) =
            setup_with(TopicSpec::new("t", TopicKind::Priority).slots(4)).await;
        let (crowded, other) = (basis_in(&topic, 1), basis_in(&topic, 2));
        let backlog: Vec<Message> = (0..200)
            .map(|i| {
                Message::new(format!("low{i}"))
                    .key(format!("low{i}"))
                    .slot_basis(crowded.clone())
                    .priority(1)
            })
            .collect();
        topic.send_batch(&backlog).await.unwrap();
        let handled = Handled::default();
        let sender = {
            let (topic, handled) = (topic.clone(), handled.clone());
            tokio::spawn(async move {
                // Once the consumer is well into the backlog, just after a
                // run of takes on settle began (the fetch loop takes one,
                // then up to 32 in a row): one that ignored the urgent
                // message would go on with the backlog for ~30 more.
                while handled.lock().unwrap().len() < 35 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                topic
                    .send(Message::new("urgent").slot_basis(other).priority(9))
                    .await
                    .unwrap();
                handled.lock().unwrap().len()
            })
        };
        let handled =
            handle_all(&topic, 201, serial, true, Duration::from_millis(5), handled).await;
        let sent_after = sender.await.unwrap();
        let at = handled.iter().position(|p| p == "urgent").unwrap();
        // It comes next, or after the few already on their way (taken
        // before the consumer heard of it); not after the backlog.
        assert!(
            at <= sent_after + 8,
            "serial={serial}: sent after {sent_after} were handled, the urgent message was handled {at}th"
        );
    }
}
