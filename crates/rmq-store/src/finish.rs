//! Acks and dead letters flowing back to the store, batched.
//!
//! A consumer reports each delivery it finished; a background task writes
//! the reports every 50 ms (or per 1,000) in one statement. A report
//! finishes the rows of its key that the relay queued before the delivery
//! was taken (`queued_ms <= taken_ms`): the rows whose content the delivery
//! carried. A row the relay sent after the take (a new send of the key
//! while it was in flight) stays queued for the delivery that follows.
//! Reports that cannot be written (PostgreSQL down) are kept and retried;
//! a consumer that dies loses the reports of its last 50 ms, and those rows
//! stay queued (see `Store::recover` for what that means).

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::error::Result;

/// How long reports wait to be written together.
const LINGER: Duration = Duration::from_millis(50);
/// The most reports one statement writes.
const MOST: usize = 1_000;

struct Finished {
    topic: String,
    slot: i32,
    key: Vec<u8>,
    taken_ms: i64,
    dead: Option<String>,
}

enum Report {
    Finished(Finished),
    Flush(oneshot::Sender<()>),
}

/// Reports finished deliveries to the store (cheap to clone).
#[derive(Clone)]
pub struct Finisher {
    tx: mpsc::UnboundedSender<Report>,
}

impl Finisher {
    /// Opens a connection of its own and starts the writer task.
    pub async fn connect(conninfo: &str) -> Result<Finisher> {
        let pg = crate::store::connect(conninfo).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(pg, conninfo.to_string(), rx));
        Ok(Finisher { tx })
    }

    fn report(&self, m: &rmq::Received, dead: Option<String>) {
        let _ = self.tx.send(Report::Finished(Finished {
            topic: m.topic.clone(),
            slot: i32::try_from(m.slot).unwrap_or(i32::MAX),
            key: m.key.clone(),
            taken_ms: m.taken_ms,
            dead,
        }));
    }

    /// The delivery was acked.
    pub fn acked(&self, m: &rmq::Received) {
        self.report(m, None);
    }

    /// The delivery went to the dead letters with `error`.
    pub fn dead(&self, m: &rmq::Received, error: &str) {
        self.report(m, Some(error.to_string()));
    }

    /// Waits until every report made before the call is written.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Report::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

fn take(r: Report, batch: &mut Vec<Finished>, waiters: &mut Vec<oneshot::Sender<()>>) {
    match r {
        Report::Finished(f) => batch.push(f),
        Report::Flush(w) => waiters.push(w),
    }
}

/// Writes reports in batches until every `Finisher` is dropped; a batch
/// that fails is retried (reconnecting if the connection closed) until it
/// is written.
async fn write_loop(
    mut pg: tokio_postgres::Client,
    conninfo: String,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    while let Some(first) = rx.recv().await {
        let (mut batch, mut waiters) = (Vec::new(), Vec::new());
        take(first, &mut batch, &mut waiters);
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < MOST && waiters.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(r)) => take(r, &mut batch, &mut waiters),
                Ok(None) | Err(_) => break,
            }
        }
        let mut backoff = Duration::from_millis(100);
        while let Err(e) = write(&pg, &batch).await {
            tracing::warn!(error = %e, reports = batch.len(), "cannot write finished deliveries to the store; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if pg.is_closed() {
                if let Ok(c) = crate::store::connect(&conninfo).await {
                    pg = c;
                }
            }
        }
        for w in waiters {
            let _ = w.send(());
        }
    }
}

async fn write(pg: &tokio_postgres::Client, batch: &[Finished]) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let (mut topics, mut slots, mut keys, mut taken, mut status, mut errors) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for f in batch {
        topics.push(f.topic.as_str());
        slots.push(f.slot);
        keys.push(f.key.as_slice());
        taken.push(f.taken_ms);
        status.push(if f.dead.is_some() { "dead" } else { "done" });
        errors.push(f.dead.as_deref());
    }
    pg.execute(
        "UPDATE rmq_messages m SET status = f.status, error = f.error,
                finished_at = now(), updated_at = now()
         FROM unnest($1::text[], $2::int4[], $3::bytea[], $4::int8[], $5::text[], $6::text[])
              AS f(topic, slot, merge_key, taken_ms, status, error)
         WHERE m.status = 'queued' AND m.topic = f.topic AND m.merge_key = f.merge_key
           AND m.slot = f.slot AND m.queued_ms <= f.taken_ms",
        &[&topics, &slots, &keys, &taken, &status, &errors],
    )
    .await?;
    Ok(())
}
