//! `--fleet`: what a fleet of parallel consumers costs Redis, with the
//! head index (and with it the marks idle consumers wait on, one consumer
//! per new head) and without them (every consumer hears every notice),
//! side by side on one throwaway Redis.
//!
//! Each case is a fixed-time topic of `slots` slots and `consumers`
//! consumers, each a client of its own (its own connections, as separate
//! machines would have) in this one process: the original's 130 machines
//! are 130 clients here. A few sizes run again with each consumer a
//! process of its own (`processes=true`, up to 64 on this 2-core host;
//! `crew.rs`, `member.rs`), with the index only. The two ways alternate within each size (with the
//! index, then without, then the next size without, then with), so that a
//! noisy neighbour weighs on both alike. Phases:
//!
//! - **start**: script calls from the first consumer's start until the
//!   calls settle (two quiet half-seconds, or 60 s);
//! - **idle**: script calls and Redis CPU per second over the window (two
//!   of the consumers' 5 s safety-net rescans);
//! - **1k msg/s**: 10 messages due now every 10 ms over the window: calls
//!   and CPU per second, pop calls per delivered message (and how many of
//!   them came back empty), due→handler lateness;
//! - **saturation**: a backlog sent at once and drained: the rate, and
//!   pop calls per delivered message.
//!
//! Pop calls are counted by the library's own `rmq_pops_total` metric
//! (the fetch loop's pops: one per slot it visits), read through a
//! debugging recorder.
//!
//! Then a few sizes again on a throwaway Redis Cluster of three masters
//! (`backend=cluster`; calls and CPU summed over the nodes), where the
//! index is one key per hash tag, read in one call per master, and there
//! are no marks (a blocking wait cannot span hash slots; with the index,
//! the consumers split the slots instead: slot affinity): without the
//! index every consumer looks at every slot and acts on every notice, as
//! all did on a cluster before the index was kept there.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use rmq::{Client, ClientOptions, Topic, TopicKind, TopicSpec};
use rmq_test_support::{RedisCluster, RedisServer};
use serde_json::json;

use crate::env::Env;
use crate::latency::percentiles;
use crate::redis_stats::{redis_cpu_secs_sum, script_calls};
use crate::report::{round, table, Row};
use crate::runner::{run_case, Results};
use crate::workload::make;

mod crew;
pub(crate) mod member;

use crew::Crew;

const SLOTS: [u32; 3] = [16, 1_024, 65_536];
const CONSUMERS: [usize; 3] = [1, 16, 130];
/// The sizes run again with each consumer a process: (slots, consumers).
const IN_PROCESSES: [(u32, usize); 4] = [(1_024, 16), (1_024, 64), (65_536, 16), (65_536, 64)];
/// The sizes run again on a cluster: (slots, consumers).
const ON_CLUSTER: [(u32, usize); 5] = [(16, 1), (1_024, 1), (65_536, 1), (1_024, 16), (65_536, 16)];

