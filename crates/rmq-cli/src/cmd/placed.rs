//! Where a write left a message, in JSON: its priority or due time as
//! Redis now holds it, and the server's clock then (the same three fields
//! in `send`, `send --batch` and `dead requeue` output).

use serde::Serialize;

/// A message's place as stored, and the server's clock of the write.
#[derive(Serialize)]
pub(crate) struct PlaceJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
    server_ms: i64,
}

impl PlaceJson {
    pub(crate) fn of_sent(s: &rmq::Sent) -> PlaceJson {
        PlaceJson {
            priority: s.priority,
            due_ms: s.due_ms,
            server_ms: s.server_ms,
        }
    }

    pub(crate) fn of_letter(l: &rmq::RequeuedLetter) -> PlaceJson {
        PlaceJson {
            priority: l.priority,
            due_ms: l.due_ms,
            server_ms: l.server_ms,
        }
    }
}
