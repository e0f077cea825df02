//! Redis work per message, counted in instructions (`--instructions`).
//!
//! Wall-clock figures on a shared host move with the neighbours by more
//! than most changes are worth. Instructions do not: redis-server runs
//! under valgrind's callgrind, which counts the instructions it executes
//! (the same count for the same binary and workload whatever else the
//! machine does), and a fixed workload runs in phases. Before a phase the
//! counters are zeroed (`callgrind_control --zero`), after it they are
//! dumped (`--dump`), and the dump's total divided by the phase's messages
//! is the figure: Redis instructions per message, per phase.
//!
//! Phases, on one priority topic of 16 slots: `send batch=64`, `consume
//! batch=64` (concurrency 64, every message acked), `send single` (one
//! message per call, 16 senders), `consume single` (batch 1, concurrency
//! 16), `send batch=64 again` (for the next phase), `consume
//! concurrency=1` (one handler: with take on settle, one call per
//! message). 20,000 messages per phase at scale 1, after a warm-up round of
//! 64 (script loads and connections are not counted). A consume phase
//! includes its consumer's start-up survey of the 16 slots and Redis's own
//! timer work while the phase runs (small beside 20,000 messages, large
//! beside the smoke run's 40).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rmq::{CancellationToken, Outcome, Topic, TopicKind, TopicSpec};
use rmq_test_support::RedisServer;
use serde_json::json;

use crate::env::Env;
use crate::report::{table, Row};
use crate::send::send_concurrently;
use crate::workload::send_all;

/// Messages per phase at scale 1.
const PER_PHASE: u64 = 20_000;

/// A redis-server under callgrind, its output files in its own directory.
pub(crate) struct Counted {
    pub(crate) server: RedisServer,
    out: PathBuf,
    /// The dumps stay after the run (RMQ_BENCH_CALLGRIND_DIR was given).
    keep: bool,
}

/// Starts redis-server under callgrind: a wrapper script is the server's
/// binary, so the test-support harness starts, probes and stops it as
/// any other (by PID: `exec` keeps valgrind's).
pub(crate) fn start() -> Result<Counted> {
    let valgrind = which("valgrind").context(
        "valgrind is not installed (Debian: apt-get install valgrind; scripts/ensure-deps.sh does)",
    )?;
    let redis = which("redis-server").context("redis-server is not installed")?;
    // RMQ_BENCH_CALLGRIND_DIR keeps the dumps (for callgrind_annotate).
    let keep = std::env::var_os("RMQ_BENCH_CALLGRIND_DIR").map(PathBuf::from);
    let out = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rmq-callgrind-{}", std::process::id()))
    });
    std::fs::create_dir_all(&out)?;
    let wrapper = out.join("redis-under-callgrind.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} --tool=callgrind --quiet --callgrind-out-file={}/callgrind.%p {} \"$@\"\n",
            valgrind.display(),
            out.display(),
            redis.display()
        ),
    )?;
    set_executable(&wrapper)?;
    let server = RedisServer::builder()
        .binary(&wrapper)
        .startup_timeout(Duration::from_secs(120))
        .start();
    Ok(Counted {
        server,
        out,
        keep: keep.is_some(),
    })
}

impl Counted {
    fn pid(&self) -> Result<u32> {
        self.server
            .pid()
            .context("the server under callgrind is not running")
    }

    /// Sets the instruction counters to zero.
    fn zero(&self) -> Result<()> {
        control(&["--zero", &self.pid()?.to_string()])
    }

    /// Writes the counts since the last zero and returns their total.
    fn dump(&self, label: &str) -> Result<u64> {
        let before = self.dumps()?;
        control(&[&format!("--dump={label}"), &self.pid()?.to_string()])?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let new: Vec<PathBuf> = self
                .dumps()?
                .into_iter()
                .filter(|p| !before.contains(p))
                .collect();
            if let Some(total) = new.iter().find_map(|p| total_of(p)) {
                return Ok(total);
            }
            if Instant::now() > deadline {
                bail!("callgrind wrote no dump for {label} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn dumps(&self) -> Result<Vec<PathBuf>> {
        Ok(std::fs::read_dir(&self.out)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("callgrind."))
            })
            .collect())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.server.stop();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.out);
        }
    }
}

