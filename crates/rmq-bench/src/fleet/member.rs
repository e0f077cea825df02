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
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use metrics_util::debugging::DebuggingRecorder;
use rmq::{CancellationToken, Client, ClientOptions};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::crew::{consume, Seen};
use super::pops_since_last;

/// Where the member connects and how: the fleet's Redis (the seeds of a
/// cluster, comma-separated), its prefix, whether it keeps the head index.
pub(crate) struct MemberArgs {
    pub(crate) url: String,
    pub(crate) cluster: bool,
    pub(crate) prefix: String,
    pub(crate) head_index: bool,
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
        tokio::spawn(async move { consume(&topic, seen, stop).await })
    };
    say("ready")?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        match line.trim() {
            "record" => {
                pops_since_last(&pops);
                seen.record();
                say("ok")?;
            }
            "count" => {
                say(&json!({"delivered": seen.delivered.load(Ordering::Relaxed)}).to_string())?
            }
            "end" => {
                let (taken, empty) = pops_since_last(&pops);
                say(&json!({
                    "delivered": seen.delivered.load(Ordering::Relaxed),
                    "taken": taken,
                    "empty": empty,
                    "lateness": seen.lateness(),
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
