//! One consumer pool over several topics: the pool's size is never
//! exceeded, a topic whose downstream saturates is throttled to what that
//! downstream can take while the others keep the rest of the pool, its
//! share grows back when the downstream recovers, fixed shares hold without
//! adaptation, and serial mode still holds within each topic.
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rmq::{CancellationToken, Message, Outcome, Pool, Share, TopicKind, TopicSpec};

async fn topic(client: &rmq::Client, name: &str, n: usize) -> rmq::Topic {
    let t = client
        .define_topic(TopicSpec::new(name, TopicKind::Priority).slots(4))
        .await
        .unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let batch: Vec<Message> = chunk
            .iter()
            .map(|i| Message::new("v").key(format!("{name}{i}")).priority(1))
            .collect();
        t.send_batch(&batch).await.unwrap();
    }
    t
}

fn limit_of(limits: &rmq::PoolLimits, name: &str) -> usize {
    limits
        .get()
        .iter()
        .find(|l| l.topic == name)
        .map_or(0, |l| l.limit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_topic_is_throttled_to_its_downstream_and_grows_back_when_it_recovers() {
    let (_b, client, _t) = setup(TopicKind::Priority, 1).await;
    let fast = topic(&client, "fast", 20_000).await;
    let slow = topic(&client, "slow", 2_000).await;
    // The slow topic's downstream serves 4 at a time, 100 ms each, and
    // queues the rest (100 ms, so that a loaded machine's timer noise stays
    // well inside the limiter's 20% growth tolerance).
    let downstream = Arc::new(tokio::sync::Semaphore::new(4));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let pool = Pool::new([fast.clone(), slow.clone()]).concurrency(32);
    let limits = pool.limits();
    let stop = CancellationToken::new();
    let run = {
        let (downstream, running, most, stop) = (
            downstream.clone(),
            running.clone(),
            most.clone(),
            stop.clone(),
        );
        tokio::spawn(pool.run(stop, move |m| {
            let (downstream, running, most) = (downstream.clone(), running.clone(), most.clone());
            async move {
                most.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
                if m.topic == "slow" {
                    let _served = downstream.acquire().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                running.fetch_sub(1, SeqCst);
                Outcome::Ack
            }
        }))
    };
    // Two seconds to adapt, then the limits' averages over two more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut f, mut s) = (0, 0);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        f += limit_of(&limits, "fast");
        s += limit_of(&limits, "slow");
    }
    let (f, s) = (f as f64 / 20.0, s as f64 / 20.0);
    eprintln!("saturated, on average: fast {f:.1}, slow {s:.1}");
    assert!(
        s <= 10.0,
        "the slow topic keeps {s:.1} of 32 for a downstream of 4"
    );
    assert!(f >= 20.0, "the fast topic has only {f:.1} of 32");
    // The downstream recovers: 32 at once. The slow topic's limit grows
    // well past what it held while saturated (by 4 at least, to 10 at
    // least). How far it gets depends on the fast topic, which keeps what
    // it holds while its own latency stays good: runs here and in CI saw
    // the slow topic stop at 11 beside 21 and at 13 beside 19.
    downstream.add_permits(28);
    let want = (s + 4.0).ceil().max(10.0) as usize;
    let mut grown = 0;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        grown = limit_of(&limits, "slow");
        if grown >= want {
            break;
        }
    }
    eprintln!(
        "recovered: slow {grown}, fast {}",
        limit_of(&limits, "fast")
    );
    assert!(
        grown >= want,
        "the slow topic grew back to only {grown} (from {s:.1} saturated)"
    );
    stop.cancel();
    let report = run.await.unwrap().unwrap();
    assert!(
        most.load(SeqCst) <= 32,
        "{} at once in a pool of 32",
        most.load(SeqCst)
    );
    assert!(report.acked > 0 && report.failed_settles == 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_adaptation_fixed_shares_hold_and_the_pool_is_never_exceeded() {
    let (_b, client, _t) = setup(TopicKind::Priority, 1).await;
    let a = topic(&client, "a", 600).await;
    let b = topic(&client, "b", 600).await;
    let running: Arc<Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let most: Arc<Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let total_most = Arc::new(AtomicUsize::new(0));
    let pool = Pool::new([a, b]).concurrency(10).adaptive(false).share(
        "a",
        Share {
            max: 3,
            ..Share::default()
        },
    );
    let stop = CancellationToken::new();
    let run = {
        let (running, most, total_most) = (running.clone(), most.clone(), total_most.clone());
        tokio::spawn(pool.run(stop.clone(), move |m| {
            let (running, most, total_most) = (running.clone(), most.clone(), total_most.clone());
            async move {
                {
                    let mut r = running.lock().unwrap();
                    let n = r.entry(m.topic.clone()).or_default();
                    *n += 1;
                    let now = *n;
                    let total: usize = r.values().sum();
                    total_most.fetch_max(total, SeqCst);
                    let mut most = most.lock().unwrap();
                    let e = most.entry(m.topic.clone()).or_default();
                    *e = (*e).max(now);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                *running.lock().unwrap().get_mut(&m.topic).unwrap() -= 1;
                Outcome::Ack
            }
        }))
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    run.await.unwrap().unwrap();
    let most = most.lock().unwrap().clone();
    eprintln!("most at once: {most:?}, in all {}", total_most.load(SeqCst));
    assert!(
        most["a"] <= 3,
        "a ran {} at once with a maximum of 3",
        most["a"]
    );
    assert!(
        most["b"] >= 6,
        "b should take the rest of the pool: {}",
        most["b"]
    );
    assert!(total_most.load(SeqCst) <= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_mode_holds_within_each_topic_of_a_pool() {
    let (_b, client, _t) = setup(TopicKind::Priority, 1).await;
    let a = topic(&client, "a", 200).await;
    let b = topic(&client, "b", 200).await;
    let busy: Arc<Mutex<HashSet<(String, u32)>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let run =
        {
            let (busy, overlaps, done) = (busy.clone(), overlaps.clone(), done.clone());
            tokio::spawn(Pool::new([a, b]).concurrency(16).serial("g").run(
                stop.clone(),
                move |m| {
                    let (busy, overlaps, done) = (busy.clone(), overlaps.clone(), done.clone());
                    async move {
                        let me = (m.topic.clone(), m.slot);
                        if !busy.lock().unwrap().insert(me.clone()) {
                            overlaps.fetch_add(1, SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        busy.lock().unwrap().remove(&me);
                        done.fetch_add(1, SeqCst);
                        Outcome::Ack
                    }
                },
            ))
        };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done.load(SeqCst) < 400 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of 400",
            done.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(
        overlaps.load(SeqCst),
        0,
        "two at once in one slot of one topic"
    );
}
