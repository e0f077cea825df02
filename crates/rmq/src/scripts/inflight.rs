//! inflight.lua: a topic's global in-flight cap (one permit set per topic,
//! shared by all its consumers). The fetch loop takes a permit per delivery
//! before a pop round; the settler frees them once the deliveries' ends are
//! recorded; a delivery's lease extension extends its permit; defining,
//! updating and deleting a topic set or drop the cap.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// `inflight.lua`'s KEYS.
pub(crate) const KEYS: [&str; 2] = ["cap", "permits"];
/// `inflight.lua`'s fixed ARGV (the permit tokens follow them).
pub(crate) const ARGV: [&str; 3] = ["op", "n", "channel"];

/// A topic's two cap keys.
pub(crate) type CapKeys = [String; KEYS.len()];

fn call<T: AsRef<[u8]>>(
    keys: &CapKeys,
    op: &str,
    n: u64,
    channel: &str,
    tokens: &[T],
) -> (ScriptId, Cmd) {
    let n = n.to_string();
    let mut args: Vec<&[u8]> = Vec::with_capacity(ARGV.len() + tokens.len());
    args.extend([op.as_bytes(), n.as_bytes(), channel.as_bytes()]);
    args.extend(tokens.iter().map(AsRef::as_ref));
    (
        ScriptId::InFlight,
        super::call(ScriptId::InFlight, keys, &args),
    )
}

/// Asks for one permit per token, each held `lease_ms` unless extended.
pub(crate) fn take<T: AsRef<[u8]>>(keys: &CapKeys, lease_ms: u64, tokens: &[T]) -> (ScriptId, Cmd) {
    call(keys, "take", lease_ms, "", tokens)
}

/// Frees the permits; refused consumers hear "room" on `channel`.
pub(crate) fn free<T: AsRef<[u8]>>(keys: &CapKeys, channel: &str, tokens: &[T]) -> (ScriptId, Cmd) {
    call(keys, "free", 0, channel, tokens)
}

/// Extends the permits still held to `lease_ms` from now.
pub(crate) fn extend<T: AsRef<[u8]>>(
    keys: &CapKeys,
    lease_ms: u64,
    tokens: &[T],
) -> (ScriptId, Cmd) {
    call(keys, "extend", lease_ms, "", tokens)
}

/// Sets the cap (0: none).
pub(crate) fn set(keys: &CapKeys, limit: u32) -> (ScriptId, Cmd) {
    call::<&str>(keys, "set", u64::from(limit), "", &[])
}

/// Deletes the cap and its permits.
pub(crate) fn drop_cap(keys: &CapKeys) -> (ScriptId, Cmd) {
    call::<&str>(keys, "drop", 0, "", &[])
}

/// Permits held now and the cap.
pub(crate) fn count(keys: &CapKeys) -> (ScriptId, Cmd) {
    call::<&str>(keys, "count", 0, "", &[])
}

/// The two numbers every reply carries: `{ a, b }` (granted and wait for a
/// take, held and limit for a count). A reply of another shape reads as
/// nothing granted, wait a second (never more than the cap).
pub(crate) fn pair(reply: Value) -> (u64, u64) {
    let a = items(reply);
    match (int_at(&a, 0), int_at(&a, 1)) {
        (Some(x), Some(y)) => (
            u64::try_from(x).unwrap_or(0),
            u64::try_from(y).unwrap_or(1_000),
        ),
        _ => (0, 1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn arguments_follow_the_scripts_header() {
        assert_eq!(header_argv(ScriptId::InFlight), ARGV);
        assert_eq!(header_keys(ScriptId::InFlight), KEYS);
    }

    #[test]
    fn replies_are_read_by_the_headers_layout() {
        let r = Value::Array(vec![Value::Int(3), Value::Int(0)]);
        assert_eq!(pair(r), (3, 0));
        assert_eq!(pair(Value::Nil), (0, 1_000));
    }
}
