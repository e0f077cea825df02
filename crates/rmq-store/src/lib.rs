//! A PostgreSQL message store under an rmq queue (the second design of the
//! original articles: a message database, a load module with a checkpoint,
//! and status updated by compare-and-set).
//!
//! - **Outbox**: [`StoredTopic::send`] writes a message in the
//!   application's own transaction, so "order saved" and "close-order timer
//!   set" commit together or not at all. A second send of a key still in
//!   the store merges there by the topic kind's rule, as Redis would.
//! - **Relay**: [`Relay`] moves committed messages into the Redis topic —
//!   priority and range-merge at once, fixed-time only when due within its
//!   window, so far-future messages cost PostgreSQL rows, not Redis memory.
//!   Several relays share the work with `FOR UPDATE SKIP LOCKED`; a commit
//!   wakes them with `LISTEN/NOTIFY`.
//! - **Finishing**: a consumer reports acks and dead letters with a
//!   [`Finisher`] (batched), so the store knows what finished.
//! - **Recovery**: [`Store::recover`] re-queues what the store holds as not
//!   finished and Redis no longer has (after a FLUSHALL, a failover that
//!   lost writes); a relay does it by itself when a topic it moves to has
//!   vanished from Redis.
//! - **Retention**: [`Store::prune`] deletes finished rows in bounded
//!   batches.
//!
//! The status column is the checkpoint: a row is `stored` until a relay's
//! transaction that sent it to Redis commits, so a relay that restarts (or
//! another one) resumes with exactly the rows not yet moved.

mod error;
mod finish;
mod outbox;
mod recover;
mod relay;
mod retention;
mod schema;
#[doc(hidden)]
pub mod sql;
mod store;
mod topics;

pub use error::{Result, StoreError};
pub use finish::{Finisher, MAX_BUFFERED};
pub use outbox::Stored;
pub use recover::Recovered;
pub use relay::{Relay, RelayOptions, RelayReport};
pub use schema::SCHEMA_VERSION;
pub use store::{Counts, Store, TopicStats};
pub use tokio_postgres;
pub use topics::StoredTopic;
