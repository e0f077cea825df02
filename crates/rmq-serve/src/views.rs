//! What the API (and the CLI) print of the library's answers: JSON views
//! in which every key, payload and error is text (bytes that are not UTF-8
//! are replaced, never passed on raw), with the field names the README
//! documents.

use rmq::Lookup;
use serde::Serialize;

/// Bytes as text: invalid UTF-8 is replaced, never passed on raw.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[derive(Serialize)]
pub struct ParkedJson {
    payload: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

#[derive(Serialize)]
pub struct DeadJson {
    payload: String,
    attempts: u32,
    error: String,
    dead_at_ms: i64,
    deaths: u32,
}

/// `rmq get --json`: one line.
#[derive(Serialize)]
pub struct LookupJson {
    key: String,
    state: &'static str,
    slot: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
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
            key: lossy(&l.key),
            state: l.state.name(),
            slot: l.slot,
            payload: l.payload.as_deref().map(lossy),
            attempts: l.attempts,
            priority: l.priority,
            due_ms: l.due_ms,
            next_attempt_ms: l.next_attempt_ms,
            lease_until_ms: l.lease_until_ms,
            fence: l.fence,
            error: l.error.clone(),
            cancelled: l.cancelled,
            parked: l.parked.as_ref().map(|p| ParkedJson {
                payload: lossy(&p.payload),
                priority: p.priority,
                due_ms: p.due_ms,
            }),
            dead: l.dead.as_ref().map(|d| DeadJson {
                payload: lossy(&d.payload),
                attempts: d.attempts,
                error: d.error.clone(),
                dead_at_ms: d.dead_at_ms,
                deaths: d.deaths,
            }),
            server_ms: l.server_ms,
        }
    }
}
