//! `heads.lua`'s calls and reply, typed: reading, marking and dropping a
//! topic's head index (`lua/notify.lua` describes it): one key on a
//! single node; on a cluster one per hash tag of the topic's slots, a call
//! covering those one master serves.

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{as_int, as_score, items};

/// The script's KEYS, by the names its header gives them.
pub(crate) const KEYS: [&str; 1] = ["index"];
/// The script's ARGV, by the names its header gives them.
pub(crate) const ARGV: [&str; 3] = ["op", "limit", "more_indexes"];

/// What a call does to the indexes it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexOp {
    /// Reads up to this many entries, smallest first.
    Read(usize),
    /// Notes each index complete: every slot with work has an entry.
    Mark,
}

impl IndexOp {
    fn args(self) -> (&'static str, String) {
        match self {
            IndexOp::Read(limit) => ("read", limit.to_string()),
            IndexOp::Mark => ("mark", "1".into()),
        }
    }
}

/// A single node: `op` on the topic's one index (`keys::head_index`).
pub(crate) fn on_one_node(prefix: &str, topic: &str, op: IndexOp) -> (ScriptId, Cmd) {
    let keys: [String; KEYS.len()] = [crate::keys::head_index(prefix, topic)];
    let (op, limit) = op.args();
    // In the order of `ARGV`, without the cluster's further indexes.
    let args: [&[u8]; ARGV.len() - 1] = [op.as_bytes(), limit.as_bytes()];
    // A single node's keys only (no hash tag): never sent to a cluster.
    (
        ScriptId::Heads,
        super::call_on_one_node(ScriptId::Heads, &keys, &args),
    )
}

/// A cluster: `op` on the indexes of `tags` (`keys::tag_head_index`), which
/// one master serves as far as the caller knows. The first is declared
/// and routes the call; the others go in ARGV. None for no tags.
pub(crate) fn on_one_master(
    prefix: &str,
    topic: &str,
    tags: &[&str],
    op: IndexOp,
) -> Option<(ScriptId, Cmd)> {
    let (first, more) = tags.split_first()?;
    let keys: [String; KEYS.len()] = [crate::keys::tag_head_index(prefix, topic, first)];
    let more: Vec<String> = more
        .iter()
        .map(|tag| crate::keys::tag_head_index(prefix, topic, tag))
        .collect();
    let (op, limit) = op.args();
    let mut args: Vec<&[u8]> = vec![op.as_bytes(), limit.as_bytes()];
    args.extend(more.iter().map(String::as_bytes));
    Some((ScriptId::Heads, super::call(ScriptId::Heads, &keys, &args)))
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heads {
    /// The index is marked complete: a slot without an entry holds nothing.
    pub(crate) complete: bool,
    /// Some index could not be read (on a cluster: not on the master the
    /// layout said, or a foreign key there); the read is not complete.
    pub(crate) unreached: bool,
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
        let code = as_int(a.first()?)?;
        let (complete, unreached) = (code == 1, code == -1);
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
            unreached,
            more,
            entries,
        })
    }

    /// One read of several reads (a cluster's, one per master): complete
    /// when each is, and cut where the first read that left entries out
    /// stopped, so that every entry left out still sorts after every entry
    /// kept.
    pub(crate) fn merged(reads: Vec<Heads>) -> Heads {
        let complete = reads.iter().all(|r| r.complete);
        let unreached = reads.iter().any(|r| r.unreached);
        let horizon = reads
            .iter()
            .filter(|r| r.more)
            .map(|r| r.entries.last().map_or(i64::MIN, |&(_, v)| v))
            .min();
        let mut entries: Vec<(u32, i64)> = reads.into_iter().flat_map(|r| r.entries).collect();
        entries.sort_by_key(|&(_, v)| v);
        if let Some(h) = horizon {
            entries.retain(|&(_, v)| v <= h);
        }
        Heads {
            complete,
            unreached,
            more: horizon.is_some(),
            entries,
        }
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
    fn reads_of_several_masters_merge_in_order_and_stop_where_one_left_entries_out() {
        let read = |complete, more, entries: &[(u32, i64)]| Heads {
            complete,
            unreached: false,
            more,
            entries: entries.to_vec(),
        };
        let all = Heads::merged(vec![
            read(true, false, &[(1, 10), (4, 40)]),
            read(true, false, &[(2, 5), (3, 30)]),
        ]);
        assert_eq!(all, read(true, false, &[(2, 5), (1, 10), (3, 30), (4, 40)]));
        // The second read stopped at 20: what it left out may come before 40.
        let cut = Heads::merged(vec![
            read(true, false, &[(1, 10), (4, 40)]),
            read(true, true, &[(2, 5), (3, 20)]),
        ]);
        assert_eq!(cut, read(true, true, &[(2, 5), (1, 10), (3, 20)]));
        let incomplete = Heads::merged(vec![read(true, false, &[]), read(false, false, &[])]);
        assert!(!incomplete.complete && !incomplete.unreached);
        let elsewhere = Heads {
            unreached: true,
            ..read(false, false, &[])
        };
        let unreached = Heads::merged(vec![read(true, false, &[]), elsewhere]);
        assert!(!unreached.complete && unreached.unreached);
    }

    #[test]
    fn a_cluster_call_declares_one_index_and_names_the_others() {
        let (_, cmd) = on_one_master("p", "t", &["a", "b", "c"], IndexOp::Read(7)).unwrap();
        let args: Vec<Vec<u8>> = crate::scripts::sent_args(&cmd);
        let text: Vec<String> = args[2..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            text,
            [
                "1",
                "p:{a}:heads#t",
                "read",
                "7",
                "p:{b}:heads#t",
                "p:{c}:heads#t"
            ]
        );
        assert!(on_one_master("p", "t", &[], IndexOp::Mark).is_none());
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
        assert!(h.complete && !h.unreached && !h.more);
        let unreached = Heads::parse(Value::Array(vec![Value::Int(-1), Value::Int(0)])).unwrap();
        assert!(!unreached.complete && unreached.unreached);
        assert_eq!(h.entries, vec![(3, -8_589_934_592), (7, 1_700_000_000_000)]);
        assert_eq!(Heads::parse(Value::Nil), None);
    }
}
