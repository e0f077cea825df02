//! The consumer process: one stream per topic, each delivery handled in
//! its own task (a short sleep, then ack), every start and end recorded
//! with the settle outcome (accepted, refused as stale or fenced). A poison
//! message crashes the whole process, as a real bug would. SIGTERM stops it
//! gracefully.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rmq::{CancellationToken, ErrorKind};

use crate::history::{now_ms, Event, Writer};
use crate::workload::{is_poison, TOPICS};
use crate::Conn;

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[arg(long)]
    pub seed: u64,
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// How long each handler works (ms).
    #[arg(long, default_value_t = 5)]
    pub work_ms: u64,
    /// Serial mode in this consumer group.
    #[arg(long)]
    pub serial: Option<String>,
    /// Serial mode: slot lease and member timeout (ms).
    #[arg(long, default_value_t = 1000)]
    pub slot_lease_ms: u64,
    #[arg(long, default_value_t = 0)]
    pub poison_every: u64,
    #[arg(long)]
    pub history: PathBuf,
}

pub async fn run(a: ConsumeArgs) -> anyhow::Result<()> {
    let w = Arc::new(Mutex::new(Writer::create(&a.history)?));
    let client = a.conn.connect().await?;
    let stop = CancellationToken::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let s = stop.clone();
    tokio::spawn(async move {
        term.recv().await;
        s.cancel();
    });
    let pid = std::process::id();
    let mut tasks = Vec::new();
    for (name, _) in TOPICS {
        let topic = client.topic(name).await?;
        let mut b = topic
            .consumer()
            .concurrency(a.concurrency)
            .batch(a.concurrency)
            .rescan(Duration::from_millis(500));
        if let Some(g) = &a.serial {
            b = b
                .serial(g.clone())
                .slot_lease(Duration::from_millis(a.slot_lease_ms))
                .member_timeout(Duration::from_millis(a.slot_lease_ms));
        }
        let mut deliveries = b.stream(stop.clone());
        let (w, work, seed, poison_every) = (w.clone(), a.work_ms, a.seed, a.poison_every);
        tasks.push(tokio::spawn(async move {
            let mut running = Vec::new();
            while let Some(d) = deliveries.next().await {
                let id = String::from_utf8_lossy(&d.key).into_owned();
                let (slot, token) = (d.slot, d.token);
                lock(&w).write(&Event::Deliver {
                    id: id.clone(),
                    topic: name.to_string(),
                    slot,
                    attempt: d.attempt,
                    token,
                    fence: d.fence,
                    taken_ms: d.taken_ms,
                    due_ms: d.due_ms,
                    priority: d.priority,
                    start: now_ms(),
                    pid,
                });
                if is_poison(seed, &id, poison_every) {
                    // A handler bug that takes the whole process down.
                    std::process::exit(77);
                }
                let w = w.clone();
                running.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    let settle_at = now_ms();
                    let result = match d.ack().await {
                        Ok(()) => "ack".to_string(),
                        Err(e) if e.kind() == ErrorKind::StaleDelivery => "stale".into(),
                        Err(e) if e.kind() == ErrorKind::Fenced => "fenced".into(),
                        // The ack's reply was lost and its retry found the
                        // delivery ended: it may have run.
                        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => "unknown".into(),
                        Err(e) => format!("error: {e}"),
                    };
                    lock(&w).write(&Event::End {
                        id,
                        token,
                        settle_at,
                        slot,
                        topic: name.to_string(),
                        result,
                        end: now_ms(),
                        pid,
                    });
                }));
                running.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
            }
            for h in running {
                let _ = h.await;
            }
            deliveries.close().await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

fn lock(w: &Mutex<Writer>) -> std::sync::MutexGuard<'_, Writer> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}
