//! How long a serial-mode slot handover takes (`handover`): when a member
//! stops gracefully, and when an `rmq consume` process is SIGKILLed, with
//! the members meeting in Redis (the default) or in ZooKeeper
//! (`--coordination` runs both side by side).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmq::{
    CancellationToken, Client, Coordinator, Message, Outcome, RunReport, Topic, TopicKind,
    TopicSpec,
};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::env::Env;
use crate::report::{round, Row};
use crate::workload::{key16, payload64, Rng};

const HO_TOPIC: &str = "ho";
const HO_SLOTS: u32 = 16;
/// Member timeout, slot lease and message lease of `handover` (ms).
const HO_MS: u64 = 1_000;
/// The producer sends one message this often (ms).
const HO_SEND_EVERY_MS: u64 = 2;
/// Entities (slot bases) the producer picks from.
const HO_ENTITIES: u64 = 4_096;

/// Budget handed to `run_case` for one handover case (as a message count:
/// one ms each on top of the 30 s base).
pub(crate) const HO_BUDGET_MSGS: u64 = 60_000;

/// Every delivery a member handled: (slot, when the handler started).
#[derive(Default)]
struct Seen(Mutex<Vec<(u32, Instant)>>);

impl Seen {
    fn log(&self) -> std::sync::MutexGuard<'_, Vec<(u32, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn record(&self, slot: u32) {
        let now = Instant::now();
        self.log().push((slot, now));
    }
    fn len(&self) -> usize {
        self.log().len()
    }
    /// Slots handled at or after `t`.
    fn slots_since(&self, t: Instant) -> BTreeSet<u32> {
        self.log()
            .iter()
            .filter(|(_, at)| *at >= t)
            .map(|(s, _)| *s)
            .collect()
    }
    /// Per slot, the first delivery at or after `t`.
    fn first_since(&self, t: Instant) -> BTreeMap<u32, Instant> {
        let mut m = BTreeMap::new();
        for &(s, at) in self.log().iter().filter(|(_, at)| *at >= t) {
            m.entry(s).or_insert(at);
        }
        m
    }
}

/// `Instant::now() - d`, or `floor` when that is earlier or not representable.
fn ago(d: Duration, floor: Instant) -> Instant {
    Instant::now()
        .checked_sub(d)
        .map_or(floor, |t| t.max(floor))
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1e3, 1)
}

/// Where the members of a serial group meet.
#[derive(Debug, Clone)]
pub(crate) enum Coordination {
    /// Heartbeats in Redis (the default).
    Redis,
    /// ZooKeeper at this `zk://` address; a session per member.
    ZooKeeper(String),
}

impl Coordination {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Coordination::Redis => "redis",
            Coordination::ZooKeeper(_) => "zookeeper",
        }
    }

    /// A member's backend (None: Redis, built in); ZooKeeper: a new
    /// session, as another process would have, timing out like a member.
    pub(crate) async fn coordinator(
        &self,
        member_timeout: Duration,
    ) -> Result<Option<Arc<dyn Coordinator>>> {
        match self {
            Coordination::Redis => Ok(None),
            Coordination::ZooKeeper(address) => {
                let zk = rmq_zk::ZooKeeper::connect(address, member_timeout).await?;
                Ok(Some(Arc::new(zk)))
            }
        }
    }

    /// `rmq consume` flags for it.
    fn cli_args(&self) -> Vec<String> {
        match self {
            Coordination::Redis => Vec::new(),
            Coordination::ZooKeeper(address) => vec!["--coordinator".into(), address.clone()],
        }
    }
}

/// One serial member of `group` on `topic` that acks everything and records
/// what it handled.
async fn member(
    topic: &Topic,
    group: &str,
    seen: Arc<Seen>,
    stop: CancellationToken,
    coordination: &Coordination,
) -> Result<JoinHandle<rmq::Result<RunReport>>> {
    let mut b = crate::env::consumer(topic)
        .concurrency(16)
        .shutdown_grace(Duration::from_secs(5))
        .serial(group)
        .member_timeout(Duration::from_millis(HO_MS))
        .slot_lease(Duration::from_millis(HO_MS));
    if let Some(c) = coordination
        .coordinator(Duration::from_millis(HO_MS))
        .await?
    {
        b = b.coordinator(c);
    }
    Ok(tokio::spawn(b.run(stop, move |r| {
        let seen = seen.clone();
        async move {
            seen.record(r.slot);
            Outcome::Ack
        }
    })))
}

