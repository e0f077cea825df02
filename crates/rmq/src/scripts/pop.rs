//! `pop.lua`'s call, typed: phase one takes due messages of one slot into
//! flight (or, with count 0, only looks). The reply is read by the
//! consumer's fetcher (`parse_pop`), which makes deliveries of it.

use redis::Cmd;

use super::{ScriptId, TopicArgs};

/// The script's ARGV, by the names its header gives them, in order.
pub(crate) const ARGV: [&str; 12] = [
    "kind",
    "count",
    "lease_ms",
    "max_attempts",
    "backoff_ms",
    "backoff_max_ms",
    "jitter",
    "channel",
    "slot",
    "dead_max",
    "owner",
    "epoch",
];

/// One call of `pop.lua` on one slot.
pub(crate) struct PopRequest<'a> {
    /// The slot's ten keys.
    pub(crate) keys: &'a [String],
    pub(crate) topic: &'a TopicArgs,
    /// Messages to take at most (0: only look).
    pub(crate) count: usize,
    /// The channel for wake-up notices of this slot.
    pub(crate) channel: &'a str,
    pub(crate) slot: u32,
    /// Serial mode: the lease owner and its epoch (None in parallel mode).
    pub(crate) fence: Option<(&'a str, u64)>,
}

impl PopRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let t = self.topic;
        let count = self.count.to_string();
        let (jitter, slot) = (super::jitter(), self.slot.to_string());
        let (owner, epoch) = super::fence_args(self.fence);
        // In the order of `ARGV` (the header's; a test holds them together).
        let args: [&[u8]; ARGV.len()] = [
            t.kind.as_bytes(),
            count.as_bytes(),
            t.lease.as_bytes(),
            t.max_attempts.as_bytes(),
            t.backoff.as_bytes(),
            t.backoff_max.as_bytes(),
            jitter.as_bytes(),
            self.channel.as_bytes(),
            slot.as_bytes(),
            t.dead_max.as_bytes(),
            owner.as_bytes(),
            epoch.as_bytes(),
        ];
        (ScriptId::Pop, super::call(ScriptId::Pop, self.keys, &args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pop_request_follows_the_lua_header() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Pop), ARGV);
    }
}
