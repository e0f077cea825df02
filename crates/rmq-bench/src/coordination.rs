//! `--coordination`: serial groups coordinated by Redis and by ZooKeeper,
//! side by side on one throwaway Redis and one throwaway ZooKeeper.
//!
//! - **handover**: the `handover` scenario's two cases (a member stops
//!   gracefully; an `rmq consume` process is SIGKILLed) for each backend,
//!   interleaved (Redis, ZooKeeper, then ZooKeeper, Redis) so that a noisy
//!   neighbour weighs on both alike. Member timeout (= ZooKeeper session),
//!   slot lease and message lease are 1 s.
//! - **load**: 8 and 130 members over a 1,024-slot topic with the default timeouts
//!   (6 s), idle once the slots are split, over 15 s: Redis calls per
//!   second (script calls, as `INFO commandstats` counts `EVALSHA`,
//!   `FCALL` and the like; the commands scripts run inside are not
//!   counted), Redis CPU, and
//!   ZooKeeper requests per second (`mntr`'s `zk_packets_received`).
//!   Then the same with Redis membership on a throwaway Redis Cluster of
//!   three masters, where a member renews its leases in one call per
//!   master (summed over the nodes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rmq::{CancellationToken, Deliveries, Topic, TopicKind, TopicSpec};
use rmq_test_support::{RedisCluster, RedisServer, ZooKeeperServer};
use serde_json::json;

use crate::env::Env;
use crate::handover::{self, Coordination};
use crate::redis_stats::{redis_cpu_secs_sum, script_calls};
use crate::report::{round, table, Row};
use crate::runner::{run_case, Results};

/// Group sizes of the load measure: a small group, and the original
/// system's fleet (130 machines) as 130 members in this one process, each
/// with its own consumer (and, with ZooKeeper, its own session).
const LOAD_MEMBERS: [usize; 2] = [8, 130];
const LOAD_SLOTS: u32 = 1_024;

/// Runs both measures for both backends; prints a JSON line per case and
/// a table at the end. Fails if any case failed.
/// `only`: run only the cases whose label contains one of these.
pub(crate) async fn measure(scale: f64, smoke: bool, only: &[String]) -> Result<()> {
    let picked = |label: &str| only.is_empty() || only.iter().any(|o| label.contains(o.as_str()));
    let redis = RedisServer::start();
    let zk = ZooKeeperServer::start();
    let env = Env::owned_single(redis.url(), scale, smoke);
    let bin = handover::rmq_cli_path().map_err(anyhow::Error::msg)?;
    let zookeeper = Coordination::ZooKeeper(zk.address("rmq-bench"));
    let mut out = Results::default();
    let kind = TopicKind::FixedTime;
    let order = if smoke {
        vec![Coordination::Redis, zookeeper.clone()]
    } else {
        vec![
            Coordination::Redis,
            zookeeper.clone(),
            zookeeper.clone(),
            Coordination::Redis,
        ]
    };
    for c in &order {
        let label = format!("case=graceful coordinator={}", c.label());
        if picked(&label) {
            run_case(
                &env,
                &mut out,
                ("handover", kind, label),
                handover::HO_BUDGET_MSGS,
                |cl| handover::handover_graceful(&env, cl, c),
            )
            .await;
        }
        let label = format!("case=crash coordinator={}", c.label());
        if picked(&label) {
            run_case(
                &env,
                &mut out,
                ("handover", kind, label),
                handover::HO_BUDGET_MSGS,
                |cl| handover::handover_crash(&env, cl, &bin, c),
            )
            .await;
        }
    }
    let window = if smoke {
        Duration::from_secs(2)
    } else {
        // Three of the consumers' 5 s safety-net rescans.
        Duration::from_secs(15)
    };
    let sizes: &[usize] = if smoke {
        &LOAD_MEMBERS[..1]
    } else {
        &LOAD_MEMBERS
    };
    let cluster = RedisCluster::builder().replicas(0).start();
    let on_cluster = Env::owned_cluster(cluster.urls(), scale, smoke);
    // Each size with Redis and ZooKeeper on one node, then with Redis on
    // the cluster.
    let loads = sizes
        .iter()
        .flat_map(|&n| {
            [
                (n, Coordination::Redis, &env, ""),
                (n, zookeeper.clone(), &env, ""),
            ]
        })
        .chain(
            sizes
                .iter()
                .map(|&n| (n, Coordination::Redis, &on_cluster, " backend=cluster")),
        );
    for (members, c, on, backend) in loads {
        let label = format!(
            "members={members} slots=1024 coordinator={}{backend}",
            c.label()
        );
        if !picked(&label) {
            continue;
        }
        let zk = &zk;
        run_case(
            on,
            &mut out,
            ("group_load", TopicKind::Priority, label),
            60_000,
            |cl| group_load(on, cl, &c, zk, members, window),
        )
        .await;
    }
    eprintln!("\n{}", table(&out.rows));
    if !out.errors.is_empty() {
        bail!("{} case(s) failed: {:?}", out.errors.len(), out.errors);
    }
    Ok(())
}

