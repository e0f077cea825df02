//! What a broker must do to take forwarded messages: publish one and say
//! when the broker has it for good.
//!
//! The forwarder acks an rmq delivery only after its sink's `publish`
//! returned `Ok`, so a sink must not return before the broker confirmed
//! the message (a RabbitMQ publisher confirm, a JetStream publish ack).
//! Many publishes run at once (one per delivery in flight): a sink
//! pipelines them on its connection rather than taking turns.
//!
//! Why a sink cannot be made ([`TargetError`]) is here too: the address
//! parser (`target.rs`) and each broker's sink report it.

use std::future::Future;

use rmq::Received;

/// A broker that forwarded messages are published to.
pub trait Sink: Send + Sync + 'static {
    /// Publishes `msg` (payload untouched, its rmq fields as headers: see
    /// [`crate::headers`]) and resolves once the broker confirmed it.
    fn publish(&self, msg: &Received) -> impl Future<Output = Result<Confirmed, SinkError>> + Send;
}

/// The broker confirmed a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confirmed {
    /// The broker recognised the message's id as one it already had (a
    /// JetStream duplicate) and kept only the first.
    pub duplicate: bool,
}

/// Why a publish failed. Either way the delivery is retried after the
/// topic's backoff, and after its last attempt it becomes a dead letter
/// whose error is this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The broker answered and refused this message: a nack, an unroutable
    /// message returned by a mandatory publish, no stream for the subject,
    /// a full stream.
    #[error("the broker refused the message: {0}")]
    Refused(String),
    /// The broker could not be reached or stopped answering: the message
    /// may or may not have arrived (see the crate docs on duplicates).
    #[error("the broker is unavailable: {0}")]
    Unavailable(String),
}

/// Why a target cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The address is not one the forwarder understands.
    #[error("bad --to address: {0}")]
    Invalid(String),
    /// The broker did not answer.
    #[error("cannot reach the broker: {0}")]
    Unreachable(String),
    /// The exchange, queue or stream to publish to does not exist.
    #[error("nothing to publish to: {0}")]
    Missing(String),
}
