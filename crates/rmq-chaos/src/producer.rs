//! The producer process: sends its share of the plan in small batches at a
//! steady pace, records every send's invocation and outcome, and retries
//! what failed (a retried message that was in fact written merges).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use rmq::{Client, ErrorKind, Topic};

use crate::history::{now_ms, Event, Writer};
use crate::workload::{planned, TOPICS};
use crate::Conn;

/// What one producer process does.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[arg(long)]
    pub seed: u64,
    /// First and last (exclusive) message number.
    #[arg(long)]
    pub from: u64,
    #[arg(long)]
    pub to: u64,
    /// Messages per batch, one batch every `--every-ms`.
    #[arg(long, default_value_t = 10)]
    pub batch: u64,
    #[arg(long, default_value_t = 50)]
    pub every_ms: u64,
    /// Durable sends: WAIT for this many replicas.
    #[arg(long)]
    pub durable: Option<u32>,
    #[arg(long, default_value_t = 0)]
    pub poison_every: u64,
    #[arg(long)]
    pub history: PathBuf,
}

pub async fn run(a: ProduceArgs) -> anyhow::Result<()> {
    let mut w = Writer::create(&a.history)?;
    let client: Client = a.conn.connect().await?;
    let mut topics: HashMap<&str, Topic> = HashMap::new();
    for (name, _) in TOPICS {
        let mut t = client.topic(name).await?;
        if let Some(n) = a.durable {
            t = t.durable(n, Duration::from_millis(500));
        }
        topics.insert(name, t);
    }
    let mut i = a.from;
    while i < a.to {
        let end = (i + a.batch).min(a.to);
        let plans: Vec<_> = (i..end)
            .map(|n| planned(a.seed, n, a.poison_every))
            .collect();
        for p in &plans {
            w.write(&Event::SendInvoke {
                id: p.id.clone(),
                topic: p.topic.to_string(),
                at: now_ms(),
            });
        }
        // One batch per topic; failed messages are retried for ~20 s.
        for (name, _) in TOPICS {
            let mut todo: Vec<&crate::workload::Planned> =
                plans.iter().filter(|p| p.topic == name).collect();
            let mut tries = 0;
            while !todo.is_empty() && tries < 40 {
                tries += 1;
                let msgs: Vec<_> = todo.iter().map(|p| p.message()).collect();
                let t = &topics[name];
                let mut failed = Vec::new();
                match t.send_batch(&msgs).await {
                    Ok(report) => {
                        for (p, r) in todo.iter().zip(report.results) {
                            match r {
                                Ok(s) => w.write(&Event::SendOk {
                                    id: p.id.clone(),
                                    at: now_ms(),
                                    replicas: s.replicas,
                                }),
                                Err(e) => {
                                    let unknown =
                                        e.is_retryable() || e.kind() == ErrorKind::NotReplicated;
                                    w.write(&Event::SendErr {
                                        id: p.id.clone(),
                                        at: now_ms(),
                                        unknown,
                                        error: e.to_string(),
                                    });
                                    if unknown || e.kind() == ErrorKind::WrongType {
                                        failed.push(*p);
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => {
                        // A refused batch (bad input) wrote nothing; a
                        // connection error may have written it.
                        let unknown = e.is_retryable();
                        for p in &todo {
                            w.write(&Event::SendErr {
                                id: p.id.clone(),
                                at: now_ms(),
                                unknown,
                                error: e.to_string(),
                            });
                            if unknown {
                                failed.push(*p);
                            }
                        }
                    }
                }
                todo = failed;
                if !todo.is_empty() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        i = end;
        tokio::time::sleep(Duration::from_millis(a.every_ms)).await;
    }
    Ok(())
}
