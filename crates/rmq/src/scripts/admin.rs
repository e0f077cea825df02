//! The admin scripts' calls and replies, typed: `stats.lua`, `peek.lua`,
//! `dead_list.lua` and `firsts.lua` (readings, each on one slot or on many
//! slots of one node), `dead_requeue.lua` and `dead_purge.lua` (one slot).
//! Off the hot path; `crate::admin` runs them over a topic's slots.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{as_int, as_score, bytes_at, int_at, items};

/// `stats.lua`'s ARGV.
pub(crate) const STATS_ARGV: [&str; 1] = ["kind"];
/// `peek.lua`'s ARGV.
pub(crate) const PEEK_ARGV: [&str; 3] = ["kind", "limit", "from"];
/// `dead_list.lua`'s ARGV.
pub(crate) const DEAD_LIST_ARGV: [&str; 2] = ["limit", "from"];
/// `firsts.lua`'s ARGV.
pub(crate) const FIRSTS_ARGV: [&str; 2] = ["kind", "which"];
/// `dead_requeue.lua`'s ARGV.
pub(crate) const DEAD_REQUEUE_ARGV: [&str; 7] = [
    "kind",
    "channel",
    "slot",
    "all",
    "limit",
    "key",
    "before_ms",
];
/// `dead_purge.lua`'s ARGV.
pub(crate) const DEAD_PURGE_ARGV: [&str; 4] = ["all", "limit", "key", "older_than_ms"];

/// Keys of one slot in a reading call's KEYS (see `lua/layout.lua`).
pub(crate) const KEYS_PER_SLOT: usize = 10;

/// A reading call over the slots whose keys `keys` holds, slot after slot:
/// keys of several slots span hash slots, which only a single node serves
/// in one call.
fn reading(id: ScriptId, keys: &[String], args: &[&[u8]]) -> Cmd {
    if keys.len() > KEYS_PER_SLOT {
        super::call_on_one_node(id, keys, args)
    } else {
        super::call(id, keys, args)
    }
}

/// A reading's reply: the server time, then one part per slot of the call
/// (`per_slot` values each); None for a reply of another shape.
pub(crate) fn split_reading(
    reply: Value,
    per_slot: usize,
    slots: usize,
) -> Option<(i64, Vec<Value>)> {
    let mut a = items(reply).into_iter();
    let now = as_int(&a.next()?)?;
    let rest: Vec<Value> = a.collect();
    if rest.len() != per_slot * slots {
        return None;
    }
    Some((now, rest))
}

/// A slot's depth per state and its counters (stats.lua).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotStats {
    pub(crate) pending: u64,
    pub(crate) due_now: u64,
    pub(crate) retry_waiting: u64,
    pub(crate) in_flight: u64,
    pub(crate) behind_in_flight: u64,
    pub(crate) dead: u64,
    pub(crate) paused: bool,
    /// The serial lease: its live owner (empty when none), epoch and expiry.
    pub(crate) lease_owner: Vec<u8>,
    pub(crate) lease_epoch: u64,
    pub(crate) lease_until_ms: i64,
    /// (counter name, value), as the slot's counter hash holds them.
    pub(crate) counters: Vec<(Vec<u8>, u64)>,
}

/// stats.lua on the slots whose keys `keys` holds.
pub(crate) fn stats(keys: &[String], kind: &str) -> (ScriptId, Cmd) {
    let args: [&[u8]; STATS_ARGV.len()] = [kind.as_bytes()];
    (ScriptId::Stats, reading(ScriptId::Stats, keys, &args))
}

fn count(a: &[Value], i: usize) -> u64 {
    int_at(a, i)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}

