//! Scenarios: what runs, which faults, and what the checker must find.
//!
//! Flow of every run: start a throwaway Redis (and the proxy), define the
//! topics, start supervised consumers and the producers, inject faults
//! while the producers run, wait for the queues to drain, stop the
//! consumers, check that no worker process (nor any child of one) is left
//! running, read the final state, check, print.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rmq::Client;
use rmq_test_support::{RedisCluster, RedisServer};

use crate::checker::{check, Expectations, FinalState, Report};
use crate::faults::{inject, Fault, Targets, SINGLE_NODE_MIX};
use crate::history::{now_ms, read_dir, Event, Writer};
use crate::procs::{worker_command, Supervised, Workers};
use crate::proxy::Proxy;
use crate::workload::{planned, spec, TopicSettings, TOPICS};

/// A scenario's definition.
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    messages: u64,
    producers: u64,
    /// Per producer: one batch of `batch` every `every_ms`.
    batch: u64,
    every_ms: u64,
    consumers: usize,
    concurrency: usize,
    serial: bool,
    settings: TopicSettings,
    poison_every: u64,
    appendfsync: Option<&'static str>,
    proxy: bool,
    faults: &'static [Fault],
    /// Time between faults (ms); one fault at a time.
    fault_every_ms: u64,
    /// Kill -9 Redis once, this long after the start (durability).
    kill_redis_after_ms: Option<u64>,
    durable: Option<u32>,
    /// Clock offsets (s) of the workers under `faketime`, by worker number
    /// (cycled); empty: no skew.
    skew_s: &'static [i64],
    /// On a 3-master cluster with one replica each; `kill_redis_after_ms`
    /// then SIGKILLs the master of the first slot (its replica takes over,
    /// the old master comes back as a replica).
    cluster: bool,
}

const BASE: TopicSettings = TopicSettings {
    slots: 4,
    lease: Duration::from_secs(2),
    max_attempts: 50,
};

/// What a scenario does unless it says otherwise: 3,000 messages from two
/// producers, two consumers, single node, no faults.
const PLAIN: Scenario = Scenario {
    name: "",
    about: "",
    messages: 3000,
    producers: 2,
    batch: 10,
    every_ms: 20,
    consumers: 2,
    concurrency: 8,
    serial: false,
    settings: BASE,
    poison_every: 0,
    appendfsync: None,
    proxy: false,
    faults: &[],
    fault_every_ms: 0,
    kill_redis_after_ms: None,
    durable: None,
    skew_s: &[],
    cluster: false,
};

const CLUSTER_SETTINGS: TopicSettings = TopicSettings {
    slots: 16,
    lease: Duration::from_secs(2),
    max_attempts: 50,
};

