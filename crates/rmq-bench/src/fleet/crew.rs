//! The consumers of one fleet case, driven alike through the phases in
//! `mod.rs`: clients of their own in this process (each its own
//! connections; how 130 machines are modelled on a 2-core host), or
//! processes of their own (`--fleet-member`, up to 64 here), as separate
//! machines would be.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use metrics_util::debugging::Snapshotter;
use rmq::{CancellationToken, Outcome, RunReport};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinSet;

use super::{pops_since_last, Case};
use crate::env::Env;
use crate::workload::now_ms;

/// How long a member process may take to start or to answer.
const MEMBER_ANSWER: Duration = Duration::from_secs(60);

/// What a phase saw, over every consumer.
#[derive(Default)]
pub(super) struct Phase {
    /// Pop calls that took something, and that took nothing.
    pub(super) taken: u64,
    pub(super) empty: u64,
    /// Each handled message's due→handler lateness (ms).
    pub(super) lateness: Vec<i64>,
}

/// What consumers' handlers saw (all of this process's: the in-process
/// crew's, or a member process's one consumer).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) delivered: AtomicU64,
    /// due→handler lateness (ms) while a phase is recorded.
    lateness: Mutex<Option<Vec<i64>>>,
}

impl Seen {
    /// A message handled now, that was due at `due_ms` (None: at once).
    pub(super) fn handled(&self, due_ms: Option<i64>) {
        let late = now_ms() - due_ms.unwrap_or_else(now_ms);
        if let Some(v) = self
            .lateness
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            v.push(late);
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts recording lateness (a phase starts).
    pub(super) fn record(&self) {
        *self.lateness.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// The lateness recorded since [`record`](Self::record), which stops.
    pub(super) fn lateness(&self) -> Vec<i64> {
        self.lateness
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    }
}

/// A fleet consumer of `topic`: concurrency 16, every message acked.
pub(super) async fn consume(
    topic: &rmq::Topic,
    seen: Arc<Seen>,
    stop: CancellationToken,
) -> Result<RunReport, rmq::Error> {
    crate::env::consumer(topic)
        .concurrency(16)
        .run(stop, move |r| {
            let seen = seen.clone();
            async move {
                seen.handled(r.due_ms);
                Outcome::Ack
            }
        })
        .await
}

pub(super) enum Crew<'a> {
    InProcess {
        seen: Arc<Seen>,
        pops: &'a Snapshotter,
        cancel: CancellationToken,
        tasks: JoinSet<Result<RunReport, rmq::Error>>,
    },
    Processes(Vec<Member>),
}

/// One `--fleet-member` process and its two pipes.
pub(super) struct Member {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Member {
    async fn spawn(case: &Case, env: &Env, prefix: &str) -> Result<Member> {
        let exe = std::env::current_exe().context("finding rmq-bench's own executable")?;
        let mut cmd = Command::new(exe);
        cmd.arg("--fleet-member")
            .arg("--redis")
            .arg(&env.url)
            .arg("--member-prefix")
            .arg(prefix)
            .arg("--member-head-index")
            .arg(case.index.to_string());
        if env.cluster_nodes.is_some() {
            cmd.arg("--cluster");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a fleet member process")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("a fleet member's pipes are missing");
        };
        Ok(Member {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Its next line.
    async fn line(&mut self) -> Result<String> {
        match tokio::time::timeout(MEMBER_ANSWER, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => bail!("a fleet member exited"),
            Ok(Err(e)) => Err(e).context("reading a fleet member's answer"),
            Err(_) => bail!("a fleet member did not answer in {MEMBER_ANSWER:?}"),
        }
    }

    async fn send(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .context("telling a fleet member")
    }

    /// Its answer to `command`, as JSON.
    async fn ask(&mut self, command: &str) -> Result<serde_json::Value> {
        self.send(command).await?;
        self.answer().await
    }

    /// Its next line, as JSON.
    async fn answer(&mut self) -> Result<serde_json::Value> {
        let line = self.line().await?;
        serde_json::from_str(&line).with_context(|| format!("a fleet member answered {line:?}"))
    }
}

impl<'a> Crew<'a> {
    /// Starts `case.consumers` consumers of the topic "fleet" under
    /// `prefix`, in this process or in processes of their own.
    pub(super) async fn start(
        case: &Case,
        env: &Env,
        prefix: &str,
        pops: &'a Snapshotter,
    ) -> Result<Crew<'a>> {
        if case.processes {
            let mut members = Vec::with_capacity(case.consumers);
            for _ in 0..case.consumers {
                members.push(Member::spawn(case, env, prefix).await?);
            }
            for m in &mut members {
                let line = m.line().await?;
                if line != "ready" {
                    bail!("a fleet member said {line:?} instead of ready");
                }
            }
            return Ok(Crew::Processes(members));
        }
        let seen = Arc::new(Seen::default());
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for _ in 0..case.consumers {
            let client = case.connect(env, prefix).await?;
            let topic = client.topic("fleet").await?;
            let (seen, stop) = (seen.clone(), cancel.clone());
            tasks.spawn(async move {
                let _client = client;
                consume(&topic, seen, stop).await
            });
        }
        Ok(Crew::InProcess {
            seen,
            pops,
            cancel,
            tasks,
        })
    }

    /// Starts a phase: pop counts and lateness from now.
    pub(super) async fn record(&mut self) -> Result<()> {
        match self {
            Crew::InProcess { seen, pops, .. } => {
                pops_since_last(pops);
                seen.record();
            }
            Crew::Processes(members) => {
                for m in members.iter_mut() {
                    m.send("record").await?;
                }
                for m in members.iter_mut() {
                    let line = m.line().await?;
                    if line != "ok" {
                        bail!("a fleet member said {line:?} to record");
                    }
                }
            }
        }
        Ok(())
    }

    /// Messages handled so far, by every consumer.
    pub(super) async fn delivered(&mut self) -> Result<u64> {
        match self {
            Crew::InProcess { seen, .. } => Ok(seen.delivered.load(Ordering::Relaxed)),
            Crew::Processes(members) => {
                // Asked of all at once, then read: one wait, not 64.
                for m in members.iter_mut() {
                    m.send("count").await?;
                }
                let mut total = 0;
                for m in members.iter_mut() {
                    total += m.answer().await?["delivered"].as_u64().unwrap_or(0);
                }
                Ok(total)
            }
        }
    }

    /// Ends a phase: what it saw.
    pub(super) async fn end(&mut self) -> Result<Phase> {
        match self {
            Crew::InProcess { seen, pops, .. } => {
                let (taken, empty) = pops_since_last(pops);
                Ok(Phase {
                    taken,
                    empty,
                    lateness: seen.lateness(),
                })
            }
            Crew::Processes(members) => {
                let mut phase = Phase::default();
                for m in members.iter_mut() {
                    let a = m.ask("end").await?;
                    phase.taken += a["taken"].as_u64().unwrap_or(0);
                    phase.empty += a["empty"].as_u64().unwrap_or(0);
                    if let Some(l) = a["lateness"].as_array() {
                        phase.lateness.extend(l.iter().filter_map(|v| v.as_i64()));
                    }
                }
                Ok(phase)
            }
        }
    }

    /// Stops every consumer and waits for each to end.
    pub(super) async fn stop(self) -> Result<()> {
        match self {
            Crew::InProcess {
                cancel, mut tasks, ..
            } => {
                cancel.cancel();
                while let Some(r) = tasks.join_next().await {
                    r??;
                }
            }
            Crew::Processes(mut members) => {
                // Told all at once: they drain side by side.
                for m in members.iter_mut() {
                    m.send("stop").await?;
                }
                for m in members {
                    drop(m.stdin);
                    let mut child = m.child;
                    let status = tokio::time::timeout(MEMBER_ANSWER, child.wait())
                        .await
                        .context("a fleet member did not stop")??;
                    if !status.success() {
                        bail!("a fleet member ended with {status}");
                    }
                }
            }
        }
        Ok(())
    }
}