/// Runs every case; prints a JSON line per case and a table at the end.
/// Fails if any case failed.
pub(crate) async fn measure(scale: f64, smoke: bool, only: &[String]) -> Result<()> {
    let recorder = DebuggingRecorder::new();
    let pops = recorder.snapshotter();
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    let redis = RedisServer::start();
    let single = Env::owned_single(redis.url(), scale, smoke);
    let window = if smoke {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    // (slots, consumers, on the cluster, consumers in processes)
    let mut sizes: Vec<(u32, usize, bool, bool)> = if smoke {
        vec![(16, 2, false, false), (16, 2, false, true)]
    } else {
        SLOTS
            .iter()
            .flat_map(|&s| CONSUMERS.iter().map(move |&c| (s, c, false, false)))
            .chain(IN_PROCESSES.iter().map(|&(s, c)| (s, c, false, true)))
            .collect()
    };
    let selected = |label: &str| only.is_empty() || only.iter().any(|o| label.contains(o.as_str()));
    let cluster_wanted = !smoke
        && ON_CLUSTER
            .iter()
            .any(|&(s, c)| selected(&format!("slots={s} consumers={c} backend=cluster")));
    // Started only when a cluster case is asked for (it takes seconds).
    let cluster = cluster_wanted.then(|| RedisCluster::builder().replicas(0).start());
    let on_cluster = cluster
        .as_ref()
        .map(|c| Env::owned_cluster(c.urls(), scale, smoke));
    if on_cluster.is_some() {
        sizes.extend(ON_CLUSTER.iter().map(|&(s, c)| (s, c, true, false)));
    }
    let mut out = Results::default();
    for (i, &(slots, consumers, clustered, processes)) in sizes.iter().enumerate() {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        let (env, backend) = match (clustered, &on_cluster) {
            (true, Some(env)) => (env, " backend=cluster"),
            _ => (&single, ""),
        };
        let in_processes = if processes { " processes=true" } else { "" };
        for index in order {
            let label = format!(
                "slots={slots} consumers={consumers} head_index={index}{backend}{in_processes}"
            );
            // Processes: the index only (the in-process cases compare).
            if !selected(&label) || (processes && !index && !smoke) {
                continue;
            }
            if !index && slots == 65_536 && consumers > 1 {
                out.skip(
                    "fleet",
                    TopicKind::FixedTime,
                    &label,
                    "without the index each consumer looks at 65,536 slots at start and \
                     every 5 s: 16 of them ask ~210,000 calls/s, more than this Redis serves"
                        .into(),
                );
                continue;
            }
            let case = Case {
                slots,
                consumers,
                index,
                processes,
                window,
            };
            let pops = &pops;
            run_case(
                env,
                &mut out,
                ("fleet", TopicKind::FixedTime, label),
                env.n(20_000) + 20_000,
                |_| case.run(env, pops),
            )
            .await;
        }
    }
    eprintln!("\n{}", table(&out.rows));
    if !out.errors.is_empty() {
        bail!("{} case(s) failed: {:?}", out.errors.len(), out.errors);
    }
    Ok(())
}

/// One fleet: its size, whether it keeps the head index, whether its
/// consumers are processes, the window of its idle and 1k msg/s phases.
#[derive(Clone, Copy)]
struct Case {
    slots: u32,
    consumers: usize,
    index: bool,
    processes: bool,
    window: Duration,
}

/// Script calls and Redis CPU seconds so far, summed over the nodes.
async fn redis_work(nodes: &mut [redis::aio::MultiplexedConnection]) -> Result<(f64, f64)> {
    let mut calls = 0.0;
    for node in nodes.iter_mut() {
        calls += script_calls(node).await?;
    }
    Ok((calls, redis_cpu_secs_sum(nodes).await?))
}

/// Pop calls since the last reading: (taken, empty).
pub(crate) fn pops_since_last(snap: &Snapshotter) -> (u64, u64) {
    let (mut taken, mut empty) = (0, 0);
    for (key, _, _, value) in snap.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        if key.name() != "rmq_pops_total" {
            continue;
        }
        let DebugValue::Counter(n) = value else {
            continue;
        };
        match key
            .labels()
            .find(|l| l.key() == "outcome")
            .map(|l| l.value())
        {
            Some("taken") => taken += n,
            Some("empty") => empty += n,
            _ => {}
        }
    }
    (taken, empty)
}

impl Case {
    /// A client of its own, under `prefix`, keeping the index or not.
    async fn connect(&self, env: &Env, prefix: &str) -> Result<Client> {
        let options = ClientOptions::default()
            .prefix(prefix)
            .head_index(self.index);
        Ok(match &env.cluster_nodes {
            Some(nodes) => {
                let seeds: Vec<&str> = nodes.iter().map(String::as_str).collect();
                Client::connect_cluster(&seeds, options).await?
            }
            None => Client::connect_with(&env.url, options).await?,
        })
    }

