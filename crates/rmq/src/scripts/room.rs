//! room.lua: a bounded topic's room (one count per topic, shared by all its
//! producers and consumers). A send reserves room for its messages first
//! and commits after it, giving back what it did not use; the settler and
//! the fetch loop give back one unit per message that ends; a cancel and a
//! requeue adjust it; defining, updating and deleting a topic set or drop
//! it; a recount counts the topic's messages again.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// `room.lua`'s KEYS.
pub(crate) const KEYS: [&str; 2] = ["room", "reservations"];
/// `room.lua`'s ARGV.
pub(crate) const ARGV: [&str; 4] = ["op", "n", "m", "token"];

/// A topic's two room keys.
pub(crate) type RoomKeys = [String; KEYS.len()];

fn call(keys: &RoomKeys, op: &str, n: u64, m: u64, token: &str) -> (ScriptId, Cmd) {
    let (n, m) = (n.to_string(), m.to_string());
    let args: [&[u8]; ARGV.len()] = [op.as_bytes(), n.as_bytes(), m.as_bytes(), token.as_bytes()];
    (ScriptId::Room, super::call(ScriptId::Room, keys, &args))
}

/// Reserves room for up to `n` new messages under `token`, for `lease_ms`
/// at most (a dead process's reservation runs out).
pub(crate) fn reserve(keys: &RoomKeys, n: u64, token: &str, lease_ms: u64) -> (ScriptId, Cmd) {
    call(keys, "reserve", n, lease_ms, token)
}

/// Ends the send that reserved `reserved` units under `token`, `unused` of
/// which it did not use.
pub(crate) fn commit(keys: &RoomKeys, reserved: u64, unused: u64, token: &str) -> (ScriptId, Cmd) {
    call(keys, "commit", reserved, unused, token)
}

/// Gives back `n` units held by messages that ended.
pub(crate) fn give(keys: &RoomKeys, n: u64) -> (ScriptId, Cmd) {
    call(keys, "give", n, 0, "")
}

/// Counts `n` more messages without asking (requeued dead letters).
pub(crate) fn add(keys: &RoomKeys, n: u64) -> (ScriptId, Cmd) {
    call(keys, "add", n, 0, "")
}

/// Sets the limit (0: not bounded); a topic not bounded until now starts
/// from `held`, one bounded until now keeps its count.
pub(crate) fn set(keys: &RoomKeys, limit: u64, held: u64) -> (ScriptId, Cmd) {
    call(keys, "set", limit, held, "")
}

/// Counts again: `held` messages, plus the room of sends between their
/// reserve and their commit, plus what sends used since `count` answered
/// `used_before`.
pub(crate) fn recount(keys: &RoomKeys, held: u64, used_before: u64) -> (ScriptId, Cmd) {
    call(keys, "recount", used_before, held, "")
}

/// Deletes the count and the reservations.
pub(crate) fn drop_room(keys: &RoomKeys) -> (ScriptId, Cmd) {
    call(keys, "drop", 0, 0, "")
}

/// Messages held, the limit and the running total of room used.
pub(crate) fn count(keys: &RoomKeys) -> (ScriptId, Cmd) {
    call(keys, "count", 0, 0, "")
}

/// A count's third item: the running total of room sends used.
pub(crate) fn used(reply: &Value) -> u64 {
    match reply {
        Value::Array(a) => int_at(a, 2)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// `{ a, b }`: granted and limit for a reserve, held and limit otherwise.
/// A reply of another shape reads as nothing granted (never more than the
/// bound).
pub(crate) fn pair(reply: Value) -> (u64, u64) {
    let a = items(reply);
    match (int_at(&a, 0), int_at(&a, 1)) {
        (Some(x), Some(y)) => (u64::try_from(x).unwrap_or(0), u64::try_from(y).unwrap_or(0)),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn arguments_follow_the_scripts_header() {
        assert_eq!(header_argv(ScriptId::Room), ARGV);
        assert_eq!(header_keys(ScriptId::Room), KEYS);
    }

    #[test]
    fn replies_are_read_by_the_headers_layout() {
        assert_eq!(
            pair(Value::Array(vec![Value::Int(3), Value::Int(10)])),
            (3, 10)
        );
        assert_eq!(pair(Value::Nil), (0, 0));
        let count = Value::Array(vec![Value::Int(3), Value::Int(10), Value::Int(7)]);
        assert_eq!(used(&count), 7);
    }
}
