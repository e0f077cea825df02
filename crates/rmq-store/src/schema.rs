//! The store's schema, shipped as numbered SQL migrations and applied in
//! one transaction under an advisory lock, so that two `rmq store migrate`
//! runs at once apply each migration once.

use crate::error::{Result, StoreError};

/// The migrations in order; version N is `MIGRATIONS[N - 1]`.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/001_init.sql"),
    include_str!("../migrations/002_per_topic_index.sql"),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Any number, the same for every rmq: the advisory lock's key.
const LOCK: i64 = 0x726d_7173_746f_7265; // "rmqstore"

/// Applies the migrations not yet applied; returns the version now.
pub(crate) async fn migrate(pg: &mut tokio_postgres::Client) -> Result<i32> {
    let tx = pg.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS rmq_schema (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let found: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM rmq_schema", &[])
        .await?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let version = i as i32 + 1;
        tx.batch_execute(sql).await?;
        tx.execute("INSERT INTO rmq_schema (version) VALUES ($1)", &[&version])
            .await?;
        tracing::info!(version, "store schema migrated");
    }
    tx.commit().await?;
    Ok(SCHEMA_VERSION)
}

/// Checks that the database has this build's schema.
pub(crate) async fn check(pg: &tokio_postgres::Client) -> Result<()> {
    let exists: bool = pg
        .query_one("SELECT to_regclass('rmq_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Err(StoreError::NotMigrated);
    }
    let found: i32 = pg
        .query_one("SELECT coalesce(max(version), 0) FROM rmq_schema", &[])
        .await?
        .get(0);
    match found {
        0 => Err(StoreError::NotMigrated),
        f if f > SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
            found: f,
            known: SCHEMA_VERSION,
        }),
        f if f < SCHEMA_VERSION => Err(StoreError::NotMigrated),
        _ => Ok(()),
    }
}