/// Sends a message every ~2 ms to a random entity until stopped.
struct Producer {
    stop: CancellationToken,
    sent: Arc<AtomicU64>,
    started: Instant,
    task: JoinHandle<Result<()>>,
}

impl Producer {
    fn start(topic: Topic, stop: CancellationToken) -> Producer {
        let sent = Arc::new(AtomicU64::new(0));
        let (s, halt) = (sent.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut rng = Rng(crate::workload::now_ms() as u64 | 1);
            let mut tick = tokio::time::interval(Duration::from_millis(HO_SEND_EVERY_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut i = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = halt.cancelled() => return Ok(()),
                }
                let entity = format!("entity-{}", rng.next() % HO_ENTITIES);
                let m = Message::new(payload64(i))
                    .key(key16(i))
                    .slot_basis(entity)
                    .delay(Duration::ZERO);
                topic.send(m).await?;
                s.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        });
        Producer {
            stop,
            sent,
            started: Instant::now(),
            task,
        }
    }

    fn check(&self) -> Result<()> {
        if self.task.is_finished() {
            bail!("the producer stopped early");
        }
        Ok(())
    }

    /// Stops it; returns how many it sent and for how long.
    async fn finish(self) -> Result<(u64, f64)> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .context("the producer did not stop within 10 s")???;
        Ok((
            self.sent.load(Ordering::Relaxed),
            self.started.elapsed().as_secs_f64(),
        ))
    }
}

async fn handover_topic(client: &Client) -> Result<Topic> {
    let spec = TopicSpec::new(HO_TOPIC, TopicKind::FixedTime)
        .slots(HO_SLOTS)
        .lease(Duration::from_millis(HO_MS));
    Ok(client.define_topic(spec).await?)
}

fn ho_params(case: &str, coordination: &Coordination) -> serde_json::Value {
    json!({
        "case": case,
        "coordinator": coordination.label(),
        "slots": HO_SLOTS,
        "member_timeout_ms": HO_MS,
        "slot_lease_ms": HO_MS,
        "msg_lease_ms": HO_MS,
        "send_every_ms": HO_SEND_EVERY_MS,
    })
}

/// How long each member runs before the next step.
fn phase(env: &Env) -> Duration {
    if env.smoke {
        Duration::from_millis(1_000)
    } else {
        Duration::from_millis(1_500)
    }
}

fn member_alive(run: &JoinHandle<rmq::Result<RunReport>>, name: &str) -> Result<()> {
    if run.is_finished() {
        bail!("member {name} stopped early");
    }
    Ok(())
}

