//! `membership.lua`'s call and reply, typed: a consumer group's heartbeat
//! (serial mode), which also answers with the group's live members.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{bytes_at, items};

/// The script's KEYS, by the names its header gives them.
pub(crate) const KEYS: [&str; 1] = ["group"];
/// The script's ARGV, by the names its header gives them.
pub(crate) const ARGV: [&str; 3] = ["member", "op", "timeout_ms"];

/// membership.lua: `member` beats (or, `leaving`, leaves) `group`.
pub(crate) fn heartbeat(
    group: &str,
    member: &str,
    leaving: bool,
    timeout_ms: &str,
) -> (ScriptId, Cmd) {
    let op: &[u8] = if leaving { b"leave" } else { b"beat" };
    call(group, member, op, timeout_ms)
}

/// membership.lua: deletes the whole group (its topic is being deleted).
pub(crate) fn drop_group(group: &str) -> (ScriptId, Cmd) {
    call(group, "", b"drop", "0")
}

fn call(group: &str, member: &str, op: &[u8], timeout_ms: &str) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [group.to_string()];
    let args: [&[u8]; ARGV.len()] = [member.as_bytes(), op, timeout_ms.as_bytes()];
    (
        ScriptId::Membership,
        super::call(ScriptId::Membership, &keys, &args),
    )
}

/// The live member ids of a reply `{ now, member ids... }`.
pub(crate) fn members(reply: Value) -> Vec<String> {
    let a = items(reply);
    (1..a.len())
        .filter_map(|i| bytes_at(&a, i))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn the_membership_request_follows_the_lua_header() {
        assert_eq!(header_keys(ScriptId::Membership), KEYS);
        assert_eq!(header_argv(ScriptId::Membership), ARGV);
    }
}
