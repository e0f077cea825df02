//! What the API (and the CLI) print of the library's answers: JSON views
//! with the field names the README documents. A key or payload that is
//! valid UTF-8 is a JSON string (`key`, `payload`); one that is not comes
//! as standard padded base64 instead (`key_base64`, `payload_base64`), so
//! that it round-trips: exactly one of each pair is present. Errors are
//! text.

use base64::Engine;
use rmq::Lookup;
use serde::Serialize;

/// Bytes as text: invalid UTF-8 is replaced, never passed on raw.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A merge key: `key` when it is UTF-8, else `key_base64`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct KeyField {
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_base64: Option<String>,
}

impl KeyField {
    pub fn of(b: &[u8]) -> KeyField {
        let (key, key_base64) = text_or_base64(b);
        KeyField { key, key_base64 }
    }
}

/// A payload: `payload` when it is UTF-8, else `payload_base64`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PayloadField {
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
}

impl PayloadField {
    pub fn of(b: &[u8]) -> PayloadField {
        let (payload, payload_base64) = text_or_base64(b);
        PayloadField {
            payload,
            payload_base64,
        }
    }
}

/// `fields` (a JSON object) with the key added by the rule above.
pub fn with_key(fields: serde_json::Value, key: &[u8]) -> serde_json::Value {
    merged(fields, serde_json::to_value(KeyField::of(key)))
}

/// `fields` (a JSON object) with the key and payload added by the rule
/// above.
pub fn with_key_and_payload(
    fields: serde_json::Value,
    key: &[u8],
    payload: &[u8],
) -> serde_json::Value {
    merged(
        with_key(fields, key),
        serde_json::to_value(PayloadField::of(payload)),
    )
}

fn merged(
    mut into: serde_json::Value,
    part: serde_json::Result<serde_json::Value>,
) -> serde_json::Value {
    if let (Some(o), Ok(serde_json::Value::Object(p))) = (into.as_object_mut(), part) {
        o.extend(p);
    }
    into
}

#[derive(Serialize)]
pub struct ParkedJson {
    #[serde(flatten)]
    payload: PayloadField,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

#[derive(Serialize)]
pub struct DeadJson {
    #[serde(flatten)]
    payload: PayloadField,
    attempts: u32,
    error: String,
    dead_at_ms: i64,
    deaths: u32,
}

/// `rmq get --json`: one line.
#[derive(Serialize)]
pub struct LookupJson {
    #[serde(flatten)]
    key: KeyField,
    state: &'static str,
    slot: u32,
    #[serde(flatten)]
    payload: Option<PayloadField>,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    parked: Option<ParkedJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead: Option<DeadJson>,
    server_ms: i64,
}

impl LookupJson {
    pub fn of(l: &Lookup) -> LookupJson {
        LookupJson {
            key: KeyField::of(&l.key),
            state: l.state.name(),
            slot: l.slot,
            payload: l.payload.as_deref().map(PayloadField::of),
            attempts: l.attempts,
            priority: l.priority,
            due_ms: l.due_ms,
            next_attempt_ms: l.next_attempt_ms,
            lease_until_ms: l.lease_until_ms,
            fence: l.fence,
            error: l.error.clone(),
            cancelled: l.cancelled,
            parked: l.parked.as_ref().map(|p| ParkedJson {
                payload: PayloadField::of(&p.payload),
                priority: p.priority,
                due_ms: p.due_ms,
            }),
            dead: l.dead.as_ref().map(|d| DeadJson {
                payload: PayloadField::of(&d.payload),
                attempts: d.attempts,
                error: d.error.clone(),
                dead_at_ms: d.dead_at_ms,
                deaths: d.deaths,
            }),
            server_ms: l.server_ms,
        }
    }
}

/// One delivery taken. A key or payload that is valid UTF-8 comes as a
/// JSON string (`key`, `payload`); otherwise as base64 (`key_base64`,
/// `payload_base64`): exactly one of each pair is present.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DeliveryJson {
    /// Settles this delivery (opaque).
    receipt: String,
    #[serde(flatten)]
    key: KeyField,
    #[serde(flatten)]
    payload: PayloadField,
    /// 1 for the first delivery of the message.
    attempt: u32,
    slot: u32,
    /// Priority topics: its priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    /// Time-based topics: when it was due (Unix ms, server clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
    /// When it was taken (Unix ms, server clock).
    taken_ms: i64,
    /// Serial mode: the slot lease's epoch (fencing token) it was taken
    /// under; it only grows. Pass it to downstream writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u64>,
    /// When its lease runs out (Unix ms, server clock).
    lease_until_ms: i64,
    /// The same for every delivery of one message: for deduplication.
    message_id: String,
}

/// Text when it is UTF-8, else base64 (standard alphabet, padded).
pub fn text_or_base64(b: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(b) {
        Ok(s) => (Some(s.to_string()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(b)),
        ),
    }
}

impl DeliveryJson {
    /// Its receipt.
    pub fn receipt(&self) -> &str {
        &self.receipt
    }

    /// The delivery as a client sees it, handed on as a receipt sealed with
    /// `key` (taken with leases of `lease_ms`).
    pub fn of(topic: &str, key: &rmq::ReceiptKey, d: rmq::Delivery, lease_ms: u64) -> DeliveryJson {
        let (key_field, payload) = (KeyField::of(&d.key), PayloadField::of(&d.payload));
        let lease = i64::try_from(lease_ms).unwrap_or(i64::MAX);
        let (attempt, slot, priority, due_ms, taken_ms, fence) =
            (d.attempt, d.slot, d.priority, d.due_ms, d.taken_ms, d.fence);
        let message_id = d.stable_id();
        DeliveryJson {
            receipt: key.seal(topic, &d.into_receipt()),
            key: key_field,
            payload,
            attempt,
            slot,
            priority,
            due_ms,
            taken_ms,
            fence,
            lease_until_ms: taken_ms.saturating_add(lease),
            message_id,
        }
    }
}