impl SlotStats {
    /// One slot's part of a stats.lua reply (an empty part: a slot that
    /// holds nothing).
    pub(crate) fn parse(part: Value) -> SlotStats {
        let a = items(part);
        let counters = a
            .get(10..)
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|p| {
                let value = as_int(&p[1]).and_then(|n| u64::try_from(n).ok());
                (bytes_at(p, 0).unwrap_or_default(), value.unwrap_or(0))
            })
            .collect();
        SlotStats {
            pending: count(&a, 0),
            due_now: count(&a, 1),
            retry_waiting: count(&a, 2),
            in_flight: count(&a, 3),
            behind_in_flight: count(&a, 4),
            dead: count(&a, 5),
            paused: count(&a, 6) == 1,
            lease_owner: bytes_at(&a, 7).unwrap_or_default(),
            lease_epoch: count(&a, 8),
            lease_until_ms: int_at(&a, 9).unwrap_or(0),
            counters,
        }
    }
}

/// A pending message as peek.lua reports it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Peeked {
    pub(crate) key: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempts: u32,
    /// Its place in the pending set (priority and FIFO part, or due time).
    pub(crate) score: i64,
}

/// peek.lua on the slots whose keys `keys` holds: up to `limit` pending
/// messages of each, after its first `from`.
pub(crate) fn peek(keys: &[String], kind: &str, limit: &str, from: &str) -> (ScriptId, Cmd) {
    let args: [&[u8]; PEEK_ARGV.len()] = [kind.as_bytes(), limit.as_bytes(), from.as_bytes()];
    (ScriptId::Peek, reading(ScriptId::Peek, keys, &args))
}

/// One slot's part of a listing reply: how many members the script
/// scanned, then the items found, each `width` values.
fn listing(part: Value, width: usize) -> (usize, Vec<Value>) {
    let mut a = items(part);
    if a.is_empty() {
        return (0, a);
    }
    let scanned = as_int(&a.remove(0))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    a.truncate(a.len() - a.len() % width);
    (scanned, a)
}

impl Peeked {
    /// One slot's part of a peek.lua reply: the members scanned, then per
    /// message `key, payload, attempts, score`.
    pub(crate) fn parse(part: Value) -> (usize, Vec<Peeked>) {
        let (scanned, a) = listing(part, 4);
        let found = a
            .chunks_exact(4)
            .map(|m| Peeked {
                key: bytes_at(m, 0).unwrap_or_default(),
                payload: bytes_at(m, 1).unwrap_or_default(),
                attempts: int_at(m, 2)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                score: m.get(3).and_then(as_score).unwrap_or(0),
            })
            .collect();
        (scanned, found)
    }
}

/// A dead letter as dead_list.lua reports it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Dead {
    pub(crate) key: Vec<u8>,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempts: u32,
    pub(crate) dead_at_ms: i64,
    pub(crate) deaths: u32,
    pub(crate) error: String,
}

/// dead_list.lua on the slots whose keys `keys` holds: up to `limit` dead
/// letters of each, oldest death first, after its first `from`.
pub(crate) fn dead_list(keys: &[String], limit: &str, from: &str) -> (ScriptId, Cmd) {
    let args: [&[u8]; DEAD_LIST_ARGV.len()] = [limit.as_bytes(), from.as_bytes()];
    (ScriptId::DeadList, reading(ScriptId::DeadList, keys, &args))
}

impl Dead {
    /// One slot's part of a dead_list.lua reply: the members scanned, then
    /// per letter `key, payload, attempts, score, dead ms, deaths, error`.
    pub(crate) fn parse(part: Value) -> (usize, Vec<Dead>) {
        let (scanned, a) = listing(part, 7);
        let found = a
            .chunks_exact(7)
            .map(|d| Dead {
                key: bytes_at(d, 0).unwrap_or_default(),
                payload: bytes_at(d, 1).unwrap_or_default(),
                attempts: int_at(d, 2)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
                dead_at_ms: int_at(d, 4).unwrap_or(0),
                deaths: int_at(d, 5)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(1),
                error: String::from_utf8_lossy(&bytes_at(d, 6).unwrap_or_default()).into_owned(),
            })
            .collect();
        (scanned, found)
    }
}

/// Which of a slot's sets firsts.lua looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstsOf {
    /// The pending messages (peek).
    Pending,
    /// The dead letters (the dead-letter tools).
    Dead,
    /// All four: pending, dead, retries and leases (taking by hand).
    All,
}

