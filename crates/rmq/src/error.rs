//! Errors: one opaque [`Error`] with a small, `Copy` [`ErrorKind`].
//!
//! Every refusal says what was wrong and what to do about it. Script return
//! codes are decoded into kinds in one place ([`Error::from_script_code`] and
//! the `RMQ_*` error replies), so callers match on kinds, never on strings.
//! Handler outcomes (ack, retry, dead) are not errors: see [`crate::Outcome`].

use std::fmt;

/// What went wrong, in a form a program can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A topic name, prefix or merge key does not follow the grammar.
    InvalidName,
    /// The slot count is not a power of two in 1..=65536.
    InvalidSlotCount,
    /// An argument is out of range or does not fit the topic's kind.
    InvalidArgument,
    /// The payload is larger than the topic allows.
    PayloadTooLarge,
    /// A fixed-time message is due in the past (beyond the tolerance).
    PastDue,
    /// The topic was never defined under this prefix.
    UnknownTopic,
    /// The topic exists with another definition.
    TopicConflict,
    /// The delivery is no longer the current one for its key (its lease
    /// expired and it was rolled back or taken again): nothing was changed.
    StaleDelivery,
    /// Serial mode: the slot's lease moved to another consumer (or expired);
    /// this consumer may no longer take or settle its messages. Nothing was changed.
    Fenced,
    /// A queue key holds a value of a foreign type; nothing was written.
    WrongType,
    /// The server is too old or lacks a needed feature.
    UnsupportedServer,
    /// The server's configuration can lose messages (e.g. an eviction policy).
    UnsafeServerConfig,
    /// Redis could not be reached or the connection dropped; retry later.
    Connection,
    /// Redis answered with an error (OOM, NOPERM, ...).
    Redis,
    /// The consumer or client was shut down.
    Shutdown,
    /// A call may or may not have taken effect: the connection broke after
    /// the request was sent, and a retry found the delivery already ended
    /// (by the first try, or by its lease running out meanwhile). Not
    /// retryable: look at the message's state if it matters.
    OutcomeUnknown,
    /// A durable send was written on the master but fewer replicas than
    /// asked acknowledged it in time: a failover now may lose it. Sending
    /// it again is safe (it merges); it is retryable.
    NotReplicated,
    /// No message of the key is waiting (it is absent, dead, or in flight
    /// with nothing parked behind it): nothing was changed.
    NotWaiting,
    /// A topic to delete still holds messages or has live consumers (and
    /// the delete was not forced): nothing was changed.
    TopicInUse,
    /// The topic is bounded (`max_pending`) and holds as many messages as
    /// it may: the new message was refused and nothing was written.
    /// Retryable: room comes back as messages end. A merge into a message
    /// the topic holds is never refused.
    Full,
    /// A receipt given back to settle a delivery was not sealed by the
    /// prefix's receipt key for this topic, or was changed: nothing was
    /// changed.
    InvalidReceipt,
}

