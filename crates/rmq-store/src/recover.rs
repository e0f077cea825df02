//! Recovery after Redis lost data: every row the store holds as queued
//! (sent to Redis, not known to be finished) is looked up in Redis; a key
//! Redis no longer has goes back to `stored`, so a relay sends it again.
//!
//! A key still in Redis (pending, waiting for a retry, in flight) is left
//! alone, so recovery never doubles a message Redis kept. A key that is a
//! dead letter in Redis is marked dead. What recovery cannot tell apart is
//! a key Redis lost from a key that was acked but whose ack the store has
//! not heard of (a consumer that died within its finisher's 50 ms, or
//! reports still queued while PostgreSQL was down): those are delivered
//! again.

use std::collections::HashSet;

use futures::{StreamExt, TryStreamExt};
use rmq::State;

use crate::error::Result;
use crate::topics::StoredTopic;

/// Rows looked at per round.
const BATCH: i64 = 1_000;
/// Lookups in flight at once.
const LOOKUPS: usize = 64;

/// What a recovery did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Queued rows looked up in Redis.
    pub checked: u64,
    /// Of those, still in Redis: left alone.
    pub still_in_redis: u64,
    /// Not in Redis: back to stored, to be sent again.
    pub requeued: u64,
    /// Not in Redis, and a newer send of the key was already stored: merged
    /// into it (kind's rule) and marked done.
    pub merged: u64,
    /// Dead letters in Redis that the store had not heard of: marked dead.
    pub dead: u64,
    /// Not in Redis, but the key's rows kept changing under the recovery
    /// (relays and sends at work): left queued; run the recovery again.
    pub unsettled: u64,
}

impl Recovered {
    pub(crate) fn add(&mut self, o: &Recovered) {
        self.checked += o.checked;
        self.still_in_redis += o.still_in_redis;
        self.requeued += o.requeued;
        self.merged += o.merged;
        self.dead += o.dead;
        self.unsettled += o.unsettled;
    }
}

struct Queued {
    id: i64,
    key: Vec<u8>,
    basis: Option<Vec<u8>>,
    queued_ms: i64,
}

/// Recovers one topic. `redis` must have the topic defined.
pub(crate) async fn topic(
    pg: &tokio_postgres::Client,
    redis: &rmq::Client,
    stored: &StoredTopic,
) -> Result<Recovered> {
    let topic = redis.topic(stored.name()).await?;
    let mut done = Recovered::default();
    let mut after = 0i64;
    loop {
        let rows = pg
            .query(crate::sql::RECOVER_PAGE, &[&stored.name(), &after, &BATCH])
            .await?;
        let Some(last) = rows.last() else {
            return Ok(done);
        };
        after = last.try_get(0)?;
        let queued: Vec<Queued> = rows
            .iter()
            .map(|r| {
                Ok(Queued {
                    id: r.try_get(0)?,
                    key: r.try_get(1)?,
                    basis: r.try_get(2)?,
                    queued_ms: r.try_get(3)?,
                })
            })
            .collect::<Result<_>>()?;
        let lookups: Vec<_> = queued
            .into_iter()
            .map(|q| {
                let topic = topic.clone();
                async move {
                    let basis = q.basis.unwrap_or_else(|| q.key.clone());
                    topic.get_in(&q.key, &basis).await.map(|l| {
                        // A dead letter older than the row's send is an
                        // earlier message of the key: this one was lost.
                        let state = match (l.state, l.dead) {
                            (State::Dead, Some(d)) if d.dead_at_ms < q.queued_ms => State::Absent,
                            (s, _) => s,
                        };
                        (q.id, state)
                    })
                }
            })
            .collect();
        let states: Vec<(i64, State)> = futures::stream::iter(lookups)
            .buffered(LOOKUPS)
            .try_collect()
            .await?;
        // Most lost rows go back in one statement; the rest (a newer send
        // of the key, stored or queued) are settled one by one.
        let absent: Vec<i64> = states
            .iter()
            .filter(|(_, s)| *s == State::Absent)
            .map(|(id, _)| *id)
            .collect();
        let back = requeue_page(pg, &absent).await?;
        for (id, state) in states {
            done.checked += 1;
            match state {
                State::Absent if back.contains(&id) => done.requeued += 1,
                State::Absent => match requeue(pg, id, stored.spec().kind).await? {
                    Some(true) => done.requeued += 1,
                    Some(false) => done.merged += 1,
                    None => done.unsettled += 1,
                },
                State::Dead => {
                    pg.execute(
                        "UPDATE rmq_messages SET status = 'dead', error = 'a dead letter in Redis',
                                finished_at = now(), updated_at = now()
                         WHERE id = $1 AND status = 'queued'",
                        &[&id],
                    )
                    .await?;
                    done.dead += 1;
                }
                _ => done.still_in_redis += 1,
            }
        }
    }
}

