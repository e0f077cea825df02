//! Acks and dead letters flowing back to the store, batched.
//!
//! A consumer reports each delivery it finished; a background task writes
//! the reports every 50 ms (or per 1,000) in one statement. A report
//! finishes the rows of its key that the relay queued before the delivery
//! was taken (`queued_ms <= taken_ms`): the rows whose content the delivery
//! carried. A row the relay sent after the take (a new send of the key
//! while it was in flight) stays queued for the delivery that follows.
//! A report that finished no row is tried again every 200 ms for 30 s: the
//! delivery may have been taken and acked before the relay that moved its
//! row committed (the row is still `stored` then). `flush` waits for each
//! report's first try, and up to 2 s for its retries.
//!
//! Reports that cannot be written because PostgreSQL is unreachable are
//! kept and retried, up to a bound ([`MAX_BUFFERED`] by default): beyond
//! it, new reports are dropped (counted, and logged at warn) rather than
//! growing the consumer's memory for as long as PostgreSQL is down.
//! Reports PostgreSQL refuses are logged and dropped. A consumer that dies
//! loses the reports of its last 50 ms. A dropped or lost report's row
//! stays queued: nothing is delivered again unless Redis later loses the
//! message and a recovery runs (see `Store::recover`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::error::Result;

/// How many reports a [`Finisher`] keeps while they cannot be written, by
/// default (each takes about 100 bytes plus its key).
pub const MAX_BUFFERED: usize = 100_000;
/// A warning says how many were dropped once per this many.
const WARN_EVERY: u64 = 10_000;
/// Its sessions' `application_name`.
const APP: &str = "rmq-finisher";
/// How long reports wait to be written together.
const LINGER: Duration = Duration::from_millis(50);
/// The most reports one statement writes.
const MOST: usize = 1_000;
/// A report that matched no row is tried again this often...
const RETRY_EVERY: Duration = Duration::from_millis(200);
/// How long `flush` waits for its reports' retries (a relay commits within
/// milliseconds of its send, unless Redis or PostgreSQL is failing).
const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// ... for this long after it was made (longer than a relay's transaction
/// can stay open while rmq rides out a cluster failover: 15 s).
const RETRY_FOR: Duration = Duration::from_secs(30);

struct Finished {
    topic: String,
    slot: i32,
    key: Vec<u8>,
    taken_ms: i64,
    how: How,
    /// When it was reported.
    at: Instant,
}

/// How a delivery finished.
enum How {
    Acked,
    Dead(String),
    Cancelled,
}

enum Report {
    Finished(Finished),
    Flush(Instant, oneshot::Sender<()>),
}

/// Reports finished deliveries to the store (cheap to clone).
#[derive(Clone)]
pub struct Finisher {
    tx: mpsc::UnboundedSender<Report>,
    count: Arc<Count>,
}

/// Reports made and not yet written or given up, against the bound.
struct Count {
    buffered: AtomicUsize,
    dropped: AtomicU64,
    bound: usize,
}

impl Count {
    /// Takes a place for one report; false (and counted as dropped) when
    /// the bound is reached.
    fn take(&self) -> bool {
        if self.buffered.fetch_add(1, Ordering::AcqRel) < self.bound {
            return true;
        }
        self.buffered.fetch_sub(1, Ordering::AcqRel);
        let n = self.dropped.fetch_add(1, Ordering::AcqRel) + 1;
        if n == 1 || n % WARN_EVERY == 0 {
            tracing::warn!(dropped = n, bound = self.bound,
                "finished-delivery reports dropped: the store cannot take them (PostgreSQL unreachable?); their rows stay queued");
        }
        false
    }

