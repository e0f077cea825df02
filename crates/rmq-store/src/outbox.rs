//! The transactional outbox: messages written as rows in the application's
//! own transaction, merged by the topic kind's rule while still in the
//! store.
//!
//! The rule is the one Redis applies to a pending message (see
//! `rmq::TopicKind`): every kind takes the newest payload; priority takes
//! the newest priority, fixed-time the newest due time, range-merge keeps
//! the first due time. Duplicates within one batch are merged here first
//! (PostgreSQL refuses to update one row twice in a statement), then the
//! batch merges into stored rows with `INSERT … ON CONFLICT` on the partial
//! unique index of stored rows.

use std::collections::HashMap;

use rmq::{Message, Timing, TopicKind, TopicSpec};

use crate::error::{Result, StoreError};

/// Where a sent message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// The row's id.
    pub id: i64,
    /// True when it merged into a message already in the store (or an
    /// earlier one of its batch).
    pub merged: bool,
}

/// One row to write, merged from the batch's messages with its key.
struct Row<'a> {
    slot: i32,
    key: &'a [u8],
    basis: Option<&'a [u8]>,
    payload: &'a [u8],
    priority: Option<i64>,
    /// Due time, or delay/range when `relative`.
    due: Option<i64>,
    relative: bool,
}

fn row_of<'a>(spec: &TopicSpec, m: &'a Message) -> Row<'a> {
    let slot = i32::try_from(rmq::slot_of(m.basis(), spec.slots)).unwrap_or(i32::MAX);
    let clamp = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
    let (priority, due, relative) = match (spec.kind, m.timing()) {
        (TopicKind::Priority, Timing::Priority(p)) => (Some(i64::from(p)), None, false),
        (TopicKind::Priority, _) => (Some(0), None, false),
        (_, Timing::At(at)) => (None, Some(at), false),
        (_, Timing::Delay(d) | Timing::Range(d)) => (None, Some(clamp(d)), true),
        (_, _) => (None, None, false),
    };
    Row {
        slot,
        key: m.merge_key(),
        basis: m.given_slot_basis(),
        payload: m.payload(),
        priority,
        due,
        relative,
    }
}

/// Merges `later` into `row` by the kind's rule.
fn merge<'a>(kind: TopicKind, row: &mut Row<'a>, later: Row<'a>) {
    row.payload = later.payload;
    match kind {
        TopicKind::Priority => row.priority = later.priority,
        TopicKind::FixedTime => {
            row.due = later.due;
            row.relative = later.relative;
        }
        TopicKind::RangeMerge => {}
    }
}

/// The statement's `ON CONFLICT` update for a kind.
fn on_conflict(kind: TopicKind) -> &'static str {
    match kind {
        TopicKind::Priority => "priority = EXCLUDED.priority",
        TopicKind::FixedTime => "due_ms = EXCLUDED.due_ms, load_ms = EXCLUDED.load_ms",
        TopicKind::RangeMerge => "due_ms = m.due_ms",
    }
}

