//! # rmq — a Redis queue for special messages
//!
//! rmq keeps messages in Redis sorted sets and does what log-based brokers
//! do badly: it **merges** duplicate messages, consumes by **priority**,
//! consumes at an **exact time**, and (in serial mode) consumes all messages
//! of one entity **one at a time**.
//!
//! ## Concepts
//!
//! A **topic** has one [`TopicKind`] and a power-of-two number of **slots**.
//! A message has a **merge key** (its payload when none is given) and a
//! payload; it goes to slot `CRC32(slot basis or merge key) mod slots`. At
//! most one message per key waits in a topic: a duplicate merges into it.
//!
//! | kind | order | a duplicate of a waiting message |
//! | --- | --- | --- |
//! | `range-merge` | due at first send + range, earliest first | keeps the first due time, brings the newest payload |
//! | `priority` | highest priority first, FIFO among equals in a slot | sets the priority (last wins) and the payload |
//! | `fixed-time` | due at the given time, earliest first | sets the due time (last wins) and the payload |
//!
//! A duplicate that arrives while its key is **in flight** is not merged
//! into the running delivery: it waits, and is delivered after that delivery
//! ends, however it ends (ack, failure, expired lease, dead letter).
//!
//! **Consumption has two phases** (at-least-once): a script moves due
//! messages into flight with a lease; the consumer then acks, nacks (retry
//! after an exponential backoff, keeping the message's priority or time
//! semantics), extends the lease, or sends the message to the dead letters.
//! A lease that runs out is rolled back by any consumer as a failed attempt.
//! After `max_attempts` deliveries a message becomes a dead letter with its
//! last error; dead letters can be listed, requeued and purged.
//!
//! Every "now" is the Redis server's clock (`TIME` inside the scripts).
//!
//! ## Guarantees and their limits
//!
//! * Every accepted message is in exactly one place: pending, in flight,
//!   dead, or acknowledged and gone. Redis persistence bounds what survives a
//!   Redis crash: use AOF with `appendfsync always` to keep every
//!   acknowledged send.
//! * Delivery is at least once: a consumer that dies mid-message causes a
//!   second delivery after its lease.
//! * Priority order is exact within a slot. Across slots, each fetch round of
//!   a consumer takes from the slot whose best pending priority is highest,
//!   as far as that consumer knows (from its last look at each slot and from
//!   wake-up notices); several consumers, or a new message that arrives
//!   during a round, can interleave lower priorities of other slots.
//! * A time-based message is never delivered before its due time by the
//!   server clock.
//! * Serial mode ([`ConsumerBuilder::serial`]): no two deliveries of one slot
//!   are handled at once in the group; slot ownership is a lease with an
//!   epoch checked by every pop and settle, so a consumer that lost a slot
//!   can neither take nor settle its messages ([`ErrorKind::Fenced`]). Each
//!   delivery carries the epoch as `fence` for fencing downstream writes.
//!   Retries are rescheduled, so per-entity order holds while deliveries
//!   succeed.
//!
//! ## Quick start
//!
//! ```no_run
//! use rmq::{Client, Message, Outcome, TopicKind, TopicSpec};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> rmq::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let topic = client.define_topic(TopicSpec::new("redraw", TopicKind::Priority)).await?;
//! topic.send(Message::new("sku-42").priority(10)).await?;
//!
//! let stop = CancellationToken::new();
//! let report = topic
//!     .consumer()
//!     .concurrency(8)
//!     .run(stop.clone(), |msg| async move {
//!         println!("redraw {}", String::from_utf8_lossy(&msg.payload));
//!         Outcome::Ack
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod acl;
mod admin;
mod client;
mod conn;
mod consumer;
mod context;
mod control;
mod error;
mod group;
mod keys;
pub mod limits;
mod message;
pub mod observe;
mod outcome;
mod producer;
mod scripts;
mod slot;
mod topic;
mod value;

pub use admin::{DeadLetter, DeadSelection, Pending, SlotLease, Stats, TopicStats};
pub use client::{redact, Client, ClientOptions, Deleted, Password, ServerWarning, TlsOptions};
pub use consumer::{
    ConsumerBuilder, Deliveries, Delivery, Ending, LeaseLost, OnDemand, Outcome, Pool,
    PoolDeliveries, PoolLimits, Receipt, ReceiptKey, RunReport, SerialMember, Share, TopicLimit,
};
pub use control::{
    CancelOutcome, DeadInfo, GroupMember, Lookup, Parked, PauseReport, Reschedule, Rescheduled,
    SerialGroup, SerialView, State,
};
pub use error::{Error, ErrorKind, Result};
pub use group::{
    Coordinator, CoordinatorError, CoordinatorFuture, GroupRef, LeaseReply, Membership,
};
pub use message::{Message, Received, Timing, MAX_KEY_BYTES, MAX_TIME_MS};
pub use outcome::{Moved, RequeuedLetter, Sent, Settled};
pub use producer::{BatchReport, MAX_BATCH};
pub use slot::slot_of;
pub use tokio_util::sync::CancellationToken;
pub use topic::{
    validate_prefix, validate_topic_name, PendingLayout, Topic, TopicKind, TopicSpec,
    MAX_IN_FLIGHT, MAX_PENDING, MAX_PREFIX, MAX_PRIORITY, MAX_RATE, MAX_SLOTS, MAX_TOPIC_NAME,
};
