//! The control scripts' calls and replies, typed: `get.lua` (look a key
//! up), `cancel.lua`, `reschedule.lua` and `pause.lua`, each on one slot.
//! `crate::control` turns them into the public API.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{as_int, bytes_at, int_at, items};

/// `get.lua`'s ARGV.
pub(crate) const GET_ARGV: [&str; 2] = ["kind", "key"];
/// `cancel.lua`'s fixed ARGV (the keys follow).
pub(crate) const CANCEL_ARGV: [&str; 1] = ["kind"];
/// `reschedule.lua`'s ARGV.
pub(crate) const RESCHEDULE_ARGV: [&str; 6] =
    ["kind", "channel", "slot", "key", "spec", "tolerance_ms"];
/// `pause.lua`'s ARGV.
pub(crate) const PAUSE_ARGV: [&str; 4] = ["op", "kind", "channel", "slot"];

/// get.lua on one slot.
pub(crate) fn get(keys: &[String], kind: &str, key: &[u8]) -> (ScriptId, Cmd) {
    let args: [&[u8]; GET_ARGV.len()] = [kind.as_bytes(), key];
    (ScriptId::Get, super::call(ScriptId::Get, keys, &args))
}

/// Where get.lua found a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Where {
    Pending,
    Retry,
    Flight,
    Absent,
}

/// A key's dead letter, as get.lua reports it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DeadPart {
    pub(crate) attempts: u32,
    pub(crate) dead_ms: i64,
    pub(crate) deaths: u32,
    pub(crate) error: String,
    pub(crate) payload: Vec<u8>,
}

/// What get.lua answered (see its header for each field).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GetReply {
    pub(crate) now: i64,
    pub(crate) state: Where,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) attempts: u32,
    pub(crate) score: Option<i64>,
    pub(crate) next_ms: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) token: Option<u64>,
    pub(crate) epoch: Option<u64>,
    pub(crate) cancelled: bool,
    /// A duplicate parked behind the delivery: (score, payload).
    pub(crate) parked: Option<(i64, Vec<u8>)>,
    pub(crate) dead: Option<DeadPart>,
}

fn text_at(a: &[Value], i: usize) -> Option<String> {
    bytes_at(a, i).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn u32_at(a: &[Value], i: usize) -> Option<u32> {
    int_at(a, i).and_then(|n| u32::try_from(n).ok())
}

impl GetReply {
    /// None for a reply of another shape.
    pub(crate) fn parse(reply: Value) -> Option<GetReply> {
        let a = items(reply);
        let state = match bytes_at(&a, 1)?.as_slice() {
            b"pending" => Where::Pending,
            b"retry" => Where::Retry,
            b"flight" => Where::Flight,
            b"absent" => Where::Absent,
            _ => return None,
        };
        let parked = match (int_at(&a, 10), bytes_at(&a, 11)) {
            (Some(s), Some(p)) => Some((s, p)),
            _ => None,
        };
        let dead = (a.len() >= 17).then(|| DeadPart {
            attempts: u32_at(&a, 12).unwrap_or(0),
            dead_ms: int_at(&a, 13).unwrap_or(0),
            deaths: u32_at(&a, 14).unwrap_or(1),
            error: text_at(&a, 15).unwrap_or_default(),
            payload: bytes_at(&a, 16).unwrap_or_default(),
        });
        Some(GetReply {
            now: int_at(&a, 0)?,
            state,
            payload: bytes_at(&a, 2),
            attempts: u32_at(&a, 3).unwrap_or(0),
            score: int_at(&a, 4),
            next_ms: int_at(&a, 5),
            error: text_at(&a, 6),
            token: int_at(&a, 7).and_then(|n| u64::try_from(n).ok()),
            epoch: int_at(&a, 8).and_then(|n| u64::try_from(n).ok()),
            cancelled: int_at(&a, 9) == Some(1),
            parked,
            dead,
        })
    }
}

/// cancel.lua on one slot, for these merge keys.
pub(crate) fn cancel(keys: &[String], kind: &str, merge_keys: &[&[u8]]) -> (ScriptId, Cmd) {
    let mut args: Vec<&[u8]> = Vec::with_capacity(CANCEL_ARGV.len() + merge_keys.len());
    args.push(kind.as_bytes());
    args.extend_from_slice(merge_keys);
    (ScriptId::Cancel, super::call(ScriptId::Cancel, keys, &args))
}

/// cancel.lua's code per key, in order (`codes::cancelled` decodes one; a
/// key the reply does not cover reads as None), and how many messages it
/// removed (the reply's last item).
pub(crate) fn cancel_codes(reply: Value, count: usize) -> (Vec<Option<i64>>, u64) {
    let a = items(reply);
    let removed = int_at(&a, count + 1)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0);
    ((0..count).map(|i| int_at(&a, i + 1)).collect(), removed)
}

