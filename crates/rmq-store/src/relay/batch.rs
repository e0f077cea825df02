//! One topic's batch: its due rows taken with `FOR UPDATE SKIP LOCKED`,
//! sent to Redis, and marked queued (or dead, for a row that can never be
//! sent) in the same transaction, so the status stays the checkpoint.

use std::time::{Duration, Instant};

use rmq::{ErrorKind, Message, TopicKind};

use super::{ms, Relay};
use crate::error::{Result, StoreError};

/// A row marked dead: its id, its key (for the log) and why.
struct Refused {
    id: i64,
    key: Vec<u8>,
    reason: String,
}

/// What became of one batch's rows.
#[derive(Default)]
struct Batch {
    queued: Vec<i64>,
    refused: Vec<Refused>,
    /// Rows left stored for a later round (Redis full, or unreachable).
    held: usize,
}

impl Batch {
    fn refuse(&mut self, id: i64, key: &[u8], reason: String) {
        self.refused.push(Refused {
            id,
            key: key.to_vec(),
            reason,
        });
    }
}

impl Relay {
    /// Moves one batch of `name`'s due rows; returns how many it took
    /// (none when every row was held back: the topic is full).
    pub(super) async fn move_topic(&mut self, name: &str) -> Result<usize> {
        let Some((stored, topic)) = self.topics.get(name) else {
            return Ok(0);
        };
        let (kind, topic) = (stored.spec().kind, topic.clone());
        let (window, limit) = (
            ms(self.options.window),
            i64::from(self.options.batch.max(1)),
        );
        let tx = self.pg.transaction().await?;
        let rows = tx
            .query(crate::sql::TAKE_DUE, &[&name, &window, &limit])
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let taken = rows.len();
        // Redis's clock, read before the send: deliveries are stamped with
        // it (`taken_ms`), and a delivery taken at or after this time
        // carries this send's content.
        let queued_ms = self.redis.server_time_ms().await?;
        let mut batch = Batch::default();
        // One message that does not fit the topic as Redis defines it now
        // (a lowered payload limit) would refuse its whole batch: it goes
        // dead alone, checked here before anything is sent.
        let spec = topic.spec();
        let mut fit: Vec<(i64, Message)> = Vec::with_capacity(taken);
        for r in &rows {
            let id: i64 = r.try_get(0)?;
            match message_of(kind, r, queued_ms) {
                Ok(m) => match m.check(&spec) {
                    Ok(()) => fit.push((id, m)),
                    Err(e) => batch.refuse(
                        id,
                        m.merge_key(),
                        format!("does not fit the topic as Redis defines it (checked by the relay): {e}"),
                    ),
                },
                Err(e) => batch.refuse(
                    id,
                    r.try_get::<_, &[u8]>(1).unwrap_or_default(),
                    format!("unreadable row: {e}"),
                ),
            }
        }
        let mut full = false;
        for chunk in fit.chunks(rmq::MAX_BATCH) {
            let messages: Vec<Message> = chunk.iter().map(|(_, m)| m.clone()).collect();
            let report = topic.send_batch(&messages).await?;
            let mut late = Vec::new();
            for ((id, m), r) in chunk.iter().zip(report.results) {
                match r {
                    Ok(_) => batch.queued.push(*id),
                    // Due by Redis's clock already: due at once.
                    Err(e) if e.kind() == ErrorKind::PastDue => {
                        late.push((*id, m.clone().delay(Duration::ZERO)));
                    }
                    Err(e) if refused_for_good(e.kind()) => {
                        batch.refuse(*id, m.merge_key(), format!("refused by Redis: {e}"));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "Redis refused a row for now; it stays stored");
                        batch.held += 1;
                        full = true;
                    }
                }
            }
            if !late.is_empty() {
                let messages: Vec<Message> = late.iter().map(|(_, m)| m.clone()).collect();
                let report = topic.send_batch(&messages).await?;
                for ((id, m), r) in late.iter().zip(report.results) {
                    match r {
                        Ok(_) => batch.queued.push(*id),
                        Err(e) if refused_for_good(e.kind()) => {
                            batch.refuse(*id, m.merge_key(), format!("refused by Redis: {e}"));
                        }
                        Err(_) => {
                            batch.held += 1;
                            full = true;
                        }
                    }
                }
            }
        }
        tx.execute(
            "UPDATE rmq_messages SET status = 'queued', queued_ms = $2, updated_at = now()
             WHERE id = ANY($1) AND status = 'stored'",
            &[&batch.queued, &queued_ms],
        )
        .await?;
        if !batch.refused.is_empty() {
            let ids: Vec<i64> = batch.refused.iter().map(|r| r.id).collect();
            let errors: Vec<&str> = batch.refused.iter().map(|r| r.reason.as_str()).collect();
            tx.execute(
                "UPDATE rmq_messages m SET status = 'dead', error = f.error,
                        finished_at = now(), updated_at = now()
                 FROM unnest($1::int8[], $2::text[]) AS f(id, error)
                 WHERE m.id = f.id AND m.status = 'stored'",
                &[&ids, &errors],
            )
            .await?;
        }
        let moved = i64::try_from(batch.queued.len()).unwrap_or(i64::MAX);
        let last = batch.queued.iter().max().copied();
        tx.execute(
            "INSERT INTO rmq_relays (name, moved, last_id, seen_at) VALUES ($1, $2, $3, now())
             ON CONFLICT (name) DO UPDATE SET moved = rmq_relays.moved + $2,
                 last_id = coalesce($3, rmq_relays.last_id), seen_at = now()",
            &[&self.options.name, &moved, &last],
        )
        .await?;
        tx.commit().await?;
        for r in &batch.refused {
            tracing::warn!(relay = %self.options.name, topic = %name,
                key = %String::from_utf8_lossy(&r.key), id = r.id, reason = %r.reason,
                "a stored message was marked dead instead of moved to Redis");
        }
        if full {
            // Its rows stay stored; it rests for a poll, and the other
            // topics' batches go on meanwhile.
            self.resting
                .insert(name.to_string(), Instant::now() + self.options.poll);
        }
        self.report.moved += batch.queued.len() as u64;
        self.report.refused += batch.refused.len() as u64;
        Ok(if batch.held == taken { 0 } else { taken })
    }
}