    fn done(&self, n: usize) {
        self.buffered.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Finisher {
    /// Opens a connection of its own and starts the writer task; it keeps
    /// up to [`MAX_BUFFERED`] reports while they cannot be written.
    pub async fn connect(conninfo: &str) -> Result<Finisher> {
        Self::connect_bounded(conninfo, MAX_BUFFERED).await
    }

    /// [`Finisher::connect`], keeping up to `bound` reports (at least one)
    /// while they cannot be written; beyond it new reports are dropped.
    pub async fn connect_bounded(conninfo: &str, bound: usize) -> Result<Finisher> {
        let pg = crate::store::connect(conninfo, APP).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let count = Arc::new(Count {
            buffered: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            bound: bound.max(1),
        });
        tokio::spawn(write_loop(pg, conninfo.to_string(), rx, count.clone()));
        Ok(Finisher { tx, count })
    }

    /// Reports made and not yet written (nor given up).
    pub fn buffered(&self) -> usize {
        self.count.buffered.load(Ordering::Acquire)
    }

    /// Reports dropped because [`Finisher::buffered`] was at the bound.
    pub fn dropped(&self) -> u64 {
        self.count.dropped.load(Ordering::Acquire)
    }

    fn report(&self, m: &rmq::Received, how: How) {
        if !self.count.take() {
            return;
        }
        let sent = self.tx.send(Report::Finished(Finished {
            topic: m.topic.clone(),
            slot: i32::try_from(m.slot).unwrap_or(i32::MAX),
            key: m.key.clone(),
            taken_ms: m.taken_ms,
            how,
            at: Instant::now(),
        }));
        if sent.is_err() {
            self.count.done(1);
        }
    }

    /// The delivery was acked.
    pub fn acked(&self, m: &rmq::Received) {
        self.report(m, How::Acked);
    }

    /// The delivery went to the dead letters with `error`.
    pub fn dead(&self, m: &rmq::Received, error: &str) {
        // PostgreSQL's text cannot hold NUL.
        self.report(m, How::Dead(error.replace('\0', "\u{fffd}")));
    }

    /// The message was cancelled while in flight (its settle said
    /// [`rmq::Settled::Cancelled`]): it is finished, not to come back.
    pub fn cancelled(&self, m: &rmq::Received) {
        self.report(m, How::Cancelled);
    }

    /// Waits until every report made before the call is written.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Report::Flush(Instant::now(), tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A `flush` call waiting: for its reports' first try, and for those
/// that matched no row, until they do or [`FLUSH_WAIT`] passed.
struct Waiter {
    since: Instant,
    tx: oneshot::Sender<()>,
}

fn take(r: Report, batch: &mut Vec<Finished>, waiters: &mut Vec<Waiter>) {
    match r {
        Report::Finished(f) => batch.push(f),
        Report::Flush(since, tx) => waiters.push(Waiter { since, tx }),
    }
}

/// Writes reports in batches until every `Finisher` is dropped; a batch
/// that fails is retried (reconnecting if the connection closed) until it
/// is written. A report that matched no row is tried again every 200 ms
/// for 5 s: its row may be one a relay is still committing (the report's
/// update saw it `stored`, without a `queued_ms`).
async fn write_loop(
    mut pg: tokio_postgres::Client,
    conninfo: String,
    mut rx: mpsc::UnboundedReceiver<Report>,
    count: Arc<Count>,
) {
    let mut later: Vec<Retry> = Vec::new();
    let mut waiting: Vec<Waiter> = Vec::new();
    let mut open = true;
    while open || !later.is_empty() {
        let (mut batch, mut waiters) = (Vec::new(), Vec::new());
        let next_retry = later.iter().map(|r| r.tried + RETRY_EVERY).min();
        let first = match next_retry {
            Some(at) if open => tokio::time::timeout_at(at.into(), rx.recv()).await.ok(),
            Some(at) => {
                tokio::time::sleep_until(at.into()).await;
                None
            }
            None => Some(rx.recv().await),
        };
        match first {
            Some(Some(r)) => take(r, &mut batch, &mut waiters),
            Some(None) => open = false,
            None => {}
        }
        if !batch.is_empty() {
            let deadline = tokio::time::Instant::now() + LINGER;
            while open && batch.len() < MOST && waiters.is_empty() {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(r)) => take(r, &mut batch, &mut waiters),
                    Ok(None) => open = false,
                    Err(_) => break,
                }
            }
        }
        let now = Instant::now();
        let mut first_seen: Vec<Instant> = batch.iter().map(|f| f.at).collect();
        let (due, not_yet): (Vec<Retry>, Vec<Retry>) =
            later.drain(..).partition(|r| r.tried + RETRY_EVERY <= now);
        later = not_yet;
        for r in due {
            if batch.len() >= MOST {
                later.push(r);
                continue;
            }
            batch.push(r.report);
            first_seen.push(r.first);
        }
        let matched = write_until_done(&mut pg, &conninfo, &batch).await;
        let mut finished = 0;
        for ((report, first), hit) in batch.into_iter().zip(first_seen).zip(matched) {
            if hit {
                finished += 1;
                continue;
            }
            if first.elapsed() < RETRY_FOR {
                later.push(Retry {
                    tried: now,
                    first,
                    report,
                });
            } else {
                // No row of it was ever queued (a message sent to Redis
                // directly), or its relay never committed.
                tracing::debug!(topic = %report.topic, "a finished delivery matched no queued row; dropped");
                finished += 1;
            }
        }
        count.done(finished);
        // A flush is done when none of the reports made before it waits
        // for a retry any more (or it waited FLUSH_WAIT for them).
        waiting.append(&mut waiters);
        let oldest_retry = later.iter().map(|r| r.first).min();
        let (done, still): (Vec<Waiter>, Vec<Waiter>) = waiting.drain(..).partition(|w| {
            oldest_retry.is_none_or(|first| first > w.since) || w.since.elapsed() >= FLUSH_WAIT
        });
        waiting = still;
        for w in done {
            let _ = w.tx.send(());
        }
    }
}

/// A report that matched no row yet.
struct Retry {
    tried: Instant,
    first: Instant,
    report: Finished,
}

/// Writes a batch, retrying while PostgreSQL is unreachable; returns per
/// report whether it finished a row (all true for a batch PostgreSQL
/// refused: it is dropped, logged).
async fn write_until_done(
    pg: &mut tokio_postgres::Client,
    conninfo: &str,
    batch: &[Finished],
) -> Vec<bool> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match write(pg, batch).await {
            Ok(m) => return m,
            Err(e) => {
                if refused(&e) {
                    if batch.len() > 1 {
                        // Only the report at fault is dropped.
                        let mut matched = Vec::with_capacity(batch.len());
                        for one in batch.chunks(1) {
                            matched.extend(match write(pg, one).await {
                                Ok(m) => m,
                                Err(e) => {
                                    tracing::error!(error = %e, "the store refused a finished-delivery report; dropped");
                                    vec![true]
                                }
                            });
                        }
                        return matched;
                    }
                    tracing::error!(error = %e, "the store refused a finished-delivery report; dropped");
                    return vec![true];
                }
                tracing::warn!(error = %e, reports = batch.len(), "cannot write finished deliveries to the store; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                if pg.is_closed() {
                    if let Ok(c) = crate::store::connect(conninfo, APP).await {
                        *pg = c;
                    }
                }
            }
        }
    }
}

