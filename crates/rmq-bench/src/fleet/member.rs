//! `--fleet-member`: one consumer of a fleet in a process of its own, as
//! one machine of the original's fleet would be. The fleet bench starts
//! it and drives it over its stdin and stdout, a line each way:
//!
//! - it says `ready` once its consumer started;
//! - `record` starts a phase: pop counts and due→handler lateness from
//!   now (answer `ok`);
//! - `count` asks how many messages it handled so far (`{"delivered": n}`);
//! - `end` ends the phase (`{"delivered", "taken", "empty", "lateness"}`:
//!   pop calls that took something or nothing, and each handled message's
//!   lateness in ms, since `record`);
//! - `stop`, or its stdin closing, stops the consumer and the process.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use metrics_util::debugging::DebuggingRecorder;
use rmq::{CancellationToken, Client, ClientOptions, Outcome};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::pops_since_last;
use crate::workload::now_ms;

/// Where the member connects and how: the fleet's Redis (the seeds of a
/// cluster, comma-separated), its prefix, whether it keeps the head index.
pub(crate) struct MemberArgs {
    pub(crate) url: String,
    pub(crate) cluster: bool,
    pub(crate) prefix: String,
    pub(crate) head_index: bool,
}

/// What its handler saw.
#[derive(Default)]
struct Seen {
    delivered: AtomicU64,
    /// due→handler lateness (ms) of this phase, while one is recorded.
    lateness: Mutex<Option<Vec<i64>>>,
}

/// Runs the member until told to stop; the fleet topic is "fleet".
pub(crate) async fn run(args: MemberArgs) -> Result<()> {
    let recorder = DebuggingRecorder::new();
    let pops = recorder.snapshotter();
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    let options = ClientOptions::default()
        .prefix(&args.prefix)
        .head_index(args.head_index);
    let client = if args.cluster {
        let seeds: Vec<&str> = args.url.split(',').map(str::trim).collect();
        Client::connect_cluster(&seeds, options).await?
    } else {
        Client::connect_with(&args.url, options).await?
    };
    let topic = client.topic("fleet").await?;
    let seen = Arc::new(Seen::default());
    let stop = CancellationToken::new();
    let consumer = {
        let (seen, stop) = (seen.clone(), stop.clone());
        tokio::spawn(async move {
            crate::env::consumer(&topic)
                .concurrency(16)
                .run(stop, move |r| {
                    let seen = seen.clone();
                    async move {
                        let late = now_ms() - r.due_ms.unwrap_or_else(now_ms);
                        if let Some(v) = seen
                            .lateness
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .as_mut()
                        {
                            v.push(late);
                        }
                        seen.delivered.fetch_add(1, Ordering::Relaxed);
                        Outcome::Ack
                    }
                })
                .await
        })
    };
    say("ready")?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        match line.trim() {
            "record" => {
                pops_since_last(&pops);
                *seen.lateness.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
                say("ok")?;
            }
            "count" => {
                say(&json!({"delivered": seen.delivered.load(Ordering::Relaxed)}).to_string())?
            }
            "end" => {
                let (taken, empty) = pops_since_last(&pops);
                let lateness = seen
                    .lateness
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .unwrap_or_default();
                say(&json!({
                    "delivered": seen.delivered.load(Ordering::Relaxed),
                    "taken": taken,
                    "empty": empty,
                    "lateness": lateness,
                })
                .to_string())?;
            }
            "stop" => break,
            other => bail!("unknown fleet member command {other:?}"),
        }
    }
    stop.cancel();
    consumer.await??;
    Ok(())
}

/// One line to the fleet bench, at once.
fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}
