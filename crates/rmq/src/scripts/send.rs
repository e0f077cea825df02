//! `send.lua`'s call, typed: adds messages to one slot, merging duplicates
//! by merge key. Its per-message codes are decoded in `codes.rs`.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{int_at, items};

/// The script's fixed ARGV, by the names its header gives them, in order;
/// the messages' triples follow.
pub(crate) const ARGV: [&str; 6] = [
    "kind",
    "max_payload",
    "tolerance_ms",
    "channel",
    "slot",
    "room",
];

/// One message as send.lua takes it.
pub(crate) struct Item<'a> {
    pub(crate) merge_key: &'a [u8],
    /// The priority, the due time (unix ms or `+<delay ms>`) or the range.
    pub(crate) spec: &'a [u8],
    pub(crate) payload: &'a [u8],
}

/// One call of `send.lua` on one slot.
pub(crate) struct SendRequest<'a> {
    /// The slot's ten keys.
    pub(crate) keys: &'a [String],
    /// The topic kind's code ('p', 'f' or 'r').
    pub(crate) kind: &'a str,
    pub(crate) max_payload: &'a str,
    pub(crate) tolerance_ms: &'a str,
    /// The channel for wake-up notices of this slot.
    pub(crate) channel: &'a str,
    pub(crate) slot: &'a str,
    /// New messages the call may add at most (a bounded topic's reserved
    /// room), None when the topic is not bounded.
    pub(crate) room: Option<usize>,
    pub(crate) items: Vec<Item<'a>>,
}

impl SendRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let room = self
            .room
            .map_or_else(|| "-1".to_string(), |n| n.to_string());
        // In the order of `ARGV` (the header's; a test holds them together).
        let fixed: [&[u8]; ARGV.len()] = [
            self.kind.as_bytes(),
            self.max_payload.as_bytes(),
            self.tolerance_ms.as_bytes(),
            self.channel.as_bytes(),
            self.slot.as_bytes(),
            room.as_bytes(),
        ];
        let mut args: Vec<&[u8]> = Vec::with_capacity(ARGV.len() + 3 * self.items.len());
        args.extend_from_slice(&fixed);
        for m in &self.items {
            args.extend_from_slice(&[m.merge_key, m.spec, m.payload]);
        }
        (
            ScriptId::Send,
            super::call(ScriptId::Send, self.keys, &args),
        )
    }
}

/// Whether a send code says the message was new (and took room).
pub(crate) fn is_new(code: i64) -> bool {
    code == 1 || code == 3
}

/// A send reply, read: the server's clock, and per message its code
/// (`codes::sent` decodes one) and its order score as stored.
pub(crate) struct SendReply {
    pub(crate) server_ms: i64,
    /// Per message, in order: (code, score); a message the reply does not
    /// cover gets code -3 (invalid).
    pub(crate) results: Vec<(i64, i64)>,
}

/// Reads a send reply for `messages` messages.
pub(crate) fn reply(reply: Value, messages: usize) -> SendReply {
    let a = items(reply);
    SendReply {
        server_ms: int_at(&a, 0).unwrap_or(0),
        results: (0..messages)
            .map(|j| {
                (
                    int_at(&a, j + 1).unwrap_or(-3),
                    int_at(&a, messages + j + 1).unwrap_or(0),
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_request_follows_the_lua_header() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Send), ARGV);
        let (_, body) = ScriptId::Send.source();
        assert!(body.contains(&format!("ARGV[{}..] triples", ARGV.len() + 1)));
    }

    #[test]
    fn a_reply_gives_each_message_its_code_and_score_and_a_short_one_marks_the_rest_invalid() {
        let int = Value::Int;
        let full = Value::Array(vec![int(5), int(1), int(2), int(70), int(80)]);
        let r = reply(full, 2);
        assert_eq!(r.server_ms, 5);
        assert_eq!(r.results, vec![(1, 70), (2, 80)]);
        let short = Value::Array(vec![int(5), int(1), int(2)]);
        assert_eq!(reply(short, 3).results, vec![(1, 0), (2, 0), (-3, 0)]);
    }
}