/// The error type of every fallible rmq call.
pub struct Error {
    kind: ErrorKind,
    message: String,
    retryable: bool,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result` with rmq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            retryable: matches!(
                kind,
                ErrorKind::Connection | ErrorKind::NotReplicated | ErrorKind::Full
            ),
            source: None,
        }
    }

    /// A copy of kind, message and retryability (the source stays behind):
    /// for handing one failure to several waiting callers.
    pub(crate) fn duplicate(&self) -> Self {
        Error {
            kind: self.kind,
            message: self.message.clone(),
            retryable: self.retryable,
            source: None,
        }
    }

    /// The kind of the failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// True when the same call may succeed later without any change
    /// (connection loss, timeouts, a server that is loading or out of memory).
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// Decodes a per-message refusal code of the send script.
    pub(crate) fn from_send_code(code: i64, max_payload: usize, tolerance_ms: u64) -> Self {
        match code {
            -4 => Error::new(
                ErrorKind::Full,
                "the topic is full: it holds as many messages as its bound (max pending) allows; \
                 nothing was written; retry later (room comes back as messages end)",
            ),
            -1 => Error::new(
                ErrorKind::PastDue,
                format!(
                    "the due time is more than {tolerance_ms} ms in the past by the Redis server's clock; \
                     send a future time, or use a delay instead of an absolute time"
                ),
            ),
            -2 => Error::new(
                ErrorKind::PayloadTooLarge,
                format!("the payload is larger than the topic's limit of {max_payload} bytes"),
            ),
            _ => Error::new(
                ErrorKind::InvalidArgument,
                "the server refused the message's priority, time or range as invalid",
            ),
        }
    }
}

fn redis_error_is_transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::BusyLoading
                    | redis::ServerErrorKind::TryAgain
                    | redis::ServerErrorKind::ClusterDown
                    | redis::ServerErrorKind::MasterDown
                    | redis::ServerErrorKind::Moved
                    | redis::ServerErrorKind::Ask
                    | redis::ServerErrorKind::ReadOnly
            )
        )
        || e.code() == Some("OOM")
}

/// The error names scripts reply with (`redis.error_reply('RMQ_… …')`).
const SCRIPT_ERRORS: [(&str, ErrorKind); 3] = [
    ("RMQ_WRONGTYPE", ErrorKind::WrongType),
    ("RMQ_FENCED", ErrorKind::Fenced),
    ("RMQ_BADARG", ErrorKind::InvalidArgument),
];

/// The kind of an `RMQ_*` error reply, from its code or the start of its text.
pub(crate) fn script_error_kind(code: Option<&str>, detail: &str) -> Option<ErrorKind> {
    SCRIPT_ERRORS
        .iter()
        .find(|(name, _)| code == Some(*name) || detail.starts_with(name))
        .map(|&(_, kind)| kind)
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        let detail = e.detail().unwrap_or_default().to_string();
        let named = script_error_kind(e.code(), &detail);
        let (kind, message) = if named == Some(ErrorKind::Fenced) {
            (
                ErrorKind::Fenced,
                format!("refused by fencing: {detail}; another consumer owns the slot now"),
            )
        } else if named == Some(ErrorKind::WrongType)
            // A script's typed read of a foreign key, before any write.
            || e.code() == Some("WRONGTYPE")
        {
            (
                ErrorKind::WrongType,
                format!(
                    "a queue key holds a value of a foreign type ({detail}); nothing was written. \
                     Another program wrote to rmq's keys: check the key prefix"
                ),
            )
        } else if named == Some(ErrorKind::InvalidArgument) {
            (
                ErrorKind::InvalidArgument,
                format!("a script refused its arguments: {detail}; nothing was changed"),
            )
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
        {
            (
                ErrorKind::Connection,
                format!("Redis could not be reached or the connection dropped: {e}; the call can be retried"),
            )
        } else if e.code() == Some("OOM") {
            (
                ErrorKind::Redis,
                format!("Redis is out of memory and refused the write ({e}); nothing was written. Consume, or raise maxmemory"),
            )
        } else if e.code() == Some("NOPERM") {
            (
                ErrorKind::Redis,
                format!("the Redis user lacks a permission rmq needs ({e}); see `rmq acl`"),
            )
        } else {
            (
                ErrorKind::Redis,
                format!("Redis answered with an error: {e}"),
            )
        };
        Error {
            kind,
            message,
            retryable: kind == ErrorKind::Connection || redis_error_is_transient(&e),
            source: Some(Box::new(e)),
        }
    }
}

impl Error {
    /// The error code of the Redis reply this error came from (`CROSSSLOT`,
    /// `NOSCRIPT`, ...), None when it did not come from a reply.
    pub(crate) fn redis_code(&self) -> Option<&str> {
        self.source
            .as_ref()?
            .downcast_ref::<redis::RedisError>()?
            .code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}