pub const ALL: &[Scenario] = &[
    Scenario {
        name: "baseline",
        about: "no faults: every message once, nothing lost, duplicated or early",
        ..PLAIN
    },
    Scenario {
        name: "chaos",
        about: "single node, AOF always, ~20k messages, a fault every 2.5 s of 11 kinds for ~2 min",
        messages: 20_000,
        every_ms: 100,
        consumers: 3,
        appendfsync: Some("always"),
        proxy: true,
        faults: &SINGLE_NODE_MIX,
        fault_every_ms: 2500,
        ..PLAIN
    },
    Scenario {
        name: "poison",
        about: "1 in ~60 messages crashes its consumer: each ends dead after max attempts, no crash loop",
        messages: 1200,
        producers: 1,
        batch: 20,
        concurrency: 1,
        settings: TopicSettings {
            slots: 4,
            lease: Duration::from_millis(800),
            max_attempts: 3,
        },
        poison_every: 60,
        ..PLAIN
    },
    Scenario {
        name: "zombie",
        about: "serial mode: consumers SIGSTOPped past their slot lease, then resumed; no overlap",
        producers: 1,
        every_ms: 40,
        consumers: 3,
        concurrency: 4,
        serial: true,
        settings: TopicSettings {
            slots: 8,
            lease: Duration::from_secs(1),
            max_attempts: 50,
        },
        faults: &[Fault::StopConsumer, Fault::StopConsumer, Fault::KillConsumer],
        fault_every_ms: 2500,
        ..PLAIN
    },
    Scenario {
        name: "durable-always",
        about: "kill -9 Redis mid-run with appendfsync always: nothing accepted is lost",
        appendfsync: Some("always"),
        kill_redis_after_ms: Some(1500),
        ..PLAIN
    },
    Scenario {
        name: "durable-everysec",
        about: "kill -9 Redis mid-run with appendfsync everysec: losses only from the last ~1 s",
        appendfsync: Some("everysec"),
        kill_redis_after_ms: Some(1500),
        ..PLAIN
    },
    Scenario {
        name: "clock-skew",
        about: "producers and consumers with clocks off by -90..+90 s (faketime): no effect",
        consumers: 3,
        skew_s: &[90, -90, 30, -30, 5],
        ..PLAIN
    },
    Scenario {
        name: "cluster-failover",
        about: "cluster, plain sends: SIGKILL a master mid-run; acknowledged writes lost to async replication are counted",
        messages: 4000,
        settings: CLUSTER_SETTINGS,
        kill_redis_after_ms: Some(1500),
        cluster: true,
        ..PLAIN
    },
    Scenario {
        name: "cluster-reshard",
        about: "cluster: hash slots of the topics moved key by key (ASK, TRYAGAIN, MOVED) under traffic",
        messages: 4000,
        every_ms: 40,
        settings: CLUSTER_SETTINGS,
        faults: &[Fault::Reshard],
        fault_every_ms: 700,
        cluster: true,
        ..PLAIN
    },
    Scenario {
        name: "cluster-failover-durable",
        about: "cluster, durable sends (WAIT 1): SIGKILL a master mid-run; nothing accepted is lost",
        messages: 4000,
        settings: CLUSTER_SETTINGS,
        kill_redis_after_ms: Some(1500),
        durable: Some(1),
        cluster: true,
        ..PLAIN
    },
];

/// What the scenario runs against.
enum Backend {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Backend {
    /// The URL workers use (a cluster: every node, comma-separated).
    fn url(&self) -> String {
        match self {
            Backend::Single(s) => s.url(),
            Backend::Cluster(c) => c.urls().join(","),
        }
    }

