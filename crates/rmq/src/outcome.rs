//! What the server did with a message: the outcome of a send, of the end
//! of a delivery, and of a reschedule. Plain data, below every module that
//! decodes or returns them (`scripts::codes`, the producer, deliveries).

/// What a send did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The slot it went to.
    pub slot: u32,
    /// True when it merged into a message with the same key that was
    /// already waiting (pending, or waiting behind an in-flight delivery).
    pub merged: bool,
    /// True when the same key was in flight: this message waits and is
    /// delivered after that delivery ends, however it ends.
    pub behind_in_flight: bool,
    /// Durable sends ([`Topic::durable`](crate::Topic::durable)): how many
    /// replicas had the write when the send returned. `None` otherwise.
    pub replicas: Option<u32>,
    /// Priority topics: the priority the message has now (a merge takes
    /// the newer one).
    pub priority: Option<u32>,
    /// Time-based topics: the due time the message has now, in Unix ms by
    /// the server's clock (a range merge keeps the first send's; a
    /// fixed-time merge takes the newer one).
    pub due_ms: Option<i64>,
    /// The server's clock when the send ran (Unix ms): what a `+delay`
    /// counted from.
    pub server_ms: i64,
}

/// What a requeue did with one dead letter
/// ([`Topic::requeue_dead_each`](crate::Topic::requeue_dead_each)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequeuedLetter {
    /// Its merge key.
    pub key: Vec<u8>,
    /// The slot it lives in.
    pub slot: u32,
    /// True when it merged into a message of the same key that was
    /// already waiting (that message's payload and place win).
    pub merged: bool,
    /// True when the same key was in flight: it waits behind that delivery.
    pub behind_in_flight: bool,
    /// Priority topics: the priority it (or the message it merged into)
    /// has now.
    pub priority: Option<u32>,
    /// Time-based topics: the due time it (or the message it merged into)
    /// has now, in Unix ms by the server's clock: a requeued letter is due
    /// at once.
    pub due_ms: Option<i64>,
    /// The server's clock when the requeue ran (Unix ms).
    pub server_ms: i64,
}

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Acked, extended or released as asked; for a nack, scheduled for a retry.
    Done,
    /// Moved to the dead letters.
    Dead,
    /// A duplicate that arrived while it was in flight took its place
    /// (the newer payload wins) and is pending now.
    Superseded,
    /// The message was cancelled while in flight ([`crate::Topic::cancel`]):
    /// a nack, a dead letter or a release ended it, and nothing of it is kept.
    Cancelled,
}

/// Which waiting message of a key a reschedule moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// The pending message.
    Pending,
    /// The message waiting out a retry backoff.
    RetryWaiting,
    /// The duplicate parked behind the key's in-flight delivery.
    Parked,
}