/// Waits until every message sent was acked (unique keys: nothing merges),
/// at most `wait`. Returns whether it got there and the final counts.
async fn drain(topic: &Topic, sent: u64, wait: Duration) -> Result<(bool, rmq::Stats)> {
    let deadline = Instant::now() + wait;
    loop {
        let st = topic.stats().await?.total;
        if st.acked >= sent || Instant::now() > deadline {
            return Ok((st.acked >= sent, st));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `seen` has a delivery at or after `t0` in every slot of
/// `slots`, at most `wait`; returns those first deliveries.
async fn first_deliveries(
    seen: &Seen,
    slots: &BTreeSet<u32>,
    t0: Instant,
    wait: Duration,
    who: &str,
) -> Result<BTreeMap<u32, Instant>> {
    let deadline = t0 + wait;
    loop {
        let first = seen.first_since(t0);
        if slots.iter().all(|s| first.contains_key(s)) {
            return Ok(first);
        }
        if Instant::now() > deadline {
            let missing: Vec<u32> = slots
                .iter()
                .filter(|s| !first.contains_key(s))
                .copied()
                .collect();
            bail!(
                "{who} had no delivery in slots {missing:?} within {} s of the stop",
                wait.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Over `slots`, the time from `t0` to the first delivery: the longest
/// (with its slot) and the shortest, in ms.
fn spans(first: &BTreeMap<u32, Instant>, slots: &BTreeSet<u32>, t0: Instant) -> Span {
    let d: Vec<(Duration, u32)> = slots
        .iter()
        .filter_map(|s| {
            first
                .get(s)
                .map(|at| (at.saturating_duration_since(t0), *s))
        })
        .collect();
    let (max, slowest) = d.iter().max().copied().unwrap_or_default();
    let min = d.iter().map(|x| x.0).min().unwrap_or_default();
    Span {
        max_ms: ms(max),
        min_ms: ms(min),
        slowest,
    }
}

struct Span {
    max_ms: f64,
    min_ms: f64,
    slowest: u32,
}

/// Graceful: member A owns all 16 slots, B joins and takes its share, then
/// A stops (cancel + `run` returning, which releases its leases). Measures
/// the time from the cancel until B handled a message in each of A's slots.
pub(crate) async fn handover_graceful(
    env: &Env,
    client: Client,
    coordination: &Coordination,
) -> Result<Row> {
    let topic = handover_topic(&client).await?;
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let producer = Producer::start(topic.clone(), cancel.child_token());
    let phase = phase(env);

    // A alone until it handled messages of every slot.
    let (a_seen, b_seen) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let a_stop = cancel.child_token();
    let a_run = member(&topic, "h", a_seen.clone(), a_stop.clone(), coordination).await?;
    let t_a = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        member_alive(&a_run, "A")?;
        producer.check()?;
        let k = a_seen.slots_since(t_a).len();
        if t_a.elapsed() >= phase && k == HO_SLOTS as usize {
            break;
        }
        if t_a.elapsed() > Duration::from_secs(15) {
            bail!("member A alone handled messages of only {k} of {HO_SLOTS} slots in 15 s");
        }
    }
    let a_alone_ms = ms(t_a.elapsed());

    // B joins; wait until both handle messages and the split is settled
    // (over the last 0.5 s, disjoint slots covering all 16).
    let b_stop = cancel.child_token();
    let b_run = member(&topic, "h", b_seen.clone(), b_stop.clone(), coordination).await?;
    let t_b = Instant::now();
    let settled = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        member_alive(&a_run, "A")?;
        member_alive(&b_run, "B")?;
        producer.check()?;
        let w = ago(Duration::from_millis(500), t_b);
        let (a, b) = (a_seen.slots_since(w), b_seen.slots_since(w));
        let both = !a.is_empty() && !b.is_empty();
        let split = both && a.is_disjoint(&b) && a.len() + b.len() == HO_SLOTS as usize;
        if t_b.elapsed() >= phase && split {
            break true;
        }
        if t_b.elapsed() > Duration::from_secs(10) {
            if !both {
                bail!("A and B did not both handle messages within 10 s of B joining");
            }
            break false;
        }
    };

    // Stop A; time until B handled a message in every slot A had.
    let a_slots = a_seen.slots_since(ago(Duration::from_secs(1), t_b));
    let b_slots = b_seen.slots_since(ago(Duration::from_secs(1), t_b));
    if a_slots.is_empty() {
        bail!("A handled nothing in the second before its stop");
    }
    let t0 = Instant::now();
    a_stop.cancel();
    let a_report = tokio::time::timeout(Duration::from_secs(15), a_run)
        .await
        .context("member A did not stop within 15 s")???;
    let a_stop_ms = ms(t0.elapsed());
    let first = first_deliveries(&b_seen, &a_slots, t0, Duration::from_secs(20), "B").await?;
    let span = spans(&first, &a_slots, t0);

    let (sent, secs) = producer.finish().await?;
    let (drained, st) = drain(&topic, sent, Duration::from_secs(10)).await?;
    b_stop.cancel();
    let b_report = tokio::time::timeout(Duration::from_secs(15), b_run)
        .await
        .context("member B did not stop within 15 s")???;

    Ok(Row::new(
        "handover",
        TopicKind::FixedTime,
        ho_params("graceful", coordination),
        sent,
        secs,
    )
    .with("graceful_handover_ms", span.max_ms)
    .with("fastest_slot_ms", span.min_ms)
    .with("slowest_slot", span.slowest)
    .with("a_slots", a_slots.len())
    .with("b_slots", b_slots.len())
    .with("settled", settled)
    .with("a_alone_ms", a_alone_ms)
    .with("a_stop_ms", a_stop_ms)
    .with("a_handled", a_seen.len())
    .with("b_handled", b_seen.len())
    .with("a_acked", a_report.acked)
    .with("b_acked", b_report.acked)
    .with("drained", drained)
    .with("acked", st.acked)
    .with("dead", st.dead))
}

/// Where the `rmq` CLI binary should be: next to this executable (both are
/// built into the same target directory and profile).
pub(crate) fn rmq_cli_path() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))?;
    let bin = dir.join("rmq");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "the rmq CLI binary is missing at {}: build it with the same profile \
             (cargo build --release -p rmq-cli, or cargo build -p rmq-cli)",
            bin.display()
        ))
    }
}

