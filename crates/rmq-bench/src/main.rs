//! rmq-bench: throughput, latency and memory of rmq against a real Redis.
//!
//! Prints one JSON line per measured case to stdout and a table to stderr.
//! Without `--redis` it starts a throwaway `redis-server` (never port 6379)
//! and may `FLUSHALL` it; with `--redis` it only deletes its own keys.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use rmq::{
    CancellationToken, Client, ClientOptions, Message, Outcome, Topic, TopicKind, TopicSpec,
};
use serde_json::{json, Map, Value};
use tokio::task::JoinSet;

mod serial;

#[derive(Parser, Debug)]
#[command(
    name = "rmq-bench",
    about = "Benchmarks rmq against a real redis-server"
)]
struct Args {
    /// Redis URL to use instead of a throwaway redis-server.
    #[arg(long)]
    redis: Option<String>,
    /// Multiplies every message count (1.0: 200k for send/consume, 100k for
    /// consume_mode, 1M for merge_heavy and memory).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Tiny counts for CI: every scenario, a few seconds in all.
    #[arg(long)]
    smoke: bool,
    /// Run only the scenarios whose name contains one of these (comma separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

const KINDS: [TopicKind; 3] = [
    TopicKind::Priority,
    TopicKind::FixedTime,
    TopicKind::RangeMerge,
];
const SEND_N: u64 = 200_000;
const BIG_N: u64 = 1_000_000;

/// One measured case.
struct Row {
    scenario: &'static str,
    kind: TopicKind,
    params: Value,
    msgs: u64,
    secs: f64,
    extra: Map<String, Value>,
}

impl Row {
    fn new(scenario: &'static str, kind: TopicKind, params: Value, msgs: u64, secs: f64) -> Row {
        Row {
            scenario,
            kind,
            params,
            msgs,
            secs,
            extra: Map::new(),
        }
    }
    fn with(mut self, name: &str, v: impl Into<Value>) -> Row {
        self.extra.insert(name.into(), v.into());
        self
    }
    fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.msgs as f64 / self.secs
        } else {
            0.0
        }
    }
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("scenario".into(), self.scenario.into());
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("params".into(), self.params.clone());
        m.insert("msgs".into(), self.msgs.into());
        m.insert("secs".into(), round(self.secs, 4).into());
        m.insert("msgs_per_sec".into(), round(self.rate(), 1).into());
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Where to run and how big.
struct Env {
    url: String,
    /// True when we started the server ourselves (FLUSHALL allowed).
    owned: bool,
    scale: f64,
    smoke: bool,
    counter: AtomicU64,
}

impl Env {
    fn n(&self, base: u64) -> u64 {
        ((base as f64 * self.scale).round() as u64).max(1)
    }

    fn fresh_prefix(&self) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!(
            "rmqbench-{}-{nanos}-{}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn client(&self) -> Result<Client> {
        let opts = ClientOptions::default().prefix(self.fresh_prefix());
        Client::connect_with(&self.url, opts)
            .await
            .context("connecting to Redis")
    }

    async fn raw(&self) -> Result<redis::aio::MultiplexedConnection> {
        let c = redis::Client::open(self.url.as_str())?;
        Ok(c.get_multiplexed_async_connection().await?)
    }

    /// Deletes every key under the client's prefix.
    async fn cleanup(&self, client: &Client) -> Result<()> {
        let mut conn = self.raw().await?;
        let pattern = format!("{}:*", client.prefix());
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let _: i64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(())
    }

