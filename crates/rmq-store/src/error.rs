//! The store's errors: PostgreSQL's, rmq's, and the store's own refusals.

/// What a store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// PostgreSQL failed or could not be reached.
    #[error("PostgreSQL: {}", with_causes(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// Redis (through rmq) failed.
    #[error(transparent)]
    Rmq(#[from] rmq::Error),
    /// The message does not fit the topic (kind's timing, sizes, key):
    /// nothing was written.
    #[error("message refused: {0}")]
    Refused(rmq::Error),
    /// The topic was never defined in the store.
    #[error("topic {0:?} is not defined in the store (define it with `Store::define_topic` or `rmq store define`)")]
    UnknownTopic(String),
    /// The topic is defined in the store with another definition.
    #[error("topic {0:?} is defined in the store with another kind or slot count")]
    TopicConflict(String),
    /// The database has no rmq schema yet.
    #[error("the database has no rmq store schema: run `rmq store migrate --pg URL`")]
    NotMigrated,
    /// The database's schema is newer than this build knows.
    #[error("the store's schema is at version {found}; this rmq knows up to {known}: upgrade rmq")]
    SchemaTooNew {
        /// The database's version.
        found: i32,
        /// This build's newest.
        known: i32,
    },
    /// A value read from the database is out of range (a row written by
    /// hand?).
    #[error("bad row in the store: {0}")]
    BadRow(String),
}

/// The error and what caused it (`error connecting to server: Connection
/// refused (os error 111)`): tokio-postgres keeps the cause apart.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

/// `Result` with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