/// Refusals that a later try would meet again: the row goes dead.
fn refused_for_good(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::InvalidArgument
            | ErrorKind::InvalidName
            | ErrorKind::PayloadTooLarge
            | ErrorKind::PastDue
            | ErrorKind::WrongType
    )
}

/// The rmq message a row stands for. Fixed-time messages overdue by now
/// are sent as due at once; range-merge ones with what is left of their
/// range, so that they are due when the store's first send said.
fn message_of(kind: TopicKind, r: &tokio_postgres::Row, now: i64) -> Result<Message> {
    let key: Vec<u8> = r.try_get(1)?;
    let basis: Option<Vec<u8>> = r.try_get(2)?;
    let payload: Vec<u8> = r.try_get(3)?;
    let priority: Option<i64> = r.try_get(4)?;
    let due: Option<i64> = r.try_get(5)?;
    let mut m = Message::new(payload).key(key);
    if let Some(b) = basis {
        m = m.slot_basis(b);
    }
    let bad = |what: &str| StoreError::BadRow(format!("a {} row without {what}", kind.as_str()));
    Ok(match kind {
        TopicKind::Priority => {
            let p = priority.ok_or_else(|| bad("a priority"))?;
            m.priority(u32::try_from(p).map_err(|_| bad("a valid priority"))?)
        }
        TopicKind::FixedTime => {
            let due = due.ok_or_else(|| bad("a due time"))?;
            if due <= now {
                m.delay(Duration::ZERO)
            } else {
                m.at_ms(due)
            }
        }
        TopicKind::RangeMerge => {
            let due = due.ok_or_else(|| bad("a due time"))?;
            let left = u64::try_from((due - now).max(1)).unwrap_or(1);
            m.range(Duration::from_millis(left))
        }
    })
}