    async fn run(self, env: &Env, pops: &Snapshotter) -> Result<Row> {
        let prefix = env.fresh_prefix();
        let producer = self.connect(env, &prefix).await?;
        let topic = producer
            .define_topic(TopicSpec::new("fleet", TopicKind::FixedTime).slots(self.slots))
            .await?;
        let mut nodes = env.raw_all().await?;

        // Start: every consumer, then until the calls settle.
        let (calls0, _) = redis_work(&mut nodes).await?;
        let t0 = Instant::now();
        let mut crew = Crew::start(&self, env, &prefix, pops).await?;
        let start_calls = settle(&mut nodes, calls0, self.consumers).await? - calls0;
        let start_s = t0.elapsed().as_secs_f64();

        // Idle.
        let (c1, cpu1) = redis_work(&mut nodes).await?;
        tokio::time::sleep(self.window).await;
        let (c2, cpu2) = redis_work(&mut nodes).await?;
        let w = self.window.as_secs_f64();
        let idle_calls = (c2 - c1) / w;
        let idle_cpu_ms = (cpu2 - cpu1) * 1e3 / w;

        // 1k msg/s.
        crew.record().await?;
        let before = crew.delivered().await?;
        let (c3, cpu3) = redis_work(&mut nodes).await?;
        let sent = steady(&topic, self.window).await?;
        let (c4, cpu4) = redis_work(&mut nodes).await?;
        drained(&mut crew, before + sent).await?;
        let load = crew.end().await?;
        let load_calls = (c4 - c3) / w;
        let load_cpu_ms = (cpu4 - cpu3) * 1e3 / w;

        // Saturation: a backlog, sent at once, drained.
        let backlog = if env.smoke { 200 } else { env.n(20_000) };
        crew.record().await?;
        let before = crew.delivered().await?;
        let t = Instant::now();
        for chunk in (0..backlog).collect::<Vec<u64>>().chunks(1_000) {
            let msgs: Vec<_> = chunk
                .iter()
                .map(|&i| make(TopicKind::FixedTime, i + 1_000_000, i))
                .collect();
            topic.send_batch(&msgs).await?;
        }
        drained(&mut crew, before + backlog).await?;
        let sat_s = t.elapsed().as_secs_f64();
        let saturation = crew.end().await?;
        crew.stop().await?;
        let per = |n: u64, d: u64| round(n as f64 / d.max(1) as f64, 3);
        Ok(Row::new(
            "fleet",
            TopicKind::FixedTime,
            json!({
                "slots": self.slots,
                "consumers": self.consumers,
                "head_index": self.index,
                "backend": if env.cluster_nodes.is_some() { "cluster" } else { "single" },
                "processes": self.processes,
            }),
            sent,
            w,
        )
        .with("start_script_calls", round(start_calls, 0))
        .with("start_s", round(start_s, 2))
        .with("idle_script_calls_per_s", round(idle_calls, 1))
        .with("idle_redis_cpu_ms_per_s", round(idle_cpu_ms, 1))
        .with("load_script_calls_per_s", round(load_calls, 1))
        .with("load_redis_cpu_ms_per_s", round(load_cpu_ms, 1))
        .with("load_pops_per_msg", per(load.taken + load.empty, sent))
        .with("load_empty_pops_per_msg", per(load.empty, sent))
        .with("load_lateness_ms", percentiles(load.lateness))
        .with("saturation_msgs_per_s", round(backlog as f64 / sat_s, 0))
        .with(
            "saturation_pops_per_msg",
            per(saturation.taken + saturation.empty, backlog),
        ))
    }
}

/// Waits until script calls settle (two half-seconds with fewer than
/// 20 calls per consumer each, or 60 s); the calls then.
async fn settle(
    nodes: &mut [redis::aio::MultiplexedConnection],
    mut last: f64,
    consumers: usize,
) -> Result<f64> {
    let start = Instant::now();
    let mut quiet = 0;
    while quiet < 2 && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (now, _) = redis_work(nodes).await?;
        if now - last < 20.0 * consumers as f64 {
            quiet += 1;
        } else {
            quiet = 0;
        }
        last = now;
    }
    Ok(last)
}

/// Sends 10 messages due now every 10 ms for `window`; how many.
async fn steady(topic: &Topic, window: Duration) -> Result<u64> {
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + window;
    let mut sent = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let msgs: Vec<_> = (sent..sent + 10)
            .map(|i| make(TopicKind::FixedTime, i, i))
            .collect();
        topic.send_batch(&msgs).await?;
        sent += 10;
    }
    Ok(sent)
}

/// Waits until the handlers saw `total` deliveries (at most 60 s).
async fn drained(crew: &mut Crew<'_>, total: u64) -> Result<()> {
    let start = Instant::now();
    loop {
        let delivered = crew.delivered().await?;
        if delivered >= total {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("only {delivered} of {total} delivered in 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