/// firsts.lua on the slots whose keys `keys` holds.
pub(crate) fn firsts(keys: &[String], kind: &str, of: FirstsOf) -> (ScriptId, Cmd) {
    let which: &[u8] = match of {
        FirstsOf::Pending => b"pending",
        FirstsOf::Dead => b"dead",
        FirstsOf::All => b"all",
    };
    let args: [&[u8]; FIRSTS_ARGV.len()] = [kind.as_bytes(), which];
    (ScriptId::Firsts, reading(ScriptId::Firsts, keys, &args))
}

/// Where a slot's queues begin (firsts.lua), each None when it is empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Firsts {
    /// The score of its next pending message in consumption order.
    pub(crate) pending: Option<i64>,
    /// The time of death of its oldest dead letter (ms).
    pub(crate) dead: Option<i64>,
    /// Its first priority retry's time (ms).
    pub(crate) retry: Option<i64>,
    /// Its first lease deadline (ms).
    pub(crate) lease_ends: Option<i64>,
}

impl Firsts {
    /// Values per slot in a firsts.lua reply.
    pub(crate) const PER_SLOT: usize = 4;

    /// One slot's values of a firsts.lua reply.
    pub(crate) fn parse(part: &[Value]) -> Firsts {
        Firsts {
            pending: part.first().and_then(as_score),
            dead: part.get(1).and_then(as_score),
            retry: part.get(2).and_then(as_score),
            lease_ends: part.get(3).and_then(as_score),
        }
    }
}

/// Which dead letters of a slot a requeue or purge call takes.
pub(crate) enum Which<'a> {
    /// The one of this merge key.
    Key(&'a [u8]),
    /// Up to `limit` of them.
    All { limit: &'a str },
    /// Up to `limit` of those that died more than `ms` ago (server clock).
    OlderThan { limit: &'a str, ms: &'a str },
}

/// One call of dead_requeue.lua on one slot.
pub(crate) struct RequeueRequest<'a> {
    pub(crate) keys: &'a [String],
    pub(crate) kind: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) slot: &'a str,
    pub(crate) which: Which<'a>,
    /// All: only letters dead at or before this time (ms; '' = now).
    pub(crate) before_ms: &'a str,
}

/// What a requeue call did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Requeued {
    pub(crate) requeued: u64,
    pub(crate) merged: u64,
    /// The time bound the call used (ms): the next call of the slot passes it.
    pub(crate) before_ms: i64,
    /// The server's clock when it ran (ms).
    pub(crate) server_ms: i64,
    /// Per letter taken, in order: its merge key, code (1 requeued, 2
    /// merged, 3 requeued behind the in-flight delivery, 4 merged into the
    /// message behind it) and order score (0: not told).
    pub(crate) each: Vec<(Vec<u8>, i64, i64)>,
}

impl RequeueRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let (all, limit, key): (&[u8], &[u8], &[u8]) = match self.which {
            Which::Key(key) => (b"0", b"1", key),
            Which::All { limit } | Which::OlderThan { limit, .. } => (b"1", limit.as_bytes(), b""),
        };
        // In the order of `DEAD_REQUEUE_ARGV` (a test holds it to the header).
        let args: [&[u8]; DEAD_REQUEUE_ARGV.len()] = [
            self.kind.as_bytes(),
            self.channel.as_bytes(),
            self.slot.as_bytes(),
            all,
            limit,
            key,
            self.before_ms.as_bytes(),
        ];
        (
            ScriptId::DeadRequeue,
            super::call(ScriptId::DeadRequeue, self.keys, &args),
        )
    }
}

impl Requeued {
    /// dead_requeue.lua's reply: `{ requeued, merged, the time bound used,
    /// server now, then key, code, score per letter }`.
    pub(crate) fn parse(reply: Value) -> Requeued {
        let a = items(reply);
        let each = (4..a.len())
            .step_by(3)
            .filter_map(|i| {
                Some((
                    bytes_at(&a, i)?,
                    int_at(&a, i + 1)?,
                    int_at(&a, i + 2).unwrap_or(0),
                ))
            })
            .collect();
        Requeued {
            requeued: count(&a, 0),
            merged: count(&a, 1),
            before_ms: int_at(&a, 2).unwrap_or(0),
            server_ms: int_at(&a, 3).unwrap_or(0),
            each,
        }
    }
}