/// Puts back to stored every row of `ids` that no other row of its key
/// stands in the way of (one stored already, or a newer one queued), in
/// one statement; returns those it put back. A send that stores one of
/// the keys meanwhile fails the statement: then none is put back here,
/// and each is settled on its own ([`requeue`]).
async fn requeue_page(pg: &tokio_postgres::Client, ids: &[i64]) -> Result<HashSet<i64>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let back = pg
        .query(
            "UPDATE rmq_messages m SET status = 'stored', updated_at = now()
             WHERE m.id = ANY($1) AND m.status = 'queued' AND NOT EXISTS (
                 SELECT 1 FROM rmq_messages s WHERE s.status = 'stored'
                   AND s.topic = m.topic AND s.slot = m.slot AND s.merge_key = m.merge_key)
               AND NOT EXISTS (
                 SELECT 1 FROM rmq_messages n WHERE n.status = 'queued' AND n.id > m.id
                   AND n.topic = m.topic AND n.slot = m.slot AND n.merge_key = m.merge_key)
             RETURNING m.id",
            &[&ids],
        )
        .await;
    match back {
        Ok(rows) => rows.iter().map(|r| Ok(r.try_get(0)?)).collect(),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Ok(HashSet::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// Puts a queued row back to stored; if a row of the same key is stored
/// already, merges the two by the kind's rule instead (the newer send's
/// payload, priority and fixed time; range-merge's earlier due time) and
/// marks this one done. Returns Some(true) when it was put back,
/// Some(false) when merged, None when a relay or an outbox send kept
/// changing the key's rows under it (the row stays queued; recover again).
async fn requeue(
    pg: &tokio_postgres::Client,
    id: i64,
    kind: rmq::TopicKind,
) -> Result<Option<bool>> {
    let due = match kind {
        rmq::TopicKind::RangeMerge => "least(s.due_ms, o.due_ms)",
        _ => "CASE WHEN o.id > s.id THEN o.due_ms ELSE s.due_ms END",
    };
    let load = match kind {
        rmq::TopicKind::FixedTime => "CASE WHEN o.id > s.id THEN o.load_ms ELSE s.load_ms END",
        _ => "0",
    };
    let merge = format!(
        "WITH o AS (SELECT * FROM rmq_messages WHERE id = $1 AND status = 'queued'),
              merged AS (
                UPDATE rmq_messages s SET
                    payload = CASE WHEN o.id > s.id THEN o.payload ELSE s.payload END,
                    priority = CASE WHEN o.id > s.id THEN o.priority ELSE s.priority END,
                    due_ms = {due}, load_ms = {load}, sends = s.sends + o.sends, updated_at = now()
                FROM o
                WHERE s.status = 'stored' AND s.topic = o.topic AND s.slot = o.slot
                  AND s.merge_key = o.merge_key
                RETURNING s.id)
         UPDATE rmq_messages SET status = 'done', finished_at = now(), updated_at = now(),
                error = 'merged at recovery into row ' || (SELECT id FROM merged)
         WHERE id = $1 AND status = 'queued' AND EXISTS (SELECT 1 FROM merged)"
    );
    for _ in 0..3 {
        let back = pg
            .execute(
                "UPDATE rmq_messages m SET status = 'stored', updated_at = now()
                 WHERE m.id = $1 AND m.status = 'queued' AND NOT EXISTS (
                     SELECT 1 FROM rmq_messages s WHERE s.status = 'stored'
                       AND s.topic = m.topic AND s.slot = m.slot AND s.merge_key = m.merge_key)
                   AND NOT EXISTS (
                     SELECT 1 FROM rmq_messages n WHERE n.status = 'queued' AND n.id > m.id
                       AND n.topic = m.topic AND n.slot = m.slot AND n.merge_key = m.merge_key)",
                &[&id],
            )
            .await;
        match back {
            Ok(1) => return Ok(Some(true)),
            Ok(_) => {}
            // An outbox send stored the key meanwhile: merge instead.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {}
            Err(e) => return Err(e.into()),
        }
        if pg.execute(&merge, &[&id]).await? == 1 {
            return Ok(Some(false));
        }
        // A newer send of the key is in Redis (a relay moved it after the
        // lookup): this older one was merged into it there.
        let superseded = pg
            .execute(
                "UPDATE rmq_messages m SET status = 'done', finished_at = now(), updated_at = now(),
                        error = 'superseded by a newer send of the key'
                 WHERE m.id = $1 AND m.status = 'queued' AND EXISTS (
                     SELECT 1 FROM rmq_messages n WHERE n.status = 'queued' AND n.id > m.id
                       AND n.topic = m.topic AND n.slot = m.slot AND n.merge_key = m.merge_key)",
                &[&id],
            )
            .await?;
        if superseded == 1 {
            return Ok(Some(false));
        }
        let still_queued = pg
            .query_opt(
                "SELECT 1 FROM rmq_messages WHERE id = $1 AND status = 'queued'",
                &[&id],
            )
            .await?
            .is_some();
        if !still_queued {
            // Finished meanwhile (a late ack report): nothing to do.
            return Ok(Some(false));
        }
    }
    Ok(None)
}