fn control(args: &[&str]) -> Result<()> {
    let out = Command::new("callgrind_control")
        .args(args)
        .output()
        .context("cannot run callgrind_control (part of valgrind)")?;
    if !out.status.success() {
        bail!(
            "callgrind_control {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The `summary:` (or `totals:`) line of a complete dump: instructions.
fn total_of(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(path)?.permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(path, perm)?;
    Ok(())
}

/// One phase: what it does to the topic.
#[derive(Clone, Copy)]
enum Phase {
    SendBatch,
    ConsumeBatch,
    SendSingle,
    ConsumeSingle,
    /// A batch send again, for the next phase to consume.
    SendBatchAgain,
    ConsumeOne,
}

impl Phase {
    const ALL: [Phase; 6] = [
        Phase::SendBatch,
        Phase::ConsumeBatch,
        Phase::SendSingle,
        Phase::ConsumeSingle,
        Phase::SendBatchAgain,
        Phase::ConsumeOne,
    ];

    fn label(self) -> &'static str {
        match self {
            Phase::SendBatch => "send batch=64",
            Phase::ConsumeBatch => "consume batch=64",
            Phase::SendSingle => "send single",
            Phase::ConsumeSingle => "consume single",
            Phase::SendBatchAgain => "send batch=64 again",
            Phase::ConsumeOne => "consume concurrency=1",
        }
    }

    async fn run(self, topic: &Topic, n: u64) -> Result<()> {
        let kind = TopicKind::Priority;
        match self {
            Phase::SendBatch | Phase::SendBatchAgain => send_all(topic, kind, n, 64).await,
            Phase::SendSingle => send_concurrently(topic, kind, n, 16).await,
            Phase::ConsumeBatch => consume(topic, n, 64, 64).await,
            Phase::ConsumeSingle => consume(topic, n, 16, 1).await,
            Phase::ConsumeOne => consume(topic, n, 1, 1).await,
        }
    }
}

/// Consumes and acks `n` messages, then stops.
async fn consume(topic: &Topic, n: u64, concurrency: usize, batch: usize) -> Result<()> {
    let acked = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let (count, done) = (acked.clone(), stop.clone());
    crate::env::consumer(topic)
        .concurrency(concurrency)
        .batch(batch)
        .run(stop, move |_| {
            let (count, done) = (count.clone(), done.clone());
            async move {
                if count.fetch_add(1, Ordering::Relaxed) + 1 >= n {
                    done.cancel();
                }
                Outcome::Ack
            }
        })
        .await?;
    let got = acked.load(Ordering::Relaxed);
    if got < n {
        bail!("consumed {got} of {n}");
    }
    Ok(())
}

/// Runs every phase against the server under callgrind; one row each.
pub(crate) async fn measure(env: &Env, counted: &Counted) -> Result<Vec<Row>> {
    let n = env.n(PER_PHASE);
    let client = env.client().await?;
    let topic = client
        .define_topic(TopicSpec::new("instructions", TopicKind::Priority))
        .await?;
    // A warm-up round first: script loads, connections and the consumer's
    // start-up survey are not part of any phase's count.
    for phase in Phase::ALL {
        phase.run(&topic, 64).await?;
    }
    let mut rows = Vec::new();
    for phase in Phase::ALL {
        counted.zero()?;
        let start = Instant::now();
        phase.run(&topic, n).await?;
        let secs = start.elapsed().as_secs_f64();
        let total = counted.dump(&phase.label().replace(' ', "_"))?;
        let per = total as f64 / n as f64;
        eprintln!(
            "instructions: {}: {:.1} M in all, {per:.0} per message",
            phase.label(),
            total as f64 / 1e6
        );
        let row = Row::new(
            "redis_instructions",
            TopicKind::Priority,
            json!({"phase": phase.label()}),
            n,
            secs,
        )
        .with("instructions", total)
        .with("instructions_per_msg", per.round());
        println!("{}", row.to_json());
        rows.push(row);
    }
    eprintln!("\n{}", table(&rows));
    Ok(rows)
}