/// dead_purge.lua on one slot; its reply is the number deleted.
pub(crate) fn dead_purge(keys: &[String], which: &Which<'_>) -> (ScriptId, Cmd) {
    let (all, limit, key, age): (&[u8], &[u8], &[u8], &[u8]) = match *which {
        Which::Key(key) => (b"0", b"1", key, b""),
        Which::All { limit } => (b"1", limit.as_bytes(), b"", b""),
        Which::OlderThan { limit, ms } => (b"1", limit.as_bytes(), b"", ms.as_bytes()),
    };
    let args: [&[u8]; DEAD_PURGE_ARGV.len()] = [all, limit, key, age];
    (
        ScriptId::DeadPurge,
        super::call(ScriptId::DeadPurge, keys, &args),
    )
}

/// dead_purge.lua's reply: how many letters it deleted.
pub(crate) fn purged(reply: &Value) -> u64 {
    as_int(reply)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::header_argv;

    #[test]
    fn the_admin_requests_follow_the_lua_headers() {
        assert_eq!(header_argv(ScriptId::Stats), STATS_ARGV);
        assert_eq!(header_argv(ScriptId::Peek), PEEK_ARGV);
        assert_eq!(header_argv(ScriptId::DeadList), DEAD_LIST_ARGV);
        assert_eq!(header_argv(ScriptId::Firsts), FIRSTS_ARGV);
        assert_eq!(header_argv(ScriptId::DeadRequeue), DEAD_REQUEUE_ARGV);
        assert_eq!(header_argv(ScriptId::DeadPurge), DEAD_PURGE_ARGV);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn replies_are_read_by_the_headers_layout() {
        let slot = Value::Array(
            [5, 3, 1, 2, 0, 4, 1]
                .map(Value::Int)
                .into_iter()
                .chain([bulk("m1"), Value::Int(3), Value::Int(99)])
                .chain([bulk("sent"), bulk("9"), bulk("acked"), Value::Int(6)])
                .collect(),
        );
        let never_used = Value::Array(vec![]);
        let reply = Value::Array(vec![Value::Int(7), slot, never_used]);
        let (now, parts) = split_reading(reply, 1, 2).unwrap();
        assert_eq!(now, 7);
        let [s, empty] = <[Value; 2]>::try_from(parts).unwrap().map(SlotStats::parse);
        assert_eq!((s.pending, s.due_now, s.dead, s.paused), (5, 3, 4, true));
        assert_eq!(
            (s.lease_owner.as_slice(), s.lease_epoch, s.lease_until_ms),
            (&b"m1"[..], 3, 99)
        );
        assert_eq!(
            s.counters,
            vec![(b"sent".to_vec(), 9), (b"acked".to_vec(), 6)]
        );
        assert_eq!(empty, SlotStats::default());
        let peek = Value::Array(vec![
            Value::Int(2),
            bulk("k"),
            bulk("p"),
            Value::Int(2),
            bulk("1.7e+12"),
        ]);
        assert_eq!(
            Peeked::parse(peek),
            (
                2,
                vec![Peeked {
                    key: b"k".to_vec(),
                    payload: b"p".to_vec(),
                    attempts: 2,
                    score: 1_700_000_000_000
                }]
            )
        );
        let firsts = [bulk("30"), Value::Nil, Value::Nil, bulk("1.7e+12")];
        assert_eq!(
            Firsts::parse(&firsts),
            Firsts {
                pending: Some(30),
                dead: None,
                retry: None,
                lease_ends: Some(1_700_000_000_000),
            }
        );
        // A reply of the wrong shape reads as nothing, not as a panic.
        assert_eq!(split_reading(Value::Int(3), 1, 1), None);
        assert_eq!(split_reading(Value::Array(vec![Value::Int(1)]), 2, 1), None);
        assert_eq!(Dead::parse(Value::Int(3)), (0, vec![]));
        assert_eq!(Requeued::parse(Value::Nil), Requeued::default());
    }
}