    /// Budget of one case: generous, but bounded.
    fn budget(&self, msgs: u64) -> Duration {
        Duration::from_secs(30) + Duration::from_micros(msgs.saturating_mul(1_000))
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A 16-byte merge key.
fn key16(i: u64) -> Vec<u8> {
    format!("k{i:015}").into_bytes()
}

/// A 64-byte payload.
fn payload64(i: u64) -> Vec<u8> {
    format!("{i:064}").into_bytes()
}

fn make(kind: TopicKind, key: u64, i: u64) -> Message {
    let m = Message::new(payload64(i)).key(key16(key));
    match kind {
        TopicKind::Priority => m.priority((i % 8) as u32),
        TopicKind::FixedTime => m.delay(Duration::ZERO),
        TopicKind::RangeMerge => m.range(Duration::from_millis(1)),
    }
}

async fn define(client: &Client, name: &str, kind: TopicKind) -> Result<Topic> {
    Ok(client.define_topic(TopicSpec::new(name, kind)).await?)
}

async fn send_all(topic: &Topic, kind: TopicKind, n: u64, batch: u64) -> Result<()> {
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let msgs: Vec<Message> = (i..end).map(|j| make(kind, j, j)).collect();
        let r = topic.send_batch(&msgs).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
        i = end;
    }
    Ok(())
}

async fn info_field(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<f64> {
    let info: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("INFO {section} has no {field}"))
}

async fn redis_cpu_secs(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    Ok(info_field(conn, "cpu", "used_cpu_sys").await?
        + info_field(conn, "cpu", "used_cpu_user").await?)
}

/// CPU seconds (user + sys) used by this process so far (Linux; 0 elsewhere).
fn own_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields after ')' start at field 3 (state); utime is field 14, stime 15.
    (tick(11) + tick(12)) / 100.0
}

// ---------------------------------------------------------------- scenarios

async fn send_single(env: &Env, client: Client, kind: TopicKind, c: u64) -> Result<Row> {
    let n = env.n(SEND_N);
    let topic = define(&client, "bench", kind).await?;
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..c {
        let t = topic.clone();
        let next = next.clone();
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                t.send(make(kind, i, i)).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let secs = start.elapsed().as_secs_f64();
    let pending = topic.stats().await?.total.pending;
    Ok(
        Row::new("send_single", kind, json!({"concurrency": c}), n, secs)
            .with("pending_after", pending),
    )
}

async fn send_batch(env: &Env, client: Client, kind: TopicKind, batch: u64) -> Result<Row> {
    let n = env.n(SEND_N);
    let topic = define(&client, "bench", kind).await?;
    let msgs: Vec<Message> = (0..n).map(|i| make(kind, i, i)).collect();
    let start = Instant::now();
    for chunk in msgs.chunks(batch as usize) {
        let r = topic.send_batch(chunk).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let pending = topic.stats().await?.total.pending;
    Ok(Row::new(
        "send_batch",
        kind,
        json!({"batch": batch, "concurrency": 1}),
        n,
        secs,
    )
    .with("pending_after", pending))
}

async fn consume(env: &Env, client: Client, c: usize, batch: usize) -> Result<Row> {
    let n = env.n(SEND_N);
    let kind = TopicKind::Priority;
    let topic = define(&client, "bench", kind).await?;
    send_all(&topic, kind, n, 1000).await?;
    let mut raw = env.raw().await?;
    let cpu0 = redis_cpu_secs(&mut raw).await?;
    let cmds0 = info_field(&mut raw, "stats", "total_commands_processed").await?;
    let own0 = own_cpu_secs();
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let start = Instant::now();
    let run = tokio::spawn(
        topic
            .consumer()
            .concurrency(c)
            .batch(batch)
            .shutdown_grace(Duration::from_secs(5))
            .run(cancel.clone(), |_| async { Outcome::Ack }),
    );
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let acked = topic.stats().await?.total.acked;
        if acked >= n {
            break;
        }
        if run.is_finished() {
            bail!("the consumer stopped early after {acked} of {n} acks");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = redis_cpu_secs(&mut raw).await?;
    let cmds1 = info_field(&mut raw, "stats", "total_commands_processed").await?;
    let own1 = own_cpu_secs();
    cancel.cancel();
    let report = tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .context("the consumer did not stop within 15 s")???;
    Ok(Row::new(
        "consume",
        kind,
        json!({"concurrency": c, "batch": batch}),
        n,
        secs,
    )
    .with(
        "redis_cpu_us_per_msg",
        round((cpu1 - cpu0) * 1e6 / n as f64, 2),
    )
    .with(
        "client_cpu_us_per_msg",
        round((own1 - own0) * 1e6 / n as f64, 2),
    )
    .with("redis_cmds_per_msg", round((cmds1 - cmds0) / n as f64, 2))
    .with("run_acked", report.acked)
    .with("failed_settles", report.failed_settles))
}

async fn merge_heavy(env: &Env, client: Client) -> Result<Row> {
    let n = env.n(BIG_N);
    let keys: u64 = 10_000;
    let batch: u64 = 1000;
    let kind = TopicKind::Priority;
    let topic = define(&client, "bench", kind).await?;
    let mut merged_reported = 0u64;
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let msgs: Vec<Message> = (i..end).map(|j| make(kind, j % keys, j)).collect();
        let r = topic.send_batch(&msgs).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
        merged_reported += r.merged_count() as u64;
        i = end;
    }
    let secs = start.elapsed().as_secs_f64();
    let st = topic.stats().await?.total;
    let expected = n.min(keys);
    if st.pending != expected {
        bail!("{} pending after merging, expected {expected}", st.pending);
    }
    Ok(Row::new(
        "merge_heavy",
        kind,
        json!({"keys": keys, "batch": batch}),
        n,
        secs,
    )
    .with("pending_after", st.pending)
    .with("merged", st.merged)
    .with("merged_reported", merged_reported))
}

/// Small deterministic PRNG (xorshift64*), enough for spreading due times.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn percentiles(mut v: Vec<i64>) -> Value {
    v.sort_unstable();
    let p = |q: f64| -> i64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((q / 100.0 * v.len() as f64).ceil() as usize).saturating_sub(1);
        v[i.min(v.len() - 1)]
    };
    json!({"p50": p(50.0), "p99": p(99.0), "p99.9": p(99.9), "max": v.last().copied().unwrap_or(0)})
}

