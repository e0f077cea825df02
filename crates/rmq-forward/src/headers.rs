//! The headers a forwarded message carries, the same for every broker, so
//! that the broker's consumers see what rmq knew: the topic, the merge key,
//! the slot, the attempt, the kind, the priority or due time, the serial
//! fence, and the stable id they can deduplicate on. The payload itself is
//! never touched.

use rmq::Received;

/// A header's value: text, or bytes for a merge key that is not UTF-8 text
/// a header can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Printable text.
    Text(String),
    /// A merge key that is not printable UTF-8 (brokers whose headers are
    /// text get it hex-encoded under `rmq-key-hex`).
    Bytes(Vec<u8>),
}

/// `rmq-id`: the message's stable id ([`Received::stable_id`]).
pub const ID: &str = "rmq-id";
/// `rmq-topic`.
pub const TOPIC: &str = "rmq-topic";
/// `rmq-key`: the merge key.
pub const KEY: &str = "rmq-key";
/// `rmq-slot`.
pub const SLOT: &str = "rmq-slot";
/// `rmq-attempt`: 1 for a first delivery.
pub const ATTEMPT: &str = "rmq-attempt";
/// `rmq-kind`: `priority`, `fixed-time` or `range-merge`.
pub const KIND: &str = "rmq-kind";
/// `rmq-priority` (priority topics).
pub const PRIORITY: &str = "rmq-priority";
/// `rmq-due-ms`: when it was due, Unix ms by the Redis clock (time kinds).
pub const DUE_MS: &str = "rmq-due-ms";
/// `rmq-fence`: the slot lease's epoch (serial mode).
pub const FENCE: &str = "rmq-fence";

/// The headers of `msg`, in a fixed order.
pub fn of(msg: &Received) -> Vec<(&'static str, HeaderValue)> {
    let text = |v: String| HeaderValue::Text(v);
    let key = match std::str::from_utf8(&msg.key) {
        Ok(k) if !k.chars().any(char::is_control) => text(k.to_owned()),
        _ => HeaderValue::Bytes(msg.key.clone()),
    };
    let mut out = vec![
        (ID, text(msg.stable_id())),
        (TOPIC, text(msg.topic.clone())),
        (KEY, key),
        (SLOT, text(msg.slot.to_string())),
        (ATTEMPT, text(msg.attempt.to_string())),
        (KIND, text(msg.kind.to_string())),
    ];
    if let Some(p) = msg.priority {
        out.push((PRIORITY, text(p.to_string())));
    }
    if let Some(d) = msg.due_ms {
        out.push((DUE_MS, text(d.to_string())));
    }
    if let Some(f) = msg.fence {
        out.push((FENCE, text(f.to_string())));
    }
    out
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
