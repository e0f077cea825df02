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
