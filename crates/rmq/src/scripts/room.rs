//! room.lua: a bounded topic's room (one count per topic, shared by all its
//! producers and consumers). A send reserves room for its messages first
//! and commits after it, giving back what it did not use; the settler and the fetch loop give
//! back one unit per message that ends; a cancel and a requeue adjust it;
//! defining, updating and deleting a topic set or drop it.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// `room.lua`'s KEYS.
pub(crate) const KEYS: [&str; 1] = ["room"];
/// `room.lua`'s ARGV.
pub(crate) const ARGV: [&str; 3] = ["op", "n", "m"];

fn call(key: &str, op: &str, n: u64, m: u64) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [key.to_string()];
    let (n, m) = (n.to_string(), m.to_string());
    let args: [&[u8]; ARGV.len()] = [op.as_bytes(), n.as_bytes(), m.as_bytes()];
    (ScriptId::Room, super::call(ScriptId::Room, &keys, &args))
}

/// Reserves room for up to `n` new messages.
pub(crate) fn reserve(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "reserve", n, 0)
}

/// Ends a send that reserved `reserved` units, `unused` of which it did
/// not use.
pub(crate) fn commit(key: &str, reserved: u64, unused: u64) -> (ScriptId, Cmd) {
    call(key, "commit", reserved, unused)
}

/// Gives back `n` units held by messages that ended.
pub(crate) fn give(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "give", n, 0)
}

/// Counts `n` more messages without asking (requeued dead letters).
pub(crate) fn add(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "add", n, 0)
}

/// Sets the limit (0: not bounded); a topic not bounded until now starts
/// from `held`, one bounded until now keeps its count.
pub(crate) fn set(key: &str, limit: u64, held: u64) -> (ScriptId, Cmd) {
    call(key, "set", limit, held)
}

/// Counts again: `held` messages, plus what sends have reserved now, plus
/// what they used since `count` answered `used_before`.
pub(crate) fn recount(key: &str, held: u64, used_before: u64) -> (ScriptId, Cmd) {
    call(key, "recount", used_before, held)
}

/// Deletes the count.
pub(crate) fn drop_room(key: &str) -> (ScriptId, Cmd) {
    call(key, "drop", 0, 0)
}

/// Messages held and the limit.
pub(crate) fn count(key: &str) -> (ScriptId, Cmd) {
    call(key, "count", 0, 0)
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
    }
}
