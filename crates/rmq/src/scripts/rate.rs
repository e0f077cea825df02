//! rate.lua: a topic's global delivery rate limit (one bucket per topic,
//! shared by all its consumers). The fetch loop takes tokens before a pop
//! round and gives back those the round did not use; defining, updating and
//! deleting a topic set or drop its bucket.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// `rate.lua`'s KEYS.
pub(crate) const KEYS: [&str; 1] = ["bucket"];
/// `rate.lua`'s ARGV.
pub(crate) const ARGV: [&str; 3] = ["op", "n", "burst"];

fn call(bucket: &str, op: &str, n: u64, burst: u32) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [bucket.to_string()];
    let (n, burst) = (n.to_string(), burst.to_string());
    let args: [&[u8]; ARGV.len()] = [op.as_bytes(), n.as_bytes(), burst.as_bytes()];
    (ScriptId::Rate, super::call(ScriptId::Rate, &keys, &args))
}

/// Asks for up to `n` tokens now.
pub(crate) fn take(bucket: &str, n: usize) -> (ScriptId, Cmd) {
    call(bucket, "take", n as u64, 0)
}

/// Returns `n` tokens taken but not used.
pub(crate) fn give(bucket: &str, n: usize) -> (ScriptId, Cmd) {
    call(bucket, "give", n as u64, 0)
}

/// Sets the limit (`per_sec` 0: none).
pub(crate) fn set(bucket: &str, per_sec: u32, burst: u32) -> (ScriptId, Cmd) {
    call(bucket, "set", u64::from(per_sec), burst)
}

/// Deletes the bucket.
pub(crate) fn drop_bucket(bucket: &str) -> (ScriptId, Cmd) {
    call(bucket, "drop", 0, 0)
}

/// What a take answered: tokens granted, and when none were, how long
/// until the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) tokens: usize,
    pub(crate) wait_ms: u64,
}

impl Granted {
    /// `{ granted, wait ms }`; a reply of another shape grants nothing for
    /// a second (never more than the limit).
    pub(crate) fn parse(reply: Value) -> Granted {
        let a = items(reply);
        match (int_at(&a, 0), int_at(&a, 1)) {
            (Some(g), Some(w)) => Granted {
                tokens: usize::try_from(g).unwrap_or(0),
                wait_ms: u64::try_from(w).unwrap_or(1_000),
            },
            _ => Granted {
                tokens: 0,
                wait_ms: 1_000,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::{header_argv, header_keys};

    #[test]
    fn arguments_follow_the_scripts_header() {
        assert_eq!(header_argv(ScriptId::Rate), ARGV);
        assert_eq!(header_keys(ScriptId::Rate), KEYS);
    }

    #[test]
    fn replies_are_read_by_the_headers_layout() {
        let r = Value::Array(vec![Value::Int(3), Value::Int(0)]);
        assert_eq!(
            Granted::parse(r),
            Granted {
                tokens: 3,
                wait_ms: 0
            }
        );
        assert_eq!(Granted::parse(Value::Nil).tokens, 0);
    }
}
