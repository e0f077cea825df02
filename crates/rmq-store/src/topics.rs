//! Topic definitions kept in the store: what a send checks messages
//! against, and what a relay defines in Redis when the topic vanished there
//! (a FLUSHALL, a failover that lost it).

use std::sync::Arc;

use rmq::TopicSpec;

use crate::error::{Result, StoreError};
use crate::outbox;

/// A topic defined in the store: sends go through it.
#[derive(Debug, Clone)]
pub struct StoredTopic {
    pub(crate) spec: Arc<TopicSpec>,
    /// A relay found it missing in Redis and its recovery has not
    /// finished (as last read).
    pub(crate) needs_recovery: bool,
}

impl StoredTopic {
    /// The topic's definition.
    pub fn spec(&self) -> &TopicSpec {
        &self.spec
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Writes `message` in the caller's transaction (or, with a plain
    /// client, in a transaction of its own): it exists if and only if that
    /// transaction commits. A key still in the store (not yet moved to
    /// Redis) merges by the topic kind's rule. A message that does not fit
    /// the topic is refused with [`StoreError::Refused`] and nothing is
    /// written.
    pub async fn send(
        &self,
        db: &impl tokio_postgres::GenericClient,
        message: &rmq::Message,
    ) -> Result<outbox::Stored> {
        let mut all = self.send_batch(db, std::slice::from_ref(message)).await?;
        all.pop()
            .ok_or_else(|| StoreError::BadRow("an insert returned no row".into()))
    }

    /// Writes several messages in one statement: all are checked first and
    /// one refusal writes none. Returns, in the order given, each message's
    /// row and whether it merged (into a row already stored, or into an
    /// earlier message of the same batch).
    pub async fn send_batch(
        &self,
        db: &impl tokio_postgres::GenericClient,
        messages: &[rmq::Message],
    ) -> Result<Vec<outbox::Stored>> {
        outbox::insert(db, &self.spec, messages).await
    }
}

/// Writes the definition: a new topic, or new settings of one with the
/// same kind and slot count (rows depend on both).
pub(crate) async fn define(pg: &tokio_postgres::Client, spec: &TopicSpec) -> Result<StoredTopic> {
    spec.validate().map_err(StoreError::Refused)?;
    let json = serde_json::to_value(spec)
        .map_err(|e| StoreError::BadRow(format!("topic {:?}: {e}", spec.name)))?;
    let slots = i32::try_from(spec.slots).unwrap_or(i32::MAX);
    let rows = pg
        .query(
            "INSERT INTO rmq_topics (name, kind, slots, spec) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec
             WHERE rmq_topics.kind = EXCLUDED.kind AND rmq_topics.slots = EXCLUDED.slots
             RETURNING name",
            &[&spec.name, &spec.kind.as_str(), &slots, &json],
        )
        .await?;
    if rows.is_empty() {
        return Err(StoreError::TopicConflict(spec.name.clone()));
    }
    Ok(StoredTopic {
        spec: Arc::new(spec.clone()),
        needs_recovery: false,
    })
}

/// Reads one definition.
pub(crate) async fn load(pg: &tokio_postgres::Client, name: &str) -> Result<StoredTopic> {
    let row = pg
        .query_opt(
            "SELECT name, spec, needs_recovery FROM rmq_topics WHERE name = $1",
            &[&name],
        )
        .await?
        .ok_or_else(|| StoreError::UnknownTopic(name.to_string()))?;
    spec_of(&row)
}

/// Every definition by name, each read on its own: one that this rmq
/// cannot use (written by hand, or by another version) is an error of its
/// own, so that it stops nothing but its topic.
pub(crate) async fn load_all(
    pg: &tokio_postgres::Client,
) -> Result<Vec<(String, Result<StoredTopic>)>> {
    pg.query(
        "SELECT name, spec, needs_recovery FROM rmq_topics ORDER BY name",
        &[],
    )
    .await?
    .iter()
    .map(|row| Ok((row.try_get(0)?, spec_of(row))))
    .collect()
}

fn spec_of(row: &tokio_postgres::Row) -> Result<StoredTopic> {
    let name: String = row.try_get(0)?;
    let json: serde_json::Value = row.try_get(1)?;
    let bad = |e: &dyn std::fmt::Display| {
        StoreError::BadRow(format!("the definition of topic {name:?}: {e}"))
    };
    let spec: TopicSpec = serde_json::from_value(json).map_err(|e| bad(&e))?;
    spec.validate().map_err(|e| bad(&e))?;
    if spec.name != name {
        return Err(bad(&format!("it names topic {:?}", spec.name)));
    }
    Ok(StoredTopic {
        spec: Arc::new(spec),
        needs_recovery: row.try_get(2)?,
    })
}

/// Marks (or clears) that a topic must be recovered: Redis lost it.
pub(crate) async fn needs_recovery(
    pg: &tokio_postgres::Client,
    name: &str,
    on: bool,
) -> Result<()> {
    pg.execute(
        "UPDATE rmq_topics SET needs_recovery = $2 WHERE name = $1",
        &[&name, &on],
    )
    .await?;
    Ok(())
}
