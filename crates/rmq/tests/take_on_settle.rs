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
            let clock_before = command_calls(&backend, &["time"]).await;
            let firsts_before = command_calls(&backend, &["zrange"]).await;
            let due_before = command_calls(&backend, &["zrangebyscore"]).await;
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
            let clock_reads = command_calls(&backend, &["time"]).await - clock_before;
            let firsts = command_calls(&backend, &["zrange"]).await - firsts_before;
            let due_reads = command_calls(&backend, &["zrangebyscore"]).await - due_before;
            // Nothing expires and nothing waits for a retry here: no call
            // looks for which leases ran out or which retries are due.
            assert!(
                due_reads <= 10,
                "serial={serial}, take_on_settle={take_on_settle}: {due_reads} reads of what is due in {used} calls"
            );
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
                // A settle and the take after it run at one time: the
                // call reads the server's clock once.
                assert!(
                    clock_reads <= used,
                    "serial={serial}: {clock_reads} clock reads in {used} script calls"
                );
                // A call reads the head of the pending set once until it
                // changes it, and the first lease deadline and first retry
                // once (about 4.4 first members a call; 6.1 when each step
                // read them again).
                assert!(
                    firsts * 2 <= used * 11,
                    "serial={serial}: {firsts} first members read in {used} script calls"
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

/// The handler tasks a run at concurrency 1 used for `n` messages sent to
/// one slot (parallel, or serial mode in group "g"), by the task id each
/// handler ran in.
async fn tasks_used(serial: bool, take_on_settle: bool, n: usize) -> usize {
    let (_backend, _c, topic) = setup(TopicKind::Priority, 1).await;
    let batch: Vec<Message> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&batch).await.unwrap();
    let tasks = Arc::new(Mutex::new(Vec::new()));
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
        let (tasks, stop2) = (tasks.clone(), stop.clone());
        consumer.run(stop, move |_| {
            let (tasks, stop) = (tasks.clone(), stop2.clone());
            async move {
                let mut t = tasks.lock().unwrap();
                t.push(tokio::task::id());
                if t.len() >= n {
                    stop.cancel();
                }
                Outcome::Ack
            }
        })
    };
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every message handled within 60 s")
        .unwrap();
    assert_eq!(report.acked, n as u64, "serial={serial}: {report:?}");
    let mut t = tasks.lock().unwrap().clone();
    assert_eq!(t.len(), n, "each message handled once");
    t.sort();
    t.dedup();
    t.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_handles_what_its_end_took_in_its_own_task() {
    let n = 128;
    for serial in [false, true] {
        // A new task (and a pass through the consumer's stream) only when
        // the fetch loop takes: at the start and after each run of 32
        // takes on settle, which gives the fetch loop its turn.
        let with = tasks_used(serial, true, n).await;
        assert!(
            with <= n / 32 + 3,
            "serial={serial}: {with} handler tasks for {n} messages"
        );
        // The measure tells the two apart: without takes, every message
        // comes from the fetch loop, each in a task of its own.
        let without = tasks_used(serial, false, n).await;
        assert_eq!(without, n, "serial={serial}, off: one task per message");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_within_a_run_of_takes_loses_neither_message_nor_count() {
    let (_backend, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    let n = 40;
    let batch: Vec<Message> = (0..n).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&batch).await.unwrap();
    let handled = Handled::default();
    let stop = CancellationToken::new();
    let run = {
        let (handled, stop2) = (handled.clone(), stop.clone());
        topic
            .consumer()
            .concurrency(1)
            .rescan(Duration::from_millis(200))
            .run(stop, move |m| {
                let (handled, stop) = (handled.clone(), stop2.clone());
                async move {
                    // The tenth message's first attempt panics, in the
                    // middle of a run of takes that handled nine before.
                    assert!(
                        !(text(&m.payload) == "m9" && m.attempt == 1),
                        "a handler that panics"
                    );
                    let mut h = handled.lock().unwrap();
                    h.push(text(&m.payload));
                    if h.len() >= n {
                        stop.cancel();
                    }
                    Outcome::Ack
                }
            })
    };
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every message handled within 60 s")
        .unwrap();
    let mut h = handled.lock().unwrap().clone();
    h.sort();
    h.dedup();
    assert_eq!(h.len(), n, "every message handled, the panicked one again");
    // What the task counted before it panicked is kept; the panic counts
    // as a failed settle (its message was nacked and handled again).
    assert_eq!(report.acked, n as u64, "{report:?}");
    assert_eq!(report.failed_settles, 1, "{report:?}");
}

/// Holds every write on each node of `backend` for `ms` (the calls already
/// sent run when it ends).
async fn pause_writes(backend: &Backend, ms: u64) {
    let urls = match backend {
        Backend::Single(s) => vec![s.url()],
        Backend::Cluster(c) => c.urls(),
    };
    for url in urls {
        let client = redis::Client::open(url).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("WRITE")
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_whose_handler_is_aborted_mid_call_still_settles_and_gives_back_what_it_took() {
    let (backend, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(1)
            .lease(Duration::from_secs(60)),
    )
    .await;
    let batch: Vec<Message> = (0..3).map(|i| Message::new(format!("m{i}"))).collect();
    topic.send_batch(&batch).await.unwrap();
    let backend = Arc::new(backend);
    let (started, mut handling) = tokio::sync::mpsc::unbounded_channel();
    let run = {
        let backend = backend.clone();
        tokio::spawn(
            topic
                .consumer()
                .concurrency(1)
                .run(CancellationToken::new(), move |m| {
                    let (backend, started) = (backend.clone(), started.clone());
                    async move {
                        // Its ack (which takes the next message) waits in
                        // Redis until the pause ends.
                        pause_writes(&backend, 600).await;
                        let _ = started.send(text(&m.payload));
                        Outcome::Ack
                    }
                }),
        )
    };
    assert_eq!(handling.recv().await.unwrap(), "m0");
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The run is dropped (its handler task aborted) while the ack is on
    // its way: the call still ends, and what it took goes back at once,
    // not after its 60 s lease.
    run.abort();
    let _ = run.await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = topic.stats().await.unwrap().total;
        if s.pending == 2 && s.in_flight == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "m0 acked and m1 given back within 10 s: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(topic.stats().await.unwrap().total.acked, 1);
}

#[test]
fn ending_a_delivery_is_a_future_that_is_send_and_sync() {
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    // Checked at compile time: a user may box an end as `Send + Sync`.
    fn ends(a: rmq::Delivery, b: rmq::Delivery, c: rmq::Delivery, d: rmq::Delivery) {
        let (a, b, c, d) = (a.ack(), b.nack(None, "e"), c.dead("e"), d.release());
        send_and_sync(&a);
        send_and_sync(&b);
        send_and_sync(&c);
        send_and_sync(&d);
    }
    let _ = ends;
}
