//! NATS JetStream (with `async-nats`): each message published with headers
//! to one subject, its `Nats-Msg-Id` the message's stable id, and each
//! publish ack awaited by its own delivery while others are in flight on
//! the same connection.
//!
//! The target is `nats://host:port?subject=S`. A stream must take the
//! subject: the sink checks it at start and never creates one. JetStream
//! drops a message whose id it saw within the stream's duplicate window
//! (2 minutes unless the stream says otherwise), so a message the
//! forwarder publishes twice (a lost ack, a forwarder killed before its
//! rmq ack) is stored once.
//!
//! The client reconnects by itself; a publish meanwhile waits for its ack
//! up to [`ACK_TIMEOUT`], then fails as unavailable and is retried.

use std::time::Duration;

use async_nats::header::{HeaderMap, NATS_MESSAGE_ID};
use async_nats::jetstream::context::PublishErrorKind;
use rmq::Received;

use crate::headers::{self, HeaderValue};
use crate::sink::{Confirmed, Sink, SinkError, TargetError};

/// How long a publish waits for JetStream's ack.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a [`NatsSink`] publishes.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsTarget {
    /// The server, `nats://host:port` (user and password may be in it).
    pub server: String,
    /// The subject of every message.
    pub subject: String,
}

impl std::fmt::Debug for NatsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTarget")
            .field("server", &rmq::redact(&self.server))
            .field("subject", &self.subject)
            .finish()
    }
}

/// Publishes to JetStream with publish acks and deduplication ids.
pub struct NatsSink {
    js: async_nats::jetstream::Context,
    subject: String,
}

impl NatsSink {
    /// Connects and checks that a stream takes the subject.
    ///
    /// # Errors
    ///
    /// [`TargetError::Unreachable`] when the server does not answer,
    /// [`TargetError::Missing`] when no stream takes the subject.
    pub async fn connect(target: NatsTarget) -> Result<NatsSink, TargetError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(target.server.as_str())
            .await
            .map_err(|e| {
                TargetError::Unreachable(format!("{}: {e}", rmq::redact(&target.server)))
            })?;
        let mut js = async_nats::jetstream::new(client);
        js.set_timeout(ACK_TIMEOUT);
        js.stream_by_subject(target.subject.as_str())
            .await
            .map_err(|e| {
                TargetError::Missing(format!(
                    "no JetStream stream takes subject {:?}: {e}",
                    target.subject
                ))
            })?;
        Ok(NatsSink {
            js,
            subject: target.subject,
        })
    }
}

impl Sink for NatsSink {
    async fn publish(&self, msg: &Received) -> Result<Confirmed, SinkError> {
        let mut h = HeaderMap::new();
        for (name, value) in headers::of(msg) {
            match value {
                HeaderValue::Text(s) => {
                    if name == headers::ID {
                        h.insert(NATS_MESSAGE_ID, s.as_str());
                    }
                    h.insert(name, s.as_str());
                }
                HeaderValue::Bytes(b) => {
                    h.insert(format!("{name}-hex").as_str(), headers::hex(&b).as_str())
                }
            }
        }
        let ack = self
            .js
            .publish_with_headers(self.subject.clone(), h, msg.payload.clone().into())
            .await
            .map_err(|e| classify(e.kind(), e.to_string()))?
            .await
            .map_err(|e| classify(e.kind(), e.to_string()))?;
        Ok(Confirmed {
            duplicate: ack.duplicate,
        })
    }
}

fn classify(kind: PublishErrorKind, text: String) -> SinkError {
    match kind {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => SinkError::Unavailable(text),
        _ => SinkError::Refused(text),
    }
}