pub(crate) async fn insert(
    db: &impl tokio_postgres::GenericClient,
    spec: &TopicSpec,
    messages: &[Message],
) -> Result<Vec<Stored>> {
    for m in messages {
        m.check(spec).map_err(StoreError::Refused)?;
    }
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    // Merge duplicates within the batch: one row per (slot, key), in the
    // order of each key's first message.
    let mut rows: Vec<Row> = Vec::with_capacity(messages.len());
    let mut row_of_message = Vec::with_capacity(messages.len());
    let mut first_merged = Vec::with_capacity(messages.len());
    let mut index: HashMap<(i32, &[u8]), usize> = HashMap::with_capacity(messages.len());
    for m in messages {
        let r = row_of(spec, m);
        match index.get(&(r.slot, r.key)) {
            Some(&i) => {
                merge(spec.kind, &mut rows[i], r);
                row_of_message.push(i);
                first_merged.push(true);
            }
            None => {
                index.insert((r.slot, r.key), rows.len());
                row_of_message.push(rows.len());
                first_merged.push(false);
                rows.push(r);
            }
        }
    }
    let slots: Vec<i32> = rows.iter().map(|r| r.slot).collect();
    let keys: Vec<&[u8]> = rows.iter().map(|r| r.key).collect();
    let bases: Vec<Option<&[u8]>> = rows.iter().map(|r| r.basis).collect();
    let payloads: Vec<&[u8]> = rows.iter().map(|r| r.payload).collect();
    let priorities: Vec<Option<i64>> = rows.iter().map(|r| r.priority).collect();
    let dues: Vec<Option<i64>> = rows.iter().map(|r| r.due).collect();
    let relative: Vec<bool> = rows.iter().map(|r| r.relative).collect();
    // A fixed-time row loads when its due time enters the relay's window;
    // but if Redis holds the key already (a queued row), it loads at once,
    // so that its new due time and payload merge into the copy in Redis as
    // a send straight to Redis would (else Redis would deliver the old
    // payload at the old time, and this one later).
    let load = if spec.kind == TopicKind::FixedTime {
        "CASE WHEN EXISTS (SELECT 1 FROM rmq_messages q WHERE q.status = 'queued'
              AND q.topic = $1 AND q.merge_key = r.merge_key AND q.slot = r.slot)
         THEN 0 ELSE d.due END"
    } else {
        "0"
    };
    let sql = format!(
        "INSERT INTO rmq_messages AS m (topic, slot, merge_key, slot_basis, payload, priority, due_ms, load_ms)
         SELECT $1, r.slot, r.merge_key, r.slot_basis, r.payload, r.priority, d.due, {load}
         FROM unnest($2::int4[], $3::bytea[], $4::bytea[], $5::bytea[], $6::int8[], $7::int8[], $8::bool[])
              WITH ORDINALITY AS r(slot, merge_key, slot_basis, payload, priority, due, relative, n)
         CROSS JOIN LATERAL (SELECT CASE WHEN r.relative THEN rmq_now_ms() + r.due ELSE r.due END AS due) d
         ORDER BY r.n
         ON CONFLICT (topic, slot, merge_key) WHERE status = 'stored'
         DO UPDATE SET payload = EXCLUDED.payload, {rule}, sends = m.sends + 1, updated_at = now()
         RETURNING id, NOT (xmax = 0) AS merged, slot, merge_key",
        rule = on_conflict(spec.kind),
    );
    // Typed parameters: one round trip (an untyped query first asks the
    // server to prepare the statement).
    use tokio_postgres::types::Type;
    let returned = db
        .query_typed(
            &sql,
            &[
                (&spec.name, Type::TEXT),
                (&slots, Type::INT4_ARRAY),
                (&keys, Type::BYTEA_ARRAY),
                (&bases, Type::BYTEA_ARRAY),
                (&payloads, Type::BYTEA_ARRAY),
                (&priorities, Type::INT8_ARRAY),
                (&dues, Type::INT8_ARRAY),
                (&relative, Type::BOOL_ARRAY),
            ],
        )
        .await
        .map_err(|e| unknown_topic(e, &spec.name))?;
    let mut by_row: HashMap<(i32, Vec<u8>), Stored> = HashMap::with_capacity(returned.len());
    for r in returned {
        let stored = Stored {
            id: r.try_get(0)?,
            merged: r.try_get(1)?,
        };
        by_row.insert((r.try_get(2)?, r.try_get(3)?), stored);
    }
    row_of_message
        .iter()
        .zip(first_merged)
        .map(|(&i, merged_in_batch)| {
            let r = &rows[i];
            let s = by_row
                .get(&(r.slot, r.key.to_vec()))
                .ok_or_else(|| StoreError::BadRow("an insert did not return a row".into()))?;
            Ok(Stored {
                id: s.id,
                merged: s.merged || merged_in_batch,
            })
        })
        .collect()
}

/// A foreign-key violation on the topic means it is not defined in the
/// store.
fn unknown_topic(e: tokio_postgres::Error, topic: &str) -> StoreError {
    if e.code() == Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION) {
        StoreError::UnknownTopic(topic.to_string())
    } else {
        StoreError::Postgres(e)
    }
}
