//! `define_topic.lua`'s call and reply, typed: the topic registry's one
//! write (a definition is stored once; later ones must match).

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{bytes_at, int_at, items};

/// The script's KEYS, by the names its header gives them.
pub(crate) const KEYS: [&str; 1] = ["index"];
/// The script's ARGV, by the names its header gives them.
pub(crate) const ARGV: [&str; 2] = ["name", "definition"];

/// define_topic.lua: store `definition` (canonical JSON) under `name` in
/// the prefix's topic `index`, unless one is there.
pub(crate) fn define(index: &str, name: &str, definition: &str) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [index.to_string()];
    let args: [&[u8]; ARGV.len()] = [name.as_bytes(), definition.as_bytes()];
    (
        ScriptId::DefineTopic,
        super::call(ScriptId::DefineTopic, &keys, &args),
    )
}

/// `replace_topic.lua`'s ARGV.
pub(crate) const REPLACE_ARGV: [&str; 3] = ["name", "old", "new"];

/// replace_topic.lua: store `new` under `name` (remove it when `new` is
/// empty), if `old` is still stored.
pub(crate) fn replace(index: &str, name: &str, old: &str, new: &str) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [index.to_string()];
    let args: [&[u8]; REPLACE_ARGV.len()] = [name.as_bytes(), old.as_bytes(), new.as_bytes()];
    (
        ScriptId::ReplaceTopic,
        super::call(ScriptId::ReplaceTopic, &keys, &args),
    )
}

/// What replace_topic.lua answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Replaced {
    Done,
    /// Another definition was stored meanwhile (it is this one).
    Changed(String),
    Absent,
}

impl Replaced {
    pub(crate) fn parse(reply: Value) -> Option<Replaced> {
        let a = items(reply);
        match int_at(&a, 0)? {
            1 => Some(Replaced::Done),
            0 => Some(Replaced::Changed(
                String::from_utf8_lossy(&bytes_at(&a, 1)?).into_owned(),
            )),
            -1 => Some(Replaced::Absent),
            _ => None,
        }
    }
}

/// `groups.lua`'s ARGV.
pub(crate) const GROUPS_ARGV: [&str; 2] = ["op", "field"];

/// groups.lua: note (or forget) a serial group of a topic in the index.
pub(crate) fn groups(index: &str, note: bool, field: &str) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [index.to_string()];
    let op: &[u8] = if note { b"note" } else { b"forget" };
    let args: [&[u8]; GROUPS_ARGV.len()] = [op, field.as_bytes()];
    (
        ScriptId::Groups,
        super::call(ScriptId::Groups, &keys, &args),
    )
}

/// drop_slot.lua on one slot; its reply is the number of messages it held.
pub(crate) fn drop_slot(keys: &[String]) -> (ScriptId, Cmd) {
    (
        ScriptId::DropSlot,
        super::call(ScriptId::DropSlot, keys, &[]),
    )
}

/// What define_topic.lua answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Defined {
    /// Stored now.
    Created,
    /// Already stored the same way.
    Same,
    /// Another definition is stored (this one, as JSON); nothing written.
    Different(String),
}

impl Defined {
    /// `{ 0, definition }` created; `{ 1, definition }` same; `{ 2,
    /// existing definition }` different.
    /// None for a reply of another shape.
    pub(crate) fn parse(reply: Value) -> Option<Defined> {
        let a = items(reply);
        match int_at(&a, 0)? {
            0 => Some(Defined::Created),
            1 => Some(Defined::Same),
            2 => Some(Defined::Different(
                String::from_utf8_lossy(&bytes_at(&a, 1)?).into_owned(),
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn the_define_request_follows_the_lua_header() {
        assert_eq!(header_keys(ScriptId::DefineTopic), KEYS);
        assert_eq!(header_argv(ScriptId::DefineTopic), ARGV);
        assert_eq!(header_keys(ScriptId::ReplaceTopic), KEYS);
        assert_eq!(header_argv(ScriptId::ReplaceTopic), REPLACE_ARGV);
        assert!(header_argv(ScriptId::DropSlot).is_empty());
        assert_eq!(header_keys(ScriptId::Groups), KEYS);
        assert_eq!(header_argv(ScriptId::Groups), GROUPS_ARGV);
    }

    #[test]
    fn replies_decode_by_their_code() {
        let reply =
            |code, def: &str| Value::Array(vec![Value::Int(code), Value::BulkString(def.into())]);
        assert_eq!(Defined::parse(reply(0, "{}")), Some(Defined::Created));
        assert_eq!(Defined::parse(reply(1, "{}")), Some(Defined::Same));
        assert_eq!(
            Defined::parse(reply(2, "{\"a\":1}")),
            Some(Defined::Different("{\"a\":1}".into()))
        );
        assert_eq!(Defined::parse(reply(7, "")), None);
        assert_eq!(Defined::parse(Value::Nil), None);
    }
}
