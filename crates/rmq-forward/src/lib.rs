//! # rmq-forward — rmq as the scheduling stage in front of a broker
//!
//! Many teams keep their consumers on RabbitMQ or NATS and want rmq only
//! for what those do badly: merging duplicates, priorities, exact times,
//! one-at-a-time per entity. A [`Forwarder`] consumes an rmq topic and
//! publishes each due message to a broker, acking it in rmq only after the
//! broker **confirmed** it: a RabbitMQ publisher confirm ([`AmqpSink`]) or a
//! JetStream publish ack ([`NatsSink`]). Other brokers plug in through
//! [`Sink`].
//!
//! ## What can be duplicated, and when
//!
//! Forwarding is at least once: a message is acked in rmq after the
//! broker's confirm, so a confirm that was lost or came too late (the
//! broker or the connection died or hung after storing the message), or a
//! forwarder that died between the confirm and its rmq ack, publishes the
//! message again on its next delivery. Every publish carries the message's stable id
//! ([`rmq::Received::stable_id`]; the same for every delivery of one
//! message, different for a new message or a new payload):
//!
//! - **NATS JetStream** drops the second copy by its `Nats-Msg-Id` when it
//!   comes within the stream's duplicate window (2 minutes by default; a
//!   retry comes after the lease, 30 s by default, plus the backoff). The
//!   stream then holds each message once.
//! - **RabbitMQ** has no deduplication: the second copy is delivered too.
//!   Consumers that must not act twice deduplicate on the AMQP
//!   `message_id` property (the same stable id).
//!
//! Nothing is lost: a message that was never confirmed is never acked.
//!
//! ## Headers
//!
//! See [`headers`]: `rmq-id`, `rmq-topic`, `rmq-key`, `rmq-slot`,
//! `rmq-attempt`, `rmq-kind`, and `rmq-priority`, `rmq-due-ms` or
//! `rmq-fence` where they apply. The payload is published as it is.

pub mod amqp;
mod forwarder;
pub mod headers;
pub mod nats;
mod sink;
mod target;

pub use amqp::AmqpSink;
pub use forwarder::{ForwardReport, Forwarder, DEFAULT_BATCH, DEFAULT_CONCURRENCY, SHUTDOWN_GRACE};
pub use nats::NatsSink;
pub use sink::{Confirmed, Sink, SinkError, TargetError};
pub use target::{AnySink, Target};