async fn latency(env: &Env, client: Client, background: bool) -> Result<Row> {
    let kind = TopicKind::FixedTime;
    let n = if env.smoke { 50 } else { env.n(2000) };
    let spread = if env.smoke {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(2)
    };
    let topic = define(&client, "lat", kind).await?;
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();

    // Background load: another topic, 200 messages every 10 ms, consumed.
    let bg_sent = Arc::new(AtomicU64::new(0));
    let bg_acked = Arc::new(AtomicU64::new(0));
    let mut bg_tasks = JoinSet::new();
    if background {
        let bg = define(&client, "bg", TopicKind::Priority).await?;
        let (t, stop, sent) = (bg.clone(), cancel.clone(), bg_sent.clone());
        bg_tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0u64;
            while !stop.is_cancelled() {
                tick.tick().await;
                let msgs: Vec<Message> = (i..i + 200)
                    .map(|j| make(TopicKind::Priority, j, j))
                    .collect();
                i += 200;
                t.send_batch(&msgs).await?;
                sent.fetch_add(200, Ordering::Relaxed);
            }
            anyhow::Ok(())
        });
        let acked = bg_acked.clone();
        let consumer = bg
            .consumer()
            .concurrency(128)
            .batch(64)
            .shutdown_grace(Duration::from_secs(5));
        let stop = cancel.clone();
        bg_tasks.spawn(async move {
            consumer
                .run(stop, move |_| {
                    let acked = acked.clone();
                    async move {
                        acked.fetch_add(1, Ordering::Relaxed);
                        Outcome::Ack
                    }
                })
                .await?;
            anyhow::Ok(())
        });
        // Let the load reach a steady state.
        tokio::time::sleep(if env.smoke {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        })
        .await;
    }
    let bg_start = (
        bg_sent.load(Ordering::Relaxed),
        bg_acked.load(Ordering::Relaxed),
        Instant::now(),
    );

    let samples: Arc<Mutex<Vec<(i64, i64)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = samples.clone();
    let run = tokio::spawn(
        topic
            .consumer()
            .concurrency(16)
            .shutdown_grace(Duration::from_secs(5))
            .run(cancel.clone(), move |r| {
                let s = s2.clone();
                async move {
                    let local = now_ms();
                    let due = r.due_ms.unwrap_or(local);
                    s.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((r.taken_ms - due, local - due));
                    Outcome::Ack
                }
            }),
    );

    let mut rng = Rng(now_ms() as u64 | 1);
    let start = Instant::now();
    for i in 0..n {
        let at = tokio::time::Instant::from_std(start + spread.mul_f64(i as f64 / n as f64));
        tokio::time::sleep_until(at).await;
        let due = now_ms() + 50 + (rng.next() % 201) as i64;
        topic
            .send(Message::new(payload64(i)).key(key16(i)).at_ms(due))
            .await?;
    }
    let send_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = samples.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        if got >= n {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {got} of {n} latency messages arrived within 20 s of the last send");
        }
        if run.is_finished() {
            bail!("the consumer stopped early ({got} of {n})");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let bg_secs = bg_start.2.elapsed().as_secs_f64();
    let bg_sent_n = bg_sent.load(Ordering::Relaxed) - bg_start.0;
    let bg_acked_n = bg_acked.load(Ordering::Relaxed) - bg_start.1;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .context("the latency consumer did not stop within 15 s")???;
    let drained = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(r) = bg_tasks.join_next().await {
            r??;
        }
        anyhow::Ok(())
    })
    .await;
    drained.context("the background load did not stop within 15 s")??;

    let all = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let server: Vec<i64> = all.iter().map(|s| s.0).collect();
    let local: Vec<i64> = all.iter().map(|s| s.1).collect();
    let mut row = Row::new(
        "latency",
        kind,
        json!({"background": background, "spread_ms": spread.as_millis() as u64}),
        n,
        secs,
    )
    .with("send_secs", round(send_secs, 3))
    .with("lateness_server_ms", percentiles(server))
    .with("lateness_local_ms", percentiles(local));
    if background {
        row = row
            .with("bg_sent_per_sec", round(bg_sent_n as f64 / bg_secs, 0))
            .with("bg_acked_per_sec", round(bg_acked_n as f64 / bg_secs, 0));
    }
    Ok(row)
}

