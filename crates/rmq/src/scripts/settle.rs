//! `settle.lua`'s call, typed: phase two ends (or extends) in-flight
//! deliveries of one slot, many in one call. Its reply codes are decoded in
//! `codes.rs`.

use redis::{Cmd, Value};

use super::{ScriptId, TopicArgs};
use crate::error::Result;
use crate::outcome::Settled;
use crate::value::{int_at, items};

/// The script's fixed ARGV, by the names its header gives them, in order;
/// the operations' own arguments follow.
pub(crate) const ARGV: [&str; 12] = [
    "kind",
    "max_attempts",
    "backoff_ms",
    "backoff_max_ms",
    "jitter",
    "channel",
    "slot",
    "dead_max",
    "owner",
    "epoch",
    "dead_ttl_ms",
    "ops",
];

/// `settle_take.lua`'s fixed ARGV: settle's first eleven, then what to
/// take after the settle, then the operations (their args follow).
pub(crate) const TAKE_ARGV: [&str; 14] = [
    "kind",
    "max_attempts",
    "backoff_ms",
    "backoff_max_ms",
    "jitter",
    "channel",
    "slot",
    "dead_max",
    "owner",
    "epoch",
    "dead_ttl_ms",
    "count",
    "lease_ms",
    "ops",
];

/// What to do with one delivery.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Ack,
    Nack {
        delay_ms: i64,
        error: String,
    },
    Dead {
        error: String,
    },
    Extend {
        ms: u64,
    },
    Release,
    /// Serial mode: the caller lost the slot's lease while it held this
    /// delivery; the message goes back at its place at once (the attempt
    /// counts), ahead of the entity's later messages.
    Lost {
        error: String,
    },
}

impl Op {
    /// Its letter in settle.lua's operation string.
    fn code(&self) -> u8 {
        match self {
            Op::Ack => b'a',
            Op::Nack { .. } => b'n',
            Op::Dead { .. } => b'd',
            Op::Extend { .. } => b'e',
            Op::Release => b'r',
            Op::Lost { .. } => b'l',
        }
    }
}

/// One call of `settle.lua` on one slot: operations on deliveries, each
/// named by the delivery id pop returned.
pub(crate) struct SettleRequest<'a> {
    /// The slot's ten keys.
    pub(crate) keys: &'a [String],
    pub(crate) topic: &'a TopicArgs,
    /// The channel for wake-up notices of this slot.
    pub(crate) channel: &'a str,
    pub(crate) slot: u32,
    /// Serial mode: the lease owner and its epoch (None in parallel mode).
    pub(crate) fence: Option<(&'a str, u64)>,
    /// (delivery id, operation), in order.
    pub(crate) ops: Vec<(&'a [u8], &'a Op)>,
    /// Then take up to this many of the slot's due messages in the same
    /// call (`settle_take.lua`); None: settle only.
    pub(crate) take: Option<usize>,
}

impl SettleRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let t = self.topic;
        let (jitter, slot) = (super::jitter(), self.slot.to_string());
        let (owner, epoch) = super::fence_args(self.fence);
        let letters: Vec<u8> = self.ops.iter().map(|(_, op)| op.code()).collect();
        let nums = self.numbers();
        let count = self.take.map(|n| n.to_string()).unwrap_or_default();
        // In the order of `ARGV` or `TAKE_ARGV` (the headers'; a test holds
        // them together): settle's first eleven...
        let mut args: Vec<&[u8]> = vec![
            t.kind.as_bytes(),
            t.max_attempts.as_bytes(),
            t.backoff.as_bytes(),
            t.backoff_max.as_bytes(),
            jitter.as_bytes(),
            self.channel.as_bytes(),
            slot.as_bytes(),
            t.dead_max.as_bytes(),
            owner.as_bytes(),
            epoch.as_bytes(),
            t.dead_ttl.as_bytes(),
        ];
        // ...then what to take, when it takes...
        if self.take.is_some() {
            args.push(count.as_bytes());
            args.push(t.lease.as_bytes());
        }
        // ...then the operations.
        args.push(&letters);
        debug_assert_eq!(
            args.len(),
            if self.take.is_some() {
                TAKE_ARGV.len()
            } else {
                ARGV.len()
            }
        );
        self.push_operations(&mut args, &nums);
        let id = if self.take.is_some() {
            ScriptId::SettleTake
        } else {
            ScriptId::Settle
        };
        (id, super::call(id, self.keys, &args))
    }

    /// Each operation's number as text (a nack's delay, an extension's
    /// lease), empty for the others.
    fn numbers(&self) -> Vec<String> {
        self.ops
            .iter()
            .map(|(_, op)| match op {
                Op::Nack { delay_ms, .. } => delay_ms.to_string(),
                Op::Extend { ms } => ms.to_string(),
                _ => String::new(),
            })
            .collect()
    }

    /// Each operation's args, as settle.lua reads them (`nums`: from
    /// [`numbers`](Self::numbers)).
    fn push_operations<'b>(&'b self, args: &mut Vec<&'b [u8]>, nums: &'b [String]) {
        for ((id, op), num) in self.ops.iter().zip(nums) {
            args.push(id);
            match op {
                Op::Nack { error, .. } => {
                    args.push(num.as_bytes());
                    args.push(error.as_bytes());
                }
                Op::Dead { error } | Op::Lost { error } => args.push(error.as_bytes()),
                Op::Extend { .. } => args.push(num.as_bytes()),
                Op::Ack | Op::Release => {}
            }
        }
    }
}

/// Each operation's outcome in a settle reply `{ now, code per op... }`,
/// in order (`codes::settled` decodes one; a missing code reads as stale).
pub(crate) fn outcomes(reply: Value, ops: usize) -> Vec<Result<Settled>> {
    let codes = items(reply);
    (0..ops)
        .map(|i| super::codes::settled(int_at(&codes, i + 1)))
        .collect()
}

/// A `settle_take.lua` reply, decoded.
pub(crate) struct TakenOutcomes {
    /// Each operation's outcome, in order.
    pub(crate) settled: Vec<Result<Settled>>,
    /// The take's reply, a pop's (None: nothing was taken, see the
    /// script's header).
    pub(crate) taken: Option<Value>,
    /// The mark of better work in another slot the call took for the
    /// caller instead of taking: (slot, index value).
    pub(crate) mark: Option<(u32, i64)>,
}

/// `{ settle reply, pop reply or false[, slot, mark] }`, decoded for `ops`
/// operations.
pub(crate) fn taken_outcomes(reply: Value, ops: usize) -> TakenOutcomes {
    let parts = items(reply);
    let mark = match (
        int_at(&parts, 2),
        parts.get(3).and_then(crate::value::as_score),
    ) {
        (Some(slot), Some(v)) => u32::try_from(slot).ok().map(|slot| (slot, v)),
        _ => None,
    };
    let mut parts = parts.into_iter();
    let settled = outcomes(parts.next().unwrap_or(Value::Nil), ops);
    let taken = parts.next().filter(|v| matches!(v, Value::Array(_)));
    TakenOutcomes {
        settled,
        taken,
        mark,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settle_request_follows_the_lua_header() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Settle), ARGV);
        // Then the operations' own arguments.
        let (_, body) = ScriptId::Settle.source();
        assert!(body.contains(&format!("ARGV[{}..] args", ARGV.len() + 1)));
        assert_eq!(crate::scripts::header_argv(ScriptId::SettleTake), TAKE_ARGV);
        let (_, body) = ScriptId::SettleTake.source();
        assert!(body.contains(&format!("ARGV[{}..] args", TAKE_ARGV.len() + 1)));
    }
}
