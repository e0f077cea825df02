//! `heads.lua`'s calls and reply, typed: reading, marking and dropping a
//! topic's head index (a single node only; `lua/notify.lua` describes it).

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{as_int, as_score, items};

/// The script's KEYS, by the names its header gives them.
pub(crate) const KEYS: [&str; 2] = ["index", "marks"];
/// The script's ARGV, by the names its header gives them.
pub(crate) const ARGV: [&str; 2] = ["op", "limit"];

/// The topic's head index and marks (`keys::head_index`, `keys::marks`).
fn heads(prefix: &str, topic: &str, op: &str, limit: usize) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [
        crate::keys::head_index(prefix, topic),
        crate::keys::marks(prefix, topic),
    ];
    let limit = limit.to_string();
    let args: [&[u8]; ARGV.len()] = [op.as_bytes(), limit.as_bytes()];
    // A single node's keys only (no hash tag): never sent to a cluster.
    (
        ScriptId::Heads,
        super::call_on_one_node(ScriptId::Heads, &keys, &args),
    )
}

/// Reads the `limit` smallest entries of the index.
pub(crate) fn read(prefix: &str, topic: &str, limit: usize) -> (ScriptId, Cmd) {
    heads(prefix, topic, "read", limit)
}

/// Notes the index complete: every slot with work has an entry.
pub(crate) fn mark(prefix: &str, topic: &str) -> (ScriptId, Cmd) {
    heads(prefix, topic, "mark", 1)
}

/// Deletes the index and the marks (their topic is being deleted).
pub(crate) fn drop_index(prefix: &str, topic: &str) -> (ScriptId, Cmd) {
    heads(prefix, topic, "drop", 1)
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heads {
    /// The index is marked complete: a slot without an entry holds nothing.
    pub(crate) complete: bool,
    /// Entries were left out (the limit): all of them sort after these.
    pub(crate) more: bool,
    /// (slot, value), smallest value first: for a priority topic minus the
    /// best pending score (<= 0) or a time, else a time in ms.
    pub(crate) entries: Vec<(u32, i64)>,
}

impl Heads {
    /// None for a reply of another shape (an entry that does not parse is
    /// skipped: the slot is then looked at by other means).
    pub(crate) fn parse(reply: Value) -> Option<Heads> {
        let a = items(reply);
        let complete = as_int(a.first()?)? == 1;
        let more = as_int(a.get(1)?)? == 1;
        let entries = a[2..]
            .chunks(2)
            .filter_map(|pair| {
                let slot = u32::try_from(as_int(pair.first()?)?).ok()?;
                Some((slot, as_score(pair.get(1)?)?))
            })
            .collect();
        Some(Heads {
            complete,
            more,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn the_request_follows_the_lua_header() {
        assert_eq!(header_keys(ScriptId::Heads), KEYS);
        assert_eq!(header_argv(ScriptId::Heads), ARGV);
    }

    #[test]
    fn a_read_decodes_slots_and_values() {
        let s = |x: &str| Value::BulkString(x.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(0),
            s("3"),
            s("-8589934592"),
            s("7"),
            s("1.7e+12"),
            s("x"),
            s("1"),
        ]);
        let h = Heads::parse(reply).unwrap();
        assert!(h.complete && !h.more);
        assert_eq!(h.entries, vec![(3, -8_589_934_592), (7, 1_700_000_000_000)]);
        assert_eq!(Heads::parse(Value::Nil), None);
    }
}
