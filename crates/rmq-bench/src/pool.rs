//! Adaptive pool (`adaptive_pool`): the original's planned next step,
//! measured. Two topics share one pool of 64: `fast` (a 1 ms handler) and
//! `slow`, whose downstream serves at most 4 at a time, 50 ms each, and
//! queues the rest (a few GPUs rendering images). Three cases:
//!
//! - `mode=fast-alone`: only `fast` in the pool, the throughput to match;
//! - `mode=fixed-shares`: both, without adaptive throttling (the pool
//!   split evenly, 32 each): the slow topic's half waits in its
//!   downstream's queue;
//! - `mode=adaptive`: both, with it; then the downstream recovers (32 at
//!   once) and the slow topic's limit is sampled every 250 ms.
//!
//! Each case measures `fast`'s throughput over a window after a warm-up;
//! the rows carry its ratio to `fast` alone and, for the adaptive case, the
//! slow topic's limit over time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rmq::{CancellationToken, Client, Outcome, Pool, PoolLimits, TopicKind};
use serde_json::json;

use crate::env::Env;
use crate::report::{round, Row};
use crate::workload::{define, send_all};

/// The pool's size.
const POOL: usize = 64;
/// Before measuring, for the limits to settle; then the measured window;
/// then, after the downstream recovers, how long the slow limit is
/// followed. Shorter in a smoke run.
fn phases(env: &Env) -> (Duration, Duration, Duration) {
    if env.smoke {
        (
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
    } else {
        (
            Duration::from_secs(3),
            Duration::from_secs(6),
            Duration::from_secs(6),
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    FastAlone,
    FixedShares,
    Adaptive,
}

impl Mode {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::FastAlone => "mode=fast-alone",
            Mode::FixedShares => "mode=fixed-shares",
            Mode::Adaptive => "mode=adaptive",
        }
    }
}

/// Messages the fast topic holds: more than the case can take.
pub(crate) fn fast_backlog(env: &Env) -> u64 {
    env.n(300_000).max(60_000)
}

/// The mean fast throughput of each mode over the rounds, and each
/// mode's ratio to `fast` alone, on stderr.
pub(crate) fn summary(rows: &[Row]) {
    let mean = |mode: Mode| {
        let name = mode.label().trim_start_matches("mode=");
        let r: Vec<f64> = rows
            .iter()
            .filter(|r| r.scenario == "adaptive_pool" && r.params["mode"] == name)
            .map(Row::rate)
            .collect();
        (!r.is_empty()).then(|| r.iter().sum::<f64>() / r.len() as f64)
    };
    let Some(alone) = mean(Mode::FastAlone) else {
        return;
    };
    for mode in [Mode::FixedShares, Mode::Adaptive] {
        if let Some(m) = mean(mode) {
            let name = mode.label().trim_start_matches("mode=");
            eprintln!(
                "adaptive_pool: {name}: fast {m:.0}/s = {:.1}% of alone ({alone:.0}/s)",
                100.0 * m / alone
            );
        }
    }
}

fn limit_of(limits: &PoolLimits, name: &str) -> usize {
    limits
        .get()
        .iter()
        .find(|l| l.topic == name)
        .map_or(0, |l| l.limit)
}

fn running_of(limits: &PoolLimits, name: &str) -> usize {
    limits
        .get()
        .iter()
        .find(|l| l.topic == name)
        .map_or(0, |l| l.running)
}

pub(crate) async fn adaptive_pool(
    env: &Env,
    client: Client,
    mode: Mode,
    alone_rate: Option<f64>,
) -> Result<Row> {
    let kind = TopicKind::Priority;
    let fast = define(&client, "fast", kind).await?;
    let slow = define(&client, "slow", kind).await?;
    send_all(&fast, kind, fast_backlog(env), 1000).await?;
    if mode != Mode::FastAlone {
        send_all(&slow, kind, 20_000, 1000).await?;
    }
    let topics = if mode == Mode::FastAlone {
        vec![fast]
    } else {
        vec![fast, slow]
    };
    let pool = Pool::new(topics)
        .concurrency(POOL)
        .adaptive(mode == Mode::Adaptive);
    let limits = pool.limits();
    let downstream = Arc::new(tokio::sync::Semaphore::new(4));
    let (fast_done, slow_done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = CancellationToken::new();
    let run = {
        let (downstream, fast_done, slow_done) =
            (downstream.clone(), fast_done.clone(), slow_done.clone());
        tokio::spawn(pool.run(stop.clone(), move |m| {
            let (downstream, fast_done, slow_done) =
                (downstream.clone(), fast_done.clone(), slow_done.clone());
            async move {
                if m.topic == "slow" {
                    if let Ok(_served) = downstream.acquire().await {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    slow_done.fetch_add(1, Relaxed);
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    fast_done.fetch_add(1, Relaxed);
                }
                Outcome::Ack
            }
        }))
    };
    let (warm_up, window, recovery) = phases(env);
    tokio::time::sleep(warm_up).await;
    let (f0, s0, t0) = (
        fast_done.load(Relaxed),
        slow_done.load(Relaxed),
        Instant::now(),
    );
    let (mut slow_limit_sum, mut fast_limit_sum, mut fast_running_sum) = (0, 0, 0);
    let samples = (window.as_millis() / 250) as usize;
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(250)).await;
        slow_limit_sum += limit_of(&limits, "slow");
        fast_limit_sum += limit_of(&limits, "fast");
        fast_running_sum += running_of(&limits, "fast");
    }
    let secs = t0.elapsed().as_secs_f64();
    let fast_n = fast_done.load(Relaxed) - f0;
    let slow_rate = (slow_done.load(Relaxed) - s0) as f64 / secs;
    let fast_rate = fast_n as f64 / secs;
    let mut row = Row::new(
        "adaptive_pool",
        kind,
        json!({"mode": mode.label().trim_start_matches("mode="), "pool": POOL}),
        fast_n,
        secs,
    )
    .with("slow_per_sec", round(slow_rate, 1))
    .with(
        "fast_limit_avg",
        round(fast_limit_sum as f64 / samples as f64, 1),
    )
    .with(
        "fast_running_avg",
        round(fast_running_sum as f64 / samples as f64, 1),
    );
    if let Some(alone) = alone_rate {
        row = row.with("fast_vs_alone", round(fast_rate / alone, 3));
    }
    if mode != Mode::FastAlone {
        row = row.with(
            "slow_limit_avg",
            round(slow_limit_sum as f64 / samples as f64, 1),
        );
    }
    if mode == Mode::Adaptive {
        // The downstream recovers: 32 at once. The slow topic's limit, and
        // the fast one's, every 250 ms from then on.
        downstream.add_permits(28);
        let t1 = Instant::now();
        let mut timeline = Vec::new();
        let mut grown_ms = None;
        while t1.elapsed() < recovery {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let (s, f) = (limit_of(&limits, "slow"), limit_of(&limits, "fast"));
            let ms = t1.elapsed().as_millis() as u64;
            timeline.push(json!([ms, s, f]));
            if grown_ms.is_none() && s >= 24 {
                grown_ms = Some(ms);
            }
        }
        row = row
            .with("recovered_slow_limit_ms_slow_fast", timeline)
            .with("slow_limit_24_after_ms", json!(grown_ms));
    }
    stop.cancel();
    run.await??;
    Ok(row)
}