/// A child process that is SIGKILLed if still running when dropped.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
    /// SIGKILL now; returns the moment the signal was sent.
    fn kill(&mut self) -> Result<Instant> {
        let mut c = self.0.take().context("the child is gone")?;
        c.kill().context("SIGKILL of rmq consume")?;
        let at = Instant::now();
        let _ = c.wait();
        Ok(at)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Crash: member C is an `rmq consume --serial` process, D joins in this
/// process, then C is SIGKILLed (nothing released). Measures the time from
/// the kill until D handled a message in every one of the 16 slots.
pub(crate) async fn handover_crash(
    env: &Env,
    client: Client,
    bin: &Path,
    coordination: &Coordination,
) -> Result<Row> {
    let topic = handover_topic(&client).await?;
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let producer = Producer::start(topic.clone(), cancel.child_token());
    let phase = phase(env);

    let ms_arg = HO_MS.to_string();
    let child = Command::new(bin)
        .args(["--redis", env.url.as_str(), "--prefix", client.prefix()])
        .args(["consume", HO_TOPIC, "--serial", "--group", "h2"])
        .args(["--member-timeout", &ms_arg, "--slot-lease", &ms_arg])
        .args(["--concurrency", "16"])
        .args(coordination.cli_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut c = KillOnDrop(Some(child));

    // C alone: it must run and ack.
    let t_c = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Some(status) = c.exited() {
            bail!("member C (rmq consume) exited early: {status}");
        }
        producer.check()?;
        if t_c.elapsed() >= phase && topic.stats().await?.total.acked > 0 {
            break;
        }
        if t_c.elapsed() > Duration::from_secs(15) {
            bail!("member C (rmq consume) acked nothing within 15 s");
        }
    }
    let c_alone_acked = topic.stats().await?.total.acked;

    // D joins and takes its share.
    let d_seen = Arc::new(Seen::default());
    let d_stop = cancel.child_token();
    let d_run = member(&topic, "h2", d_seen.clone(), d_stop.clone(), coordination).await?;
    let t_d = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Some(status) = c.exited() {
            bail!("member C (rmq consume) exited early: {status}");
        }
        member_alive(&d_run, "D")?;
        producer.check()?;
        let recent = d_seen.slots_since(ago(Duration::from_millis(500), t_d));
        if t_d.elapsed() >= phase && !recent.is_empty() {
            break;
        }
        if t_d.elapsed() > Duration::from_secs(10) {
            bail!("member D handled nothing within 10 s of joining");
        }
    }
    let d_slots = d_seen.slots_since(ago(Duration::from_secs(1), t_d));
    let taken: BTreeSet<u32> = (0..HO_SLOTS).filter(|s| !d_slots.contains(s)).collect();
    let acked_before_kill = topic.stats().await?.total.acked;

    // SIGKILL C; time until D handled a message in every slot.
    let t0 = c.kill()?;
    let all: BTreeSet<u32> = (0..HO_SLOTS).collect();
    let first = first_deliveries(&d_seen, &all, t0, Duration::from_secs(30), "D").await?;
    let span = spans(&first, &all, t0);
    let taken_span = spans(&first, &taken, t0);

    let (sent, secs) = producer.finish().await?;
    let (drained, st) = drain(&topic, sent, Duration::from_secs(15)).await?;
    d_stop.cancel();
    let d_report = tokio::time::timeout(Duration::from_secs(15), d_run)
        .await
        .context("member D did not stop within 15 s")???;

    Ok(Row::new(
        "handover",
        TopicKind::FixedTime,
        ho_params("crash", coordination),
        sent,
        secs,
    )
    .with("crash_handover_ms", span.max_ms)
    .with("slowest_slot", span.slowest)
    .with("slowest_was_c_slot", taken.contains(&span.slowest))
    .with("fastest_taken_slot_ms", taken_span.min_ms)
    .with("configured_slot_lease_ms", HO_MS)
    .with("keeper_tick_ms", HO_MS / 4)
    .with("c_slots", taken.len())
    .with("d_slots", d_slots.len())
    .with("c_alone_acked", c_alone_acked)
    .with("acked_before_kill", acked_before_kill)
    .with("d_handled", d_seen.len())
    .with("d_acked", d_report.acked)
    .with("retried", st.retried)
    .with("drained", drained)
    .with("acked", st.acked)
    .with("dead", st.dead))
}
