//! RabbitMQ (AMQP 0-9-1, with `lapin`): persistent messages, published
//! `mandatory` on a channel in confirm mode, many in flight at once.
//!
//! The target is `amqp://[user:pass@]host:port/vhost?exchange=X&routing_key=Y`
//! (the default exchange `""` with a queue's name as the routing key sends
//! straight to that queue). The exchange (or that queue) must exist: the
//! sink checks it at start and never declares anything.
//!
//! Two things make this more than a publish and an await:
//! - **Which message was returned** (`channels.rs`): an unroutable message
//!   comes back in a `basic.return` before its ack, and `lapin` hands the
//!   returned message to whichever confirm of the channel completes next.
//!   Each publish therefore has a channel of its own while it is in flight
//!   (many channels, one connection), so a return can only be its own; its
//!   `message_id` is checked too.
//! - **A broker that stops answering** (`link.rs`): a whole publish has one
//!   deadline ([`CONFIRM_TIMEOUT`]); a link that missed one is dropped, and
//!   a new connection is made in the background (at most one attempt at a
//!   time, [`CONNECT_TIMEOUT`] each, [`RECONNECT_PAUSE`] apart) while
//!   publishes fail at once as unavailable and are retried after the
//!   topic's backoff. Nothing waits on a lock across network I/O.

mod channels;
mod link;

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Confirmation};
use rmq::Received;

use crate::headers::{self, HeaderValue};
use crate::sink::{Confirmed, Sink, SinkError, TargetError};
use link::Links;

/// The least time between two connection attempts.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// How long a connection attempt may take (a broker that accepts TCP but
/// does not answer, e.g. a stopped process, must not hold anything).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a publish may take, its confirm included, before it counts as
/// failed (and is retried: the broker may have it, see the crate docs).
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an [`AmqpSink`] publishes.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpTarget {
    /// The broker's URI as `lapin` takes it (our query fields removed).
    pub uri: String,
    /// The exchange (`""`: the default exchange).
    pub exchange: String,
    /// The routing key of every message.
    pub routing_key: String,
}

impl std::fmt::Debug for AmqpTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTarget")
            .field("uri", &rmq::redact(&self.uri))
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .finish()
    }
}

/// Publishes to RabbitMQ with publisher confirms.
pub struct AmqpSink {
    target: AmqpTarget,
    links: Links,
    confirm_timeout: Duration,
}

impl AmqpSink {
    /// Connects and checks that the exchange (or, on the default exchange,
    /// the queue) exists.
    ///
    /// # Errors
    ///
    /// [`TargetError::Unreachable`] when the broker does not answer,
    /// [`TargetError::Missing`] when the exchange or queue is not there.
    pub async fn connect(target: AmqpTarget) -> Result<AmqpSink, TargetError> {
        let unreachable =
            |e: String| TargetError::Unreachable(format!("{}: {e}", rmq::redact(&target.uri)));
        let (conn, channel) = link::open(&target.uri).await.map_err(unreachable)?;
        let check = match target.exchange.as_str() {
            "" => channel
                .queue_declare(
                    ShortString::from(target.routing_key.as_str()),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("no queue {:?}: {e}", target.routing_key)),
            name => channel
                .exchange_declare(
                    ShortString::from(name),
                    lapin::ExchangeKind::Direct,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|e| format!("no exchange {name:?}: {e}")),
        };
        check.map_err(TargetError::Missing)?;
        // A failed passive declare closes the channel: publish on a fresh one.
        let channel = channels::confirm_channel(&conn)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let links = Links::new(target.uri.clone(), conn, channel);
        Ok(AmqpSink {
            target,
            links,
            confirm_timeout: CONFIRM_TIMEOUT,
        })
    }

    /// How long a publish may take ([`CONFIRM_TIMEOUT`] by default) before
    /// it fails, its connection is dropped, and a new one is made.
    pub fn confirm_timeout(mut self, d: Duration) -> Self {
        self.confirm_timeout = d;
        self
    }

    async fn publish_on(&self, link: link::Link, msg: &Received) -> Result<Confirmed, SinkError> {
        let (id, table) = field_table(msg);
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(id.as_str()))
            .with_headers(table);
        let lent = match link.channels.take(&link.conn).await {
            Ok(l) => l,
            Err(e) => {
                self.links.drop_link(link.number);
                return Err(SinkError::Unavailable(e));
            }
        };
        let published = lent
            .channel
            .basic_publish(
                ShortString::from(self.target.exchange.as_str()),
                ShortString::from(self.target.routing_key.as_str()),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &msg.payload,
                properties,
            )
            .await;
        let answer = match published {
            Ok(confirm) => confirm.await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Confirmation::Ack(None)) => {
                link.channels.put(lent);
                Ok(Confirmed::default())
            }
            Ok(Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m)))
                if m.delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|i| i.as_str())
                    == Some(id.as_str()) =>
            {
                link.channels.put(lent);
                Err(SinkError::Refused(format!(
                    "unroutable: {} {} (exchange {:?}, routing key {:?})",
                    m.reply_code, m.reply_text, self.target.exchange, self.target.routing_key
                )))
            }
            Ok(Confirmation::Ack(Some(_)) | Confirmation::Nack(Some(_))) => {
                // Another message's return on this channel: it cannot be
                // trusted any more.
                self.links.drop_link(link.number);
                Err(SinkError::Unavailable(
                    "a return for another message arrived on this channel".into(),
                ))
            }
            Ok(Confirmation::Nack(None)) => {
                link.channels.put(lent);
                Err(SinkError::Refused("nacked by the broker".into()))
            }
            Ok(Confirmation::NotRequested) => Err(SinkError::Unavailable(
                "the channel is not in confirm mode".into(),
            )),
            Err(e) => {
                self.links.drop_link(link.number);
                Err(SinkError::Unavailable(e.to_string()))
            }
        }
    }
}

impl Sink for AmqpSink {
    async fn publish(&self, msg: &Received) -> Result<Confirmed, SinkError> {
        let link = self.links.current()?;
        let number = link.number;
        match tokio::time::timeout(self.confirm_timeout, self.publish_on(link, msg)).await {
            Ok(r) => r,
            Err(_) => {
                // A link that stopped confirming is not used again.
                self.links.drop_link(number);
                Err(SinkError::Unavailable(format!(
                    "no confirm within {:?}",
                    self.confirm_timeout
                )))
            }
        }
    }
}

/// The message's stable id (its `message_id`) and its headers.
fn field_table(msg: &Received) -> (String, FieldTable) {
    let mut t = FieldTable::default();
    let mut id = String::new();
    for (name, value) in headers::of(msg) {
        let v = match value {
            HeaderValue::Text(s) => {
                if name == headers::ID {
                    id.clone_from(&s);
                }
                LongString::from(s.into_bytes())
            }
            HeaderValue::Bytes(b) => LongString::from(b),
        };
        t.insert(ShortString::from(name), AMQPValue::LongString(v));
    }
    (id, t)
}
