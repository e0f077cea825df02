//! RabbitMQ (AMQP 0-9-1, with `lapin`): persistent messages, published
//! `mandatory` on a channel in confirm mode, each one's confirm awaited by
//! its own delivery while others are in flight on the same channel.
//!
//! The target is `amqp://[user:pass@]host:port/vhost?exchange=X&routing_key=Y`
//! (the default exchange `""` with a queue's name as the routing key sends
//! straight to that queue). The exchange (or that queue) must exist: the
//! sink checks it at start and never declares anything.
//!
//! A lost connection is made again at the next publish, at most once per
//! [`RECONNECT_PAUSE`]; publishes in between fail as unavailable and their
//! messages are retried after the topic's backoff.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use rmq::Received;

use crate::headers::{self, HeaderValue};
use crate::sink::{Confirmed, Sink, SinkError};
use crate::target::{redacted, TargetError};

/// The least time between two connection attempts.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// How long a connection attempt may take (a broker that accepts TCP but
/// does not answer, e.g. a stopped process, would otherwise hold every
/// publish).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a publish waits for its confirm before it counts as failed
/// (and is retried: the broker may have it, see the crate docs).
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an [`AmqpSink`] publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpTarget {
    /// The broker's URI as `lapin` takes it (our query fields removed).
    pub uri: String,
    /// The exchange (`""`: the default exchange).
    pub exchange: String,
    /// The routing key of every message.
    pub routing_key: String,
}

struct Link {
    conn: Connection,
    channel: Channel,
    number: u64,
}

/// Publishes to RabbitMQ with publisher confirms.
pub struct AmqpSink {
    target: AmqpTarget,
    /// The connection in use, its confirm channel, and which connection
    /// of this sink it is (counted from 1).
    link: tokio::sync::Mutex<Option<Link>>,
    connections: std::sync::atomic::AtomicU64,
    last_attempt: Mutex<Option<Instant>>,
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
        let (conn, channel) = open(&target.uri)
            .await
            .map_err(|e| TargetError::Unreachable(format!("{}: {e}", redacted(&target.uri))))?;
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
        // A failed passive declare closes the channel: open a fresh one.
        let channel = confirm_channel(&conn)
            .await
            .map_err(|e| TargetError::Unreachable(e.to_string()))?;
        Ok(AmqpSink {
            target,
            link: tokio::sync::Mutex::new(Some(Link {
                conn,
                channel,
                number: 1,
            })),
            connections: std::sync::atomic::AtomicU64::new(1),
            last_attempt: Mutex::new(None),
            confirm_timeout: CONFIRM_TIMEOUT,
        })
    }

    /// A channel that is open, reconnecting when there is none.
    async fn channel(&self) -> Result<(Channel, u64), SinkError> {
        let mut link = self.link.lock().await;
        if let Some(l) = link.as_ref() {
            if l.channel.status().connected() && l.conn.status().connected() {
                return Ok((l.channel.clone(), l.number));
            }
        }
        *link = None;
        {
            let mut last = self.last_attempt.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < RECONNECT_PAUSE) {
                return Err(SinkError::Unavailable("reconnecting".into()));
            }
            *last = Some(Instant::now());
        }
        let (conn, ch) = open(&self.target.uri)
            .await
            .map_err(SinkError::Unavailable)?;
        tracing::info!(uri = %redacted(&self.target.uri), "reconnected to RabbitMQ");
        let number = self
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        *link = Some(Link {
            conn,
            channel: ch.clone(),
            number,
        });
        Ok((ch, number))
    }
}

impl AmqpSink {
    /// How long a publish waits for its confirm ([`CONFIRM_TIMEOUT`] by
    /// default) before it fails, the connection is closed, and the next
    /// publish connects again.
    pub fn confirm_timeout(mut self, d: Duration) -> Self {
        self.confirm_timeout = d;
        self
    }

    /// Closes connection `number` if it is still the one in use: the
    /// next publish connects again.
    async fn forget(&self, number: u64) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|l| l.number == number) {
            if let Some(l) = link.take() {
                let _ = l.conn.close(0, "rmq forward: no confirm".into()).await;
            }
        }
    }
}

impl Sink for AmqpSink {
    async fn publish(&self, msg: &Received) -> Result<Confirmed, SinkError> {
        let (channel, number) = self.channel().await?;
        let (id, table) = field_table(msg);
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(id))
            .with_headers(table);
        let confirm = channel
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
            .await
            .map_err(|e| SinkError::Unavailable(e.to_string()))?;
        let Ok(confirm) = tokio::time::timeout(self.confirm_timeout, confirm).await else {
            // A channel that stopped confirming is not used again.
            self.forget(number).await;
            return Err(SinkError::Unavailable(format!(
                "no confirm within {:?}",
                self.confirm_timeout
            )));
        };
        match confirm {
            Ok(Confirmation::Ack(None)) => Ok(Confirmed::default()),
            Ok(Confirmation::Ack(Some(returned))) => Err(SinkError::Refused(format!(
                "unroutable: {} {} (exchange {:?}, routing key {:?})",
                returned.reply_code,
                returned.reply_text,
                self.target.exchange,
                self.target.routing_key
            ))),
            Ok(Confirmation::Nack(_)) => Err(SinkError::Refused("nacked by the broker".into())),
            Ok(Confirmation::NotRequested) => Err(SinkError::Unavailable(
                "the channel is not in confirm mode".into(),
            )),
            Err(e) => Err(SinkError::Unavailable(e.to_string())),
        }
    }
}

async fn open(uri: &str) -> Result<(Connection, Channel), String> {
    let opened = async {
        let conn = Connection::connect(uri, ConnectionProperties::default()).await?;
        let channel = confirm_channel(&conn).await?;
        Ok::<_, lapin::Error>((conn, channel))
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, opened).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

async fn confirm_channel(conn: &Connection) -> lapin::Result<Channel> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
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