/// Whether PostgreSQL refused the statement for what it holds (bad data,
/// a constraint, the statement itself: SQLSTATE classes 22, 23, 42), which
/// no retry cures. Everything else (a connection lost, a restart, a
/// deadlock, a cancelled statement, a standby) is retried.
fn refused(e: &crate::StoreError) -> bool {
    match e {
        crate::StoreError::Postgres(pe) => pe.code().is_some_and(|c| {
            ["22", "23", "42"]
                .iter()
                .any(|class| c.code().starts_with(class))
        }),
        _ => false,
    }
}

/// Writes the reports; returns, per report, whether it finished a row.
async fn write(pg: &tokio_postgres::Client, batch: &[Finished]) -> Result<Vec<bool>> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let (mut topics, mut slots, mut keys, mut taken, mut status, mut errors) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for f in batch {
        topics.push(f.topic.as_str());
        slots.push(f.slot);
        keys.push(f.key.as_slice());
        taken.push(f.taken_ms);
        let (st, error) = match &f.how {
            How::Acked => ("done", None),
            How::Cancelled => ("done", Some("cancelled")),
            How::Dead(e) => ("dead", Some(e.as_str())),
        };
        status.push(st);
        errors.push(error);
    }
    let rows = pg
        .query(
            "UPDATE rmq_messages m SET status = f.status, error = f.error,
                    finished_at = now(), updated_at = now()
             FROM unnest($1::text[], $2::int4[], $3::bytea[], $4::int8[], $5::text[], $6::text[])
                  WITH ORDINALITY AS f(topic, slot, merge_key, taken_ms, status, error, n)
             WHERE m.status = 'queued' AND m.topic = f.topic AND m.merge_key = f.merge_key
               AND m.slot = f.slot AND m.queued_ms <= f.taken_ms
             RETURNING f.n",
            &[&topics, &slots, &keys, &taken, &status, &errors],
        )
        .await?;
    let mut matched = vec![false; batch.len()];
    for r in rows {
        let n: i64 = r.try_get(0)?;
        if let Some(m) = usize::try_from(n - 1).ok().and_then(|i| matched.get_mut(i)) {
            *m = true;
        }
    }
    Ok(matched)
}
