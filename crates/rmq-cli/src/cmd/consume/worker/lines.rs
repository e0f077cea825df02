//! The `--worker` protocol: one JSON line per delivery on the worker's
//! stdin, one JSON line per result on its stdout.
//!
//! A delivery: `{"id", "topic", "key" | "key_base64", "payload" |
//! "payload_base64", "attempt", "slot", "taken_ms", "fence"?,
//! "priority"?, "due_ms"?}`. A key or payload that is valid UTF-8 comes as
//! a JSON string, any other as base64 (standard alphabet, padded) under
//! the `_base64` name. A result: `{"id", "outcome": "ack" | "retry" |
//! "dead", "error"?, "retry_after_ms"?}`, the `id` as it was given.
//! Blank lines are skipped; any other line that is not a result is a
//! protocol error (the worker is restarted: write logs to stderr).

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::cmd::consume::verdict::{delay_ms, Verdict};

/// What a worker is handed.
#[derive(Serialize)]
struct DeliveryLine<'a> {
    id: &'a str,
    topic: &'a str,
    #[serde(flatten)]
    key: Text<'a>,
    #[serde(flatten)]
    payload: Text<'a>,
    attempt: u32,
    slot: u32,
    taken_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_ms: Option<i64>,
}

/// Bytes as a JSON string when they are UTF-8, else as base64, under
/// `name` or `name_base64`.
struct Text<'a> {
    name: &'static str,
    bytes: &'a [u8],
}

impl Serialize for Text<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        match std::str::from_utf8(self.bytes) {
            Ok(text) => map.serialize_entry(self.name, text)?,
            Err(_) => map.serialize_entry(
                &format!("{}_base64", self.name),
                &base64::engine::general_purpose::STANDARD.encode(self.bytes),
            )?,
        }
        map.end()
    }
}

/// The line handing `m` to a worker as `id`, newline included.
pub(super) fn delivery(id: &str, m: &rmq::Received) -> Vec<u8> {
    let line = DeliveryLine {
        id,
        topic: &m.topic,
        key: Text {
            name: "key",
            bytes: &m.key,
        },
        payload: Text {
            name: "payload",
            bytes: &m.payload,
        },
        attempt: m.attempt,
        slot: m.slot,
        taken_ms: m.taken_ms,
        fence: m.fence,
        priority: m.priority,
        due_ms: m.due_ms,
    };
    encode(&line)
}

fn encode(line: &DeliveryLine<'_>) -> Vec<u8> {
    let mut out = serde_json::to_vec(line).unwrap_or_default();
    out.push(b'\n');
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultLine {
    id: String,
    outcome: Outcome,
    error: Option<String>,
    retry_after_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Ack,
    Retry,
    Dead,
}

/// A result line read: the delivery's id and its verdict; `Ok(None)` for
/// a blank line; an error says what is wrong with the line.
pub(super) fn result(line: &[u8]) -> Result<Option<(String, Verdict)>, String> {
    let text = String::from_utf8_lossy(line);
    if text.trim().is_empty() {
        return Ok(None);
    }
    let r: ResultLine = serde_json::from_str(text.trim()).map_err(|e| {
        let shown: String = text.trim().chars().take(200).collect();
        format!("{e} in {shown:?}")
    })?;
    let error = r.error.unwrap_or_else(|| "failed".into());
    let verdict = match r.outcome {
        Outcome::Ack => Verdict::Ack,
        Outcome::Retry => Verdict::Retry {
            after: r.retry_after_ms.map(delay_ms),
            error,
        },
        Outcome::Dead => Verdict::Dead { error },
    };
    Ok(Some((r.id, verdict)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn encoded(key: &[u8], payload: &[u8]) -> Vec<u8> {
        encode(&DeliveryLine {
            id: "1",
            topic: "t",
            key: Text {
                name: "key",
                bytes: key,
            },
            payload: Text {
                name: "payload",
                bytes: payload,
            },
            attempt: 2,
            slot: 3,
            taken_ms: 4,
            fence: None,
            priority: Some(7),
            due_ms: None,
        })
    }

    #[test]
    fn text_goes_as_strings_and_other_bytes_as_base64() {
        let line = encoded(b"k1", b"{\"a\":1}");
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["key"], "k1");
        assert_eq!(v["payload"], "{\"a\":1}");
        assert_eq!(
            (v["attempt"].as_u64(), v["priority"].as_u64()),
            (Some(2), Some(7))
        );
        assert!(v.get("fence").is_none() && v.get("due_ms").is_none());
        assert_eq!(line.last(), Some(&b'\n'));
        let line = encoded(&[0xff, 0], &[0x80, 1, 2]);
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["key_base64"], "/wA=");
        assert_eq!(v["payload_base64"], "gAEC");
        assert!(v.get("key").is_none() && v.get("payload").is_none());
    }

    #[test]
    fn results_are_read_strictly() {
        assert_eq!(
            result(br#"{"id":"4","outcome":"ack"}"#).unwrap(),
            Some(("4".into(), Verdict::Ack))
        );
        assert_eq!(
            result(br#"{"id":"5","outcome":"retry","error":"busy","retry_after_ms":250}"#).unwrap(),
            Some((
                "5".into(),
                Verdict::Retry {
                    after: Some(Duration::from_millis(250)),
                    error: "busy".into()
                }
            ))
        );
        assert_eq!(
            result(br#"{"id":"6","outcome":"dead"}"#).unwrap(),
            Some((
                "6".into(),
                Verdict::Dead {
                    error: "failed".into()
                }
            ))
        );
        assert_eq!(result(b"  \n").unwrap(), None);
        for bad in [
            &b"hello"[..],
            br#"{"id":"1"}"#,
            br#"{"id":"1","outcome":"maybe"}"#,
            br#"{"id":1,"outcome":"ack"}"#,
            br#"{"id":"1","outcome":"ack","extra":true}"#,
        ] {
            assert!(result(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