/// One call of reschedule.lua.
pub(crate) struct RescheduleRequest<'a> {
    pub(crate) keys: &'a [String],
    pub(crate) kind: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) slot: &'a str,
    pub(crate) key: &'a [u8],
    /// The new priority, due time (unix ms) or `+<delay ms>`.
    pub(crate) spec: &'a str,
    pub(crate) tolerance_ms: &'a str,
}

impl RescheduleRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        // In the order of `RESCHEDULE_ARGV` (a test holds it to the header).
        let args: [&[u8]; RESCHEDULE_ARGV.len()] = [
            self.kind.as_bytes(),
            self.channel.as_bytes(),
            self.slot.as_bytes(),
            self.key,
            self.spec.as_bytes(),
            self.tolerance_ms.as_bytes(),
        ];
        (
            ScriptId::Reschedule,
            super::call(ScriptId::Reschedule, self.keys, &args),
        )
    }
}

/// reschedule.lua's reply: (now, code, new score).
pub(crate) fn rescheduled(reply: Value) -> (i64, Option<i64>, Option<i64>) {
    let a = items(reply);
    (int_at(&a, 0).unwrap_or(0), int_at(&a, 1), int_at(&a, 2))
}

/// pause.lua on one slot: pause (`true`) or resume it.
pub(crate) fn pause(
    keys: &[String],
    pause: bool,
    kind: &str,
    channel: &str,
    slot: &str,
) -> (ScriptId, Cmd) {
    let op: &[u8] = if pause { b"pause" } else { b"resume" };
    let args: [&[u8]; PAUSE_ARGV.len()] =
        [op, kind.as_bytes(), channel.as_bytes(), slot.as_bytes()];
    (ScriptId::Pause, super::call(ScriptId::Pause, keys, &args))
}

/// pause.lua's reply: (server time, whether the slot was paused before).
pub(crate) fn paused_before(reply: &Value) -> (i64, bool) {
    match reply {
        Value::Array(a) => (
            int_at(a, 0).unwrap_or(0),
            a.get(1).and_then(as_int) == Some(1),
        ),
        _ => (0, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::header_argv;

    #[test]
    fn the_control_requests_follow_the_lua_headers() {
        assert_eq!(header_argv(ScriptId::Get), GET_ARGV);
        assert_eq!(header_argv(ScriptId::Cancel), CANCEL_ARGV);
        let (_, body) = ScriptId::Cancel.source();
        assert!(body.contains(&format!("ARGV[{}..] keys", CANCEL_ARGV.len() + 1)));
        assert_eq!(header_argv(ScriptId::Reschedule), RESCHEDULE_ARGV);
        assert_eq!(header_argv(ScriptId::Pause), PAUSE_ARGV);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_get_reply_reads_by_the_headers_layout() {
        let mut a = vec![
            Value::Int(100),
            bulk("flight"),
            bulk("pay"),
            Value::Int(2),
            Value::Int(7),
            Value::Int(130),
            Value::Nil,
            Value::Int(9),
            Value::Nil,
            Value::Int(1),
            Value::Int(8),
            bulk("next"),
        ];
        let r = GetReply::parse(Value::Array(a.clone())).unwrap();
        assert_eq!(r.state, Where::Flight);
        assert_eq!((r.attempts, r.next_ms, r.token), (2, Some(130), Some(9)));
        assert!(r.cancelled);
        assert_eq!(r.parked, Some((8, b"next".to_vec())));
        assert_eq!(r.dead, None);
        a.extend([
            Value::Int(3),
            Value::Int(50),
            Value::Int(1),
            bulk("boom"),
            bulk("old"),
        ]);
        let r = GetReply::parse(Value::Array(a)).unwrap();
        assert_eq!(r.dead.unwrap().error, "boom");
        assert_eq!(GetReply::parse(Value::Nil), None);
        let odd = Value::Array(vec![Value::Int(1), bulk("elsewhere")]);
        assert_eq!(GetReply::parse(odd), None);
    }
}