/// `used_memory` once it stops moving (UNLINK and lazy frees of earlier
/// cases finish in the background), at most ~3 s of polling.
async fn settled_used_memory(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    let mut last = info_field(conn, "memory", "used_memory").await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = info_field(conn, "memory", "used_memory").await?;
        let lazy = info_field(conn, "memory", "lazyfree_pending_objects").await?;
        if lazy == 0.0 && (now - last).abs() <= 1024.0 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

async fn memory(env: &Env, client: Client, kind: TopicKind) -> Result<Row> {
    let n = env.n(BIG_N);
    let mut raw = env.raw().await?;
    if env.owned {
        // Only ever on the throwaway server this process started.
        let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await?;
    }
    let topic = define(&client, "mem", kind).await?;
    let before = settled_used_memory(&mut raw).await?;
    let start = Instant::now();
    send_all(&topic, kind, n, 1000).await?;
    let secs = start.elapsed().as_secs_f64();
    let after = settled_used_memory(&mut raw).await?;
    let pending = topic.stats().await?.total.pending;
    if pending != n {
        bail!("{pending} pending, expected {n}");
    }
    Ok(Row::new(
        "memory",
        kind,
        json!({"key_bytes": 16, "payload_bytes": 64}),
        n,
        secs,
    )
    .with("used_memory_before", before as u64)
    .with("used_memory_after", after as u64)
    .with("bytes_per_msg", round((after - before) / n as f64, 1)))
}

// ---------------------------------------------------------------- driver

/// Collects rows, errors and skipped cases.
#[derive(Default)]
struct Results {
    rows: Vec<Row>,
    errors: Vec<String>,
    skipped: Vec<String>,
}

impl Results {
    fn skip(&mut self, scenario: &str, kind: TopicKind, label: &str, why: String) {
        let line =
            json!({"scenario": scenario, "kind": kind.as_str(), "params": label, "skipped": why});
        println!("{line}");
        eprintln!("SKIPPED {scenario} {} {label}: {why}", kind.as_str());
        self.skipped
            .push(format!("{scenario} {} {label}: {why}", kind.as_str()));
    }

    fn fail(&mut self, scenario: &str, kind: TopicKind, label: &str, error: String) {
        let line =
            json!({"scenario": scenario, "kind": kind.as_str(), "params": label, "error": error});
        println!("{line}");
        eprintln!("ERROR {scenario} {} {label}: {error}", kind.as_str());
        self.errors
            .push(format!("{scenario} {} {label}: {error}", kind.as_str()));
    }
}

/// The case running now and when the watchdog gives up on it.
static CURRENT: Mutex<Option<(Instant, String)>> = Mutex::new(None);

fn set_current(v: Option<(Instant, String)>) {
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = v;
}

/// A plain thread that ends the process when a case overruns its budget by
/// far: the in-runtime timeouts cannot fire if a library bug blocks every
/// runtime worker. Kills the throwaway server first.
fn spawn_watchdog(server: Arc<Mutex<Option<rmq_test_support::RedisServer>>>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        let overdue = CURRENT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(deadline, _)| Instant::now() > *deadline)
            .map(|(_, name)| name.clone());
        if let Some(name) = overdue {
            let error = format!("{name}: hung (runtime unresponsive); watchdog abort");
            println!("{}", json!({"scenario": name, "error": error}));
            eprintln!("ERROR {error}");
            drop(server.lock().unwrap_or_else(|p| p.into_inner()).take());
            std::process::exit(3);
        }
    });
}

