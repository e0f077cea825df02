//! `pop.lua`'s call and reply, typed: phase one takes due messages of one
//! slot into flight (or, with count 0, only looks). The consumer's fetcher
//! makes deliveries of the reply.

use redis::{Cmd, Value};

use super::{ScriptId, TopicArgs};
use crate::value::{as_int, bytes_at, int_at, items};

/// The script's ARGV, by the names its header gives them, in order.
pub(crate) const ARGV: [&str; 13] = [
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
    "dead_ttl_ms",
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
            t.dead_ttl.as_bytes(),
        ];
        (ScriptId::Pop, super::call(ScriptId::Pop, self.keys, &args))
    }
}

/// What pop.lua answered.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PopReply {
    /// Server time (ms).
    pub(crate) now: i64,
    /// The slot's head score, None when the caller may not take now.
    pub(crate) head: Option<i64>,
    /// The next priority retry's time (ms).
    pub(crate) retry: Option<i64>,
    /// The next lease deadline (ms).
    pub(crate) lease: Option<i64>,
    /// Expired leases rolled back that ended their message (a bounded
    /// topic's room comes back for them).
    pub(crate) ended: u64,
    /// The messages taken: (delivery id, payload).
    pub(crate) taken: Vec<(Vec<u8>, Vec<u8>)>,
}

impl PopReply {
    /// `{ now, head, next retry, next lease deadline, ended, then per
    /// message: delivery id, payload }` (false reads as None).
    pub(crate) fn parse(reply: Value) -> PopReply {
        let a = items(reply);
        let opt = |i: usize| a.get(i).and_then(as_int);
        let taken = a
            .get(5..)
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|m| {
                (
                    bytes_at(m, 0).unwrap_or_default(),
                    bytes_at(m, 1).unwrap_or_default(),
                )
            })
            .collect();
        PopReply {
            now: int_at(&a, 0).unwrap_or(0),
            head: opt(1),
            retry: opt(2),
            lease: opt(3),
            ended: int_at(&a, 4)
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
            taken,
        }
    }
}

/// The parts of a delivery id, `<token>,<attempt>,<score>[,<origin>]|<key>`
/// (see records.lua): pop hands it out, settle takes it back.
#[derive(Debug, PartialEq)]
pub(crate) struct DeliveryId<'a> {
    pub(crate) token: u64,
    pub(crate) attempt: u32,
    pub(crate) score: i64,
    /// The token of the message's first delivery (the token itself when
    /// the id names none).
    pub(crate) origin: u64,
    pub(crate) key: &'a [u8],
}

impl<'a> DeliveryId<'a> {
    pub(crate) fn parse(id: &'a [u8]) -> Option<DeliveryId<'a>> {
        let bar = id.iter().position(|&b| b == b'|')?;
        let head = std::str::from_utf8(&id[..bar]).ok()?;
        let mut parts = head.splitn(4, ',');
        let token = parts.next()?.parse().ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let score_s = parts.next()?;
        let origin = match parts.next() {
            Some(o) => o.parse().ok()?,
            None => token,
        };
        // Scores are whole numbers; Redis may print a large one as a float.
        let score = score_s
            .parse::<i64>()
            .ok()
            .or_else(|| score_s.parse::<f64>().ok().map(|f| f as i64))?;
        Some(DeliveryId {
            token,
            attempt,
            score,
            origin,
            key: &id[bar + 1..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pop_reply_reads_false_as_none_and_pairs_ids_with_payloads() {
        let reply = Value::Array(vec![
            Value::Int(100),
            Value::Nil,
            Value::Int(150),
            Value::Nil,
            Value::Int(0),
            Value::BulkString(b"1,1,5|k".to_vec()),
            Value::BulkString(b"p".to_vec()),
        ]);
        let r = PopReply::parse(reply);
        assert_eq!(
            (r.now, r.head, r.retry, r.lease),
            (100, None, Some(150), None)
        );
        assert_eq!(r.taken, vec![(b"1,1,5|k".to_vec(), b"p".to_vec())]);
        assert_eq!(PopReply::parse(Value::Okay), PopReply::default());
    }

    #[test]
    fn a_redelivery_id_names_its_origin_and_a_first_delivery_is_its_own() {
        let first = DeliveryId::parse(b"7,1,5|k").expect("a first delivery parses");
        assert_eq!((first.token, first.attempt, first.origin), (7, 1, 7));
        let again = DeliveryId::parse(b"9,2,5,7|k,|x").expect("a redelivery parses");
        assert_eq!(
            (
                again.token,
                again.attempt,
                again.score,
                again.origin,
                again.key
            ),
            (9, 2, 5, 7, &b"k,|x"[..])
        );
        assert_eq!(DeliveryId::parse(b"9,2,5,x|k"), None);
    }

    #[test]
    fn the_pop_request_follows_the_lua_header() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Pop), ARGV);
    }

    #[test]
    fn a_delivery_id_names_token_attempt_score_and_key() {
        let d = DeliveryId::parse(b"17,2,9007199254740991|a|b,c").unwrap();
        assert_eq!(
            d,
            DeliveryId {
                token: 17,
                attempt: 2,
                score: 9_007_199_254_740_991,
                origin: 17,
                key: b"a|b,c",
            }
        );
        assert_eq!(DeliveryId::parse(b"1,1,-5|").unwrap().score, -5);
        assert_eq!(DeliveryId::parse(b"1,1,1e3|k").unwrap().score, 1000);
        for bad in [&b"k"[..], b"1,1|k", b"x,1,2|k", b"1,1,2", b"1,-1,2|k"] {
            assert_eq!(DeliveryId::parse(bad), None, "{bad:?}");
        }
    }
}
