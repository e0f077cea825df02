//! `secret.lua`'s call, typed: the prefix's receipt key, made once.

use redis::{Cmd, Value};

use super::ScriptId;

/// The script's KEYS, by the names its header gives them.
pub(crate) const KEYS: [&str; 1] = ["secret"];
/// The script's ARGV, by the names its header gives them.
pub(crate) const ARGV: [&str; 1] = ["fresh"];

/// secret.lua: keep `fresh` under `key` unless a key is there; read it.
pub(crate) fn secret(key: &str, fresh: &str) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [key.to_string()];
    let args: [&[u8]; ARGV.len()] = [fresh.as_bytes()];
    (
        ScriptId::Secret,
        super::call(ScriptId::Secret, &keys, &args),
    )
}

/// The stored key as the script answered it (None: not a string).
pub(crate) fn parse(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn the_request_follows_the_lua_header() {
        assert_eq!(header_keys(ScriptId::Secret), KEYS);
        assert_eq!(header_argv(ScriptId::Secret), ARGV);
    }
}