/// Runs one case with a fresh prefix, a time budget and a cleanup.
async fn run_case<F, Fut>(
    env: &Env,
    out: &mut Results,
    (scenario, kind, label): (&'static str, TopicKind, String),
    msgs: u64,
    f: F,
) where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<Row>>,
{
    let budget = env.budget(msgs);
    set_current(Some((
        Instant::now() + budget + Duration::from_secs(120),
        format!("{scenario} {} {label}", kind.as_str()),
    )));
    let client = match tokio::time::timeout(Duration::from_secs(20), env.client()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return out.fail(scenario, kind, &label, format!("{e:#}")),
        Err(_) => return out.fail(scenario, kind, &label, "connect timed out".into()),
    };
    let result = tokio::time::timeout(budget, f(client.clone())).await;
    match tokio::time::timeout(Duration::from_secs(60), env.cleanup(&client)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("warning: cleanup of {} failed: {e:#}", client.prefix()),
        Err(_) => eprintln!("warning: cleanup of {} timed out", client.prefix()),
    }
    set_current(None);
    match result {
        Ok(Ok(row)) => {
            println!("{}", row.to_json());
            out.rows.push(row);
        }
        Ok(Err(e)) => out.fail(scenario, kind, &label, format!("{e:#}")),
        Err(_) => out.fail(
            scenario,
            kind,
            &label,
            format!("timed out after {} s", budget.as_secs()),
        ),
    }
}

async fn run_all(env: &Env, only: &[String]) -> Results {
    let wants = |s: &str| only.is_empty() || only.iter().any(|o| s.contains(o.as_str()));
    let mut out = Results::default();
    let send_n = env.n(SEND_N);
    let big_n = env.n(BIG_N);
    if wants("send_single") {
        for kind in KINDS {
            for c in [1u64, 16, 128] {
                let id = ("send_single", kind, format!("concurrency={c}"));
                run_case(env, &mut out, id, send_n, |cl| {
                    send_single(env, cl, kind, c)
                })
                .await;
            }
        }
    }
    if wants("send_batch") {
        for kind in KINDS {
            for b in [100u64, 1000] {
                let id = ("send_batch", kind, format!("batch={b}"));
                run_case(env, &mut out, id, send_n, |cl| send_batch(env, cl, kind, b)).await;
            }
        }
    }
    if wants("consume") {
        for (c, b) in [(1usize, 1usize), (16, 16), (128, 64), (128, 1)] {
            let id = (
                "consume",
                TopicKind::Priority,
                format!("concurrency={c} batch={b}"),
            );
            run_case(env, &mut out, id, 2 * send_n, |cl| consume(env, cl, c, b)).await;
        }
    }
    if wants("merge_heavy") {
        let id = ("merge_heavy", TopicKind::Priority, "keys=10000".to_string());
        run_case(env, &mut out, id, big_n, |cl| merge_heavy(env, cl)).await;
    }
    if wants("latency") {
        for bg in [false, true] {
            let id = ("latency", TopicKind::FixedTime, format!("background={bg}"));
            run_case(env, &mut out, id, 0, |cl| latency(env, cl, bg)).await;
        }
    }
    if wants("memory") {
        for kind in KINDS {
            let id = ("memory", kind, String::new());
            run_case(env, &mut out, id, big_n, |cl| memory(env, cl, kind)).await;
        }
    }
    if wants("consume_mode") {
        let mode_n = serial::mode_n(env);
        let budget = 4 * mode_n + 30_000;
        let id = (
            "consume_mode",
            TopicKind::Priority,
            "mode=parallel".to_string(),
        );
        run_case(env, &mut out, id, budget, |cl| {
            serial::consume_mode(env, cl, false, None)
        })
        .await;
        let parallel_rate = out
            .rows
            .last()
            .filter(|r| r.scenario == "consume_mode")
            .map(Row::rate);
        let id = (
            "consume_mode",
            TopicKind::Priority,
            "mode=serial".to_string(),
        );
        run_case(env, &mut out, id, budget, |cl| {
            serial::consume_mode(env, cl, true, parallel_rate)
        })
        .await;
    }
    if wants("handover") {
        let kind = TopicKind::FixedTime;
        let id = ("handover", kind, "case=graceful".to_string());
        run_case(env, &mut out, id, serial::HO_BUDGET_MSGS, |cl| {
            serial::handover_graceful(env, cl)
        })
        .await;
        let label = "case=crash".to_string();
        match serial::rmq_cli_path() {
            Ok(bin) => {
                let id = ("handover", kind, label);
                run_case(env, &mut out, id, serial::HO_BUDGET_MSGS, |cl| {
                    serial::handover_crash(env, cl, &bin)
                })
                .await;
            }
            Err(why) if env.smoke => out.skip("handover", kind, &label, why),
            Err(why) => out.fail("handover", kind, &label, why),
        }
    }
    out
}

fn compact(v: &Value) -> String {
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", compact(v)))
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(rows: &[Row]) -> String {
    let mut lines = vec![format!(
        "{:<12} {:<11} {:<28} {:>9} {:>8} {:>11}  {}",
        "scenario", "kind", "params", "msgs", "secs", "msgs/s", "extra"
    )];
    for r in rows {
        lines.push(format!(
            "{:<12} {:<11} {:<28} {:>9} {:>8.3} {:>11.0}  {}",
            r.scenario,
            r.kind.as_str(),
            compact(&r.params),
            r.msgs,
            r.secs,
            r.rate(),
            compact(&Value::Object(r.extra.clone()))
        ));
    }
    lines.join("\n")
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let scale = if args.smoke { 0.002 } else { args.scale };
    if !(scale > 0.0 && scale.is_finite()) {
        eprintln!("--scale must be a positive number");
        return std::process::ExitCode::from(2);
    }
    // The throwaway server lives until the end of main (dropping it kills it).
    let server = match args.redis {
        Some(_) => None,
        None => Some(rmq_test_support::RedisServer::start()),
    };
    let url = match (&args.redis, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.url(),
        (None, None) => unreachable!("a server was started"),
    };
    let owned = server.is_some();
    let server = Arc::new(Mutex::new(server));
    spawn_watchdog(server.clone());
    let env = Env {
        url,
        owned,
        scale,
        smoke: args.smoke,
        counter: AtomicU64::new(0),
    };
    eprintln!(
        "rmq-bench: redis {} ({}), scale {scale}{}",
        rmq::redact(&env.url),
        if env.owned { "throwaway" } else { "given" },
        if args.smoke { ", smoke" } else { "" }
    );
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let out = rt.block_on(run_all(&env, &args.only));
    rt.shutdown_timeout(Duration::from_secs(5));
    eprintln!("\n{}", table(&out.rows));
    for s in &out.skipped {
        eprintln!("skipped: {s}");
    }
    drop(server.lock().unwrap_or_else(|p| p.into_inner()).take());
    if out.errors.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("\n{} case(s) failed:", out.errors.len());
        for e in &out.errors {
            eprintln!("  {e}");
        }
        std::process::ExitCode::FAILURE
    }
}