    /// SIGKILL Redis (a cluster: the master of `hash_slot`) and bring it
    /// back; returns what happened.
    fn kill_and_recover(&mut self, hash_slot: u16) -> String {
        match self {
            Backend::Single(s) => {
                s.kill();
                std::thread::sleep(Duration::from_millis(300));
                s.restart();
                "redis-server SIGKILL, restarted from its AOF".into()
            }
            Backend::Cluster(c) => {
                let Some(victim) = c.master_of_slot(hash_slot) else {
                    return "no master found".into();
                };
                c.kill(victim);
                let took = c.wait_failover(Duration::from_secs(30));
                c.node_mut(victim).restart();
                format!(
                    "master {victim} SIGKILL; replica took over in {} ms; old master back as a replica",
                    took.as_millis()
                )
            }
        }
    }
}

/// The skew of worker number `n`.
fn skew(sc: &Scenario, n: usize) -> i64 {
    if sc.skew_s.is_empty() {
        0
    } else {
        sc.skew_s[n % sc.skew_s.len()]
    }
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The scenario (see `rmq-chaos list`).
    pub scenario: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where histories and logs go (default: a new temp dir, kept).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs one scenario; Ok(false) when an invariant is broken.
pub async fn run(a: RunArgs) -> anyhow::Result<bool> {
    let Some(sc) = ALL.iter().find(|s| s.name == a.scenario) else {
        anyhow::bail!("no scenario {:?}; see `rmq-chaos list`", a.scenario);
    };
    let dir = match &a.out {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => std::env::temp_dir().join(format!("rmq-chaos-{}-{}", sc.name, std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    // Histories of an earlier run in the same directory would mix in.
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("jsonl" | "log")
        ) {
            std::fs::remove_file(&path)?;
        }
    }
    let started = Instant::now();
    let backend = if sc.cluster {
        Backend::Cluster(RedisCluster::start())
    } else {
        let mut builder = RedisServer::builder();
        if let Some(fsync) = sc.appendfsync {
            builder = builder.arg("appendonly", "yes").arg("appendfsync", fsync);
        }
        Backend::Single(builder.start())
    };
    let proxy = match &backend {
        Backend::Single(server) if sc.proxy => Some(Proxy::start(server.addr())?),
        _ => None,
    };
    let worker_url = proxy.as_ref().map_or_else(|| backend.url(), Proxy::url);
    let prefix = "chaos";
    let options = rmq::ClientOptions::default().prefix(prefix);
    let admin = match &backend {
        Backend::Single(s) => Client::connect_with(&s.url(), options).await?,
        Backend::Cluster(c) => {
            let urls = c.urls();
            let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
            Client::connect_cluster(&seeds, options).await?
        }
    };
    let mut topics = Vec::new();
    for (name, kind) in TOPICS {
        topics.push(admin.define_topic(spec(name, kind, sc.settings)).await?);
    }
    // Keys a wrong-type fault may plant at: dead-letter keys (empty in chaos).
    let plant_keys: Vec<String> = topics
        .iter()
        .flat_map(|t| (0..sc.settings.slots).map(move |s| t.keys_of_slot(s)[7].clone()))
        .collect();

    // The hash slot of the first slot of the first topic: its master dies.
    let victim_slot = topics
        .first()
        .map(|t| cluster_hash_slot(&t.keys_of_slot(0)[0]))
        .unwrap_or(0);
    // Hash slots a resharding fault moves: those of every topic's slots.
    let reshard_slots: Vec<u16> = (0..sc.settings.slots)
        .flat_map(|s| {
            topics
                .iter()
                .map(move |t| cluster_hash_slot(&t.keys_of_slot(s)[0]))
        })
        .collect();
    let conn_args = |role: &str| -> Vec<String> {
        let mut v = vec![
            role.to_string(),
            "--redis".into(),
            worker_url.clone(),
            "--prefix".into(),
            prefix.into(),
            "--seed".into(),
            a.seed.to_string(),
            "--poison-every".into(),
            sc.poison_every.to_string(),
        ];
        if sc.cluster {
            v.push("--cluster".into());
        }
        v
    };
    let workers = Workers::new();
    let consumers: Vec<Supervised> = (0..sc.consumers)
        .map(|i| {
            let mut args = conn_args("consume");
            args.extend(["--concurrency".into(), sc.concurrency.to_string()]);
            if sc.serial {
                // Handlers that take a while, so that a SIGSTOP catches one
                // mid-work (a zombie that wakes up holding a delivery).
                args.extend(["--work-ms".into(), "40".into()]);
                args.extend([
                    "--serial".into(),
                    "chaos-group".into(),
                    "--slot-lease-ms".into(),
                    sc.settings.lease.as_millis().to_string(),
                ]);
            }
            Supervised::start(
                &workers,
                format!("consumer{i}"),
                args,
                dir.clone(),
                skew(sc, i),
            )
        })
        .collect();
    let per = sc.messages / sc.producers;
    let mut producers = Vec::new();
    for p in 0..sc.producers {
        let mut args = conn_args("produce");
        let to = if p + 1 == sc.producers {
            sc.messages
        } else {
            (p + 1) * per
        };
        args.extend([
            "--from".into(),
            (p * per).to_string(),
            "--to".into(),
            to.to_string(),
            "--batch".into(),
            sc.batch.to_string(),
            "--every-ms".into(),
            sc.every_ms.to_string(),
        ]);
        if let Some(n) = sc.durable {
            args.extend(["--durable".into(), n.to_string()]);
        }
        let cmd = worker_command(
            &args,
            &dir.join(format!("producer{p}.jsonl")),
            skew(sc, sc.consumers + p as usize),
        )?;
        producers.push(workers.spawn(cmd, &dir.join(format!("producer{p}.log")))?);
    }

    // Faults, from a blocking thread, while the producers run.
    let faults_dir = dir.clone();
    let (faults, kill_after, every, lease) = (
        sc.faults,
        sc.kill_redis_after_ms,
        sc.fault_every_ms,
        sc.settings.lease,
    );
    let seed = a.seed;
    let injector = tokio::task::spawn_blocking(move || {
        let mut backend = backend;
        let mut producers = producers;
        let mut w = Writer::create(&faults_dir.join("faults.jsonl")).ok();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut next_fault = Instant::now() + Duration::from_millis(every.max(1000));
        let mut killed = false;
        let t0 = Instant::now();
        let mut i = 0usize;
        loop {
            let running = producers.iter_mut().any(|p| p.is_running());
            if !running {
                break;
            }
            if let Some(after) = kill_after.filter(|_| !killed) {
                if t0.elapsed() >= Duration::from_millis(after) {
                    killed = true;
                    let at = now_ms();
                    let detail = backend.kill_and_recover(victim_slot);
                    record(&mut w, "kill_redis", at, &detail);
                }
            }
            if let (false, Backend::Single(server)) = (
                faults.is_empty() || Instant::now() < next_fault,
                &mut backend,
            ) {
                // Round-robin over the kinds, in a seeded order per round.
                let f = faults[(i + rng.random_range(0..faults.len())) % faults.len()];
                let f = if i < faults.len() { faults[i] } else { f };
                i += 1;
                let at = now_ms();
                let detail = inject(
                    f,
                    &mut Targets {
                        server,
                        consumers: &consumers,
                        proxy: proxy.as_ref(),
                        plant_keys: &plant_keys,
                        lease,
                    },
                    &mut rng,
                );
                record(&mut w, f.name(), at, &detail);
                next_fault = Instant::now() + Duration::from_millis(every);
            }
            if let (false, Backend::Cluster(c)) = (
                faults.is_empty() || Instant::now() < next_fault,
                &mut backend,
            ) {
                // On a cluster the fault is a hash slot moved key by key.
                let hs = reshard_slots
                    .get(i % reshard_slots.len().max(1))
                    .copied()
                    .unwrap_or(0);
                i += 1;
                let at = now_ms();
                let to = c
                    .master_indices()
                    .into_iter()
                    .find(|&m| Some(m) != c.master_of_slot(hs));
                let detail = match to {
                    Some(to) => {
                        let moved = c.move_hash_slot(hs, to, Duration::from_millis(40));
                        format!("hash slot {hs} moved to node {to}, {moved} keys one by one")
                    }
                    None => "no other master".into(),
                };
                record(&mut w, "reshard", at, &detail);
                next_fault = Instant::now() + Duration::from_millis(every);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (backend, consumers, proxy)
    });
    let (backend, consumers, _proxy) = injector.await?;

    // Drain: everything accepted is acked or dead.
    let drained = drain(&topics, Duration::from_secs(90)).await;
    let poison_crashes: u32 = consumers
        .iter()
        .map(|c| c.poison_crashes.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    let restarts: u32 = consumers
        .iter()
        .map(|c| c.restarts.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    for c in consumers {
        c.stop(Duration::from_secs(10));
    }
    // Every worker, and anything a worker started (faketime's child), is
    // gone now: a survivor is a leak that fails the scenario.
    let leftovers = workers.ensure_none_left(Duration::from_secs(3));
    let fin = final_state(&topics, &backend).await?;
    drop(backend);

    let events = read_dir(&dir)?;
    let exp = expectations(sc, a.seed, &events);
    let report = check(&events, &fin, &exp);
    let (mut ok, mut verdicts) = verdict(sc, &report, &events, poison_crashes, drained);
    if let Err(leak) = leftovers {
        ok = false;
        verdicts.push(leak);
    }
    let json = serde_json::json!({
        "scenario": sc.name,
        "seed": a.seed,
        "secs": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "drained": drained,
        "poison_crashes": poison_crashes,
        "consumer_restarts": restarts,
        "ok": ok,
        "violations": verdicts,
        "report": report,
        "histories": dir.display().to_string(),
    });
    println!("{json}");
    eprintln!(
        "{} [{}]{}",
        report.summary(sc.name),
        if ok { "ok" } else { "FAILED" },
        if verdicts.is_empty() {
            String::new()
        } else {
            format!(": {}", verdicts.join("; "))
        }
    );
    Ok(ok)
}

fn record(w: &mut Option<Writer>, kind: &str, at: i64, detail: &str) {
    if let Some(w) = w.as_mut() {
        w.write(&Event::Fault {
            kind: kind.to_string(),
            at,
            until: now_ms(),
            detail: detail.to_string(),
        });
    }
}

/// Waits until no topic has anything pending, waiting out a backoff, or in
/// flight.
async fn drain(topics: &[rmq::Topic], limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let mut busy = 0;
        for t in topics {
            match t.stats().await {
                Ok(s) => busy += s.total.pending + s.total.in_flight + s.total.behind_in_flight,
                Err(_) => busy += 1,
            }
        }
        if busy == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// Reads where every message is: pending (and waiting out a backoff), in
/// flight, dead.
async fn final_state(topics: &[rmq::Topic], backend: &Backend) -> anyhow::Result<FinalState> {
    let mut fin = FinalState::default();
    match backend {
        Backend::Single(s) => {
            let mut c = redis::Client::open(s.url())?
                .get_multiplexed_async_connection()
                .await?;
            queued(&mut c, topics, &mut fin).await?;
        }
        Backend::Cluster(cl) => {
            let mut c = redis::cluster::ClusterClient::new(cl.urls())?
                .get_async_connection()
                .await?;
            queued(&mut c, topics, &mut fin).await?;
        }
    }
    for t in topics {
        for d in t.dead_letters(1_000_000).await? {
            fin.dead
                .insert(String::from_utf8_lossy(&d.key).into_owned(), d.attempts);
        }
    }
    Ok(fin)
}

/// Pending (q), waiting out a priority backoff (r) and in flight (f).
async fn queued<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    topics: &[rmq::Topic],
    fin: &mut FinalState,
) -> anyhow::Result<()> {
    for t in topics {
        for slot in 0..t.spec().slots {
            let keys = t.keys_of_slot(slot);
            for (k, in_flight) in [(&keys[0], false), (&keys[5], false), (&keys[2], true)] {
                let members: Vec<String> = redis::cmd("ZRANGE")
                    .arg(k)
                    .arg(0)
                    .arg(-1)
                    .query_async(conn)
                    .await?;
                if in_flight {
                    fin.in_flight.extend(members);
                } else {
                    fin.pending.extend(members);
                }
            }
        }
    }
    Ok(())
}

fn expectations(sc: &Scenario, seed: u64, events: &[Event]) -> Expectations {
    let mut poison = HashSet::new();
    if sc.poison_every > 0 {
        for i in 0..sc.messages {
            let p = planned(seed, i, sc.poison_every);
            if p.poison {
                poison.insert(p.id);
            }
        }
    }
    let _ = events;
    Expectations {
        poison,
        max_attempts: sc.settings.max_attempts,
        serial: sc.serial,
    }
}

/// The scenario's pass conditions; returns (ok, what was violated).
fn verdict(
    sc: &Scenario,
    r: &Report,
    events: &[Event],
    poison_crashes: u32,
    drained: bool,
) -> (bool, Vec<String>) {
    let mut v = Vec::new();
    let mut need = |cond: bool, what: String| {
        if !cond {
            v.push(what);
        }
    };
    need(drained, "the queues did not drain".into());
    need(
        r.unexpected == 0,
        format!("{} unexpected deliveries", r.unexpected),
    );
    need(r.early == 0, format!("{} early deliveries", r.early));
    need(
        r.stale_acks_accepted == 0,
        format!("{} stale acks accepted", r.stale_acks_accepted),
    );
    need(
        r.serial_overlaps == 0,
        format!("{} serial overlaps", r.serial_overlaps),
    );
    need(r.accepted > 0, "nothing was accepted".into());
    let failover = sc.cluster && sc.kill_redis_after_ms.is_some();
    if sc.appendfsync == Some("everysec") || (failover && sc.durable.is_none()) {
        // Only writes acknowledged just before the kill may go: the last
        // ~1 s of an everysec AOF, or what a master had not yet replicated.
        let kill = events.iter().find_map(|e| match e {
            Event::Fault { kind, at, .. } if kind == "kill_redis" => Some(*at),
            _ => None,
        });
        let ok_at: std::collections::HashMap<&str, i64> = events
            .iter()
            .filter_map(|e| match e {
                Event::SendOk { id, at, .. } => Some((id.as_str(), *at)),
                _ => None,
            })
            .collect();
        let outside = r
            .lost_ids
            .iter()
            .filter(|id| {
                let at = ok_at.get(id.as_str()).copied().unwrap_or(0);
                kill.is_none_or(|k| at < k - 2500)
            })
            .count();
        need(
            outside == 0,
            format!("{outside} lost messages acknowledged more than 2.5 s before the kill"),
        );
    } else {
        need(
            r.lost == 0,
            format!(
                "{} lost: {:?}",
                r.lost,
                &r.lost_ids[..r.lost_ids.len().min(10)]
            ),
        );
        need(r.ledger_balanced, "the ledger does not balance".into());
    }
    if sc.poison_every > 0 {
        need(
            r.poison_not_dead == 0,
            format!("{} poison messages not dead", r.poison_not_dead),
        );
        need(
            r.poison_dead_early == 0,
            format!(
                "{} poison messages dead before max attempts",
                r.poison_dead_early
            ),
        );
        // A healthy message in flight in a consumer that a poison message
        // crashed shares its fate (its attempts count); only such
        // collateral deaths are allowed.
        need(
            r.dead_unexpected_not_crash == 0,
            format!(
                "{} healthy messages dead that did not crash",
                r.dead_unexpected_not_crash
            ),
        );
        let poison_accepted = r.dead_expected + r.poison_not_dead;
        need(
            poison_crashes as usize <= poison_accepted * sc.settings.max_attempts as usize,
            format!("{poison_crashes} crashes for {poison_accepted} poison messages: a crash loop"),
        );
        need(
            r.poison_deliveries_max <= sc.settings.max_attempts,
            format!(
                "a poison message was delivered {} times",
                r.poison_deliveries_max
            ),
        );
    } else {
        need(r.dead == 0, format!("{} dead letters", r.dead));
    }
    if sc.faults.is_empty() && sc.kill_redis_after_ms.is_none() && sc.poison_every == 0 {
        need(
            r.duplicated == 0,
            format!("{} duplicates without faults", r.duplicated),
        );
        need(
            r.unknown == 0,
            format!("{} sends with unknown outcome", r.unknown),
        );
    }
    if sc.faults.contains(&Fault::Reshard) {
        let moved = r.faults.get("reshard").copied().unwrap_or(0);
        need(moved >= 3, format!("only {moved} hash slots moved"));
    }
    if sc.faults.len() > 3 {
        let total: usize = r.faults.values().sum();
        need(total >= 30, format!("only {total} faults injected"));
        need(
            r.faults.len() >= 6,
            format!("only {} kinds of fault", r.faults.len()),
        );
    }
    (v.is_empty(), v)
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag).
fn cluster_hash_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = match b.iter().position(|&c| c == b'{') {
        Some(o) => match b[o + 1..].iter().position(|&c| c == b'}') {
            Some(len) if len > 0 => &b[o + 1..o + 1 + len],
            _ => b,
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &x in tagged {
        crc ^= u16::from(x) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}