/// Owner → slots whose lease it holds.
async fn owners(topic: &Topic) -> Result<BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    for lease in topic.serial_groups().await?.leases {
        if let Some(owner) = lease.owner {
            *out.entry(owner).or_insert(0) += 1;
        }
    }
    Ok(out)
}

/// `size` idle members over 1,024 slots: what keeping the group costs
/// Redis and ZooKeeper per second once the slots are split.
async fn group_load(
    env: &Env,
    client: rmq::Client,
    coordination: &Coordination,
    zk: &ZooKeeperServer,
    size: usize,
    window: Duration,
) -> Result<Row> {
    let topic = client
        .define_topic(TopicSpec::new("load", TopicKind::Priority).slots(LOAD_SLOTS))
        .await?;
    let member_timeout = Duration::from_secs(6);
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let mut members: Vec<Deliveries> = Vec::new();
    for _ in 0..size {
        let mut b = crate::env::consumer(&topic).serial("load");
        if let Some(c) = coordination.coordinator(member_timeout).await? {
            b = b.coordinator(c);
        }
        members.push(b.stream(cancel.child_token()));
    }
    let start = Instant::now();
    loop {
        let o = owners(&topic).await?;
        if o.len() == size && o.values().sum::<usize>() == LOAD_SLOTS as usize {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!(
                "the slots were not split among {size} members in 60 s: {} owners",
                o.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled_s = start.elapsed().as_secs_f64();
    // One more member timeout: the joins' retries are over.
    tokio::time::sleep(member_timeout).await;
    let mut nodes = env.raw_all().await?;
    let (calls_before, cpu_before) = (
        calls_on(&mut nodes).await?,
        redis_cpu_secs_sum(&mut nodes).await?,
    );
    let zk_before = zk_requests(zk)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let secs = t0.elapsed().as_secs_f64();
    let (calls_after, cpu_after) = (
        calls_on(&mut nodes).await?,
        redis_cpu_secs_sum(&mut nodes).await?,
    );
    let zk_after = zk_requests(zk)?;
    for m in members {
        m.close().await;
    }
    let redis_per_s = (calls_after - calls_before) / secs;
    let cpu_ms_per_s = (cpu_after - cpu_before) * 1e3 / secs;
    let zk_per_s = (zk_after - zk_before) / secs;
    Ok(Row::new(
        "group_load",
        TopicKind::Priority,
        json!({
            "members": size,
            "slots": LOAD_SLOTS,
            "coordinator": coordination.label(),
            "backend": if env.cluster_nodes.is_some() { "cluster" } else { "single" },
            "member_timeout_ms": 6_000,
            "slot_lease_ms": 6_000,
        }),
        0,
        secs,
    )
    .with("redis_script_calls_per_s", round(redis_per_s, 1))
    .with("redis_cpu_ms_per_s", round(cpu_ms_per_s, 1))
    .with("zookeeper_requests_per_s", round(zk_per_s, 1))
    .with("split_after_s", round(settled_s, 2)))
}

/// Script calls every node ran so far.
async fn calls_on(nodes: &mut [redis::aio::MultiplexedConnection]) -> Result<f64> {
    let mut total = 0.0;
    for node in nodes.iter_mut() {
        total += script_calls(node).await?;
    }
    Ok(total)
}

/// Requests ZooKeeper received so far (every client's, pings included).
fn zk_requests(zk: &ZooKeeperServer) -> Result<f64> {
    zk.monitor()
        .get("zk_packets_received")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("ZooKeeper's mntr has no zk_packets_received"))
}
