//! room.lua: a bounded topic's room (one count per topic, shared by all its
//! producers and consumers). A send reserves room for its messages first
//! and gives back what it did not use; the settler and the fetch loop give
//! back one unit per message that ends; a cancel and a requeue adjust it;
//! defining, updating and deleting a topic set or drop it.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// `room.lua`'s KEYS.
pub(crate) const KEYS: [&str; 1] = ["room"];
/// `room.lua`'s ARGV.
pub(crate) const ARGV: [&str; 3] = ["op", "n", "live"];

fn call(key: &str, op: &str, n: u64, live: u64) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [key.to_string()];
    let (n, live) = (n.to_string(), live.to_string());
    let args: [&[u8]; ARGV.len()] = [op.as_bytes(), n.as_bytes(), live.as_bytes()];
    (ScriptId::Room, super::call(ScriptId::Room, &keys, &args))
}

/// Reserves room for up to `n` new messages.
pub(crate) fn reserve(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "reserve", n, 0)
}

/// Gives back `n` units: reserved and not used, or held by messages that ended.
pub(crate) fn give(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "give", n, 0)
}

/// Counts `n` more messages without asking (requeued dead letters).
pub(crate) fn add(key: &str, n: u64) -> (ScriptId, Cmd) {
    call(key, "add", n, 0)
}

/// Sets the limit (0: not bounded) with `live` messages held now; a limit
/// equal to the one set keeps the count.
pub(crate) fn set(key: &str, limit: u64, live: u64) -> (ScriptId, Cmd) {
    call(key, "set", limit, live)
}

/// Deletes the count.
pub(crate) fn drop_room(key: &str) -> (ScriptId, Cmd) {
    call(key, "drop", 0, 0)
}

/// Messages held and the limit.
pub(crate) fn count(key: &str) -> (ScriptId, Cmd) {
    call(key, "count", 0, 0)
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
