//! Which master serves each hash slot, as the cluster said when asked
//! (`CLUSTER SLOTS`, kept by `routing.rs`). It lets work on many rmq slots
//! share one call per master where a script may reach keys of several hash
//! slots of its own node (a serial member's lease renewals, reads of the
//! head indexes). The answer may be stale the moment it arrives (a
//! failover, a resharding): its users only group calls by it and route
//! each call by a declared key, so a stale layout costs a call more, never
//! a wrong answer.

use redis::Value;

use crate::value::as_int;

/// Hash slots in a Redis Cluster.
pub(crate) const HASH_SLOTS: usize = 16_384;

/// The master serving each hash slot, by an index of this layout's own
/// (two hash slots with the same index are on the same master).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterLayout {
    /// Per hash slot: the index of its master, or None if no node serves it.
    master_of: Vec<Option<u16>>,
}

impl ClusterLayout {
    /// The master serving `hash_slot`, if any does.
    pub(crate) fn master_of(&self, hash_slot: u16) -> Option<u16> {
        self.master_of
            .get(usize::from(hash_slot))
            .copied()
            .flatten()
    }

    /// A layout from each hash slot's master index.
    pub(super) fn of_owners(master_of: Vec<Option<u16>>) -> ClusterLayout {
        ClusterLayout { master_of }
    }

    /// The layout a `CLUSTER SLOTS` reply describes: entries of `[start,
    /// end, [host, port, id, ...], replicas...]`. Masters are told apart
    /// by id, or by host and port where the id is missing.
    #[cfg(test)]
    pub(crate) fn of_reply(reply: &Value) -> Option<ClusterLayout> {
        let mut master_of = vec![None; HASH_SLOTS];
        let mut masters: Vec<Vec<u8>> = Vec::new();
        for range in SlotRange::all_of_reply(reply)? {
            let index = match masters.iter().position(|m| *m == range.name) {
                Some(i) => i,
                None => {
                    masters.push(range.name);
                    masters.len() - 1
                }
            };
            let index = u16::try_from(index).ok()?;
            for hs in &mut master_of[usize::from(range.start)..=usize::from(range.end)] {
                *hs = Some(index);
            }
        }
        Some(ClusterLayout { master_of })
    }
}

/// One entry of a `CLUSTER SLOTS` reply: a range of hash slots and the
/// master that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRange {
    pub(crate) start: u16,
    pub(crate) end: u16,
    /// The master's host as the cluster announces it; empty when it
    /// announces none (then it is the host of the node that answered).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The master's id, or `host:port` when the reply has none.
    pub(crate) name: Vec<u8>,
}

impl SlotRange {
    /// Every range of a `CLUSTER SLOTS` reply, or None if it is not one.
    pub(crate) fn all_of_reply(reply: &Value) -> Option<Vec<SlotRange>> {
        let Value::Array(entries) = reply else {
            return None;
        };
        entries.iter().map(SlotRange::of_entry).collect()
    }

    fn of_entry(entry: &Value) -> Option<SlotRange> {
        let Value::Array(f) = entry else {
            return None;
        };
        let (start, end) = (f.first().and_then(as_int)?, f.get(1).and_then(as_int)?);
        let Some(Value::Array(node)) = f.get(2) else {
            return None;
        };
        let (start, end) = (u16::try_from(start).ok()?, u16::try_from(end).ok()?);
        if start > end || usize::from(end) >= HASH_SLOTS {
            return None;
        }
        // No host (a cluster that announces no endpoint): the answering
        // node's own.
        let host = match node.first()? {
            Value::Nil => Vec::new(),
            v => bytes(v)?,
        };
        let port = u16::try_from(as_int(node.get(1)?)?).ok()?;
        let name = match node.get(2).and_then(bytes) {
            Some(id) => id,
            None => {
                let mut name = host.clone();
                name.push(b':');
                name.extend_from_slice(port.to_string().as_bytes());
                name
            }
        };
        Some(SlotRange {
            start,
            end,
            host: String::from_utf8(host).ok()?,
            port,
            name,
        })
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn entry(start: i64, end: i64, host: &str, port: i64, id: Option<&str>) -> Value {
        let mut node = vec![bulk(host), Value::Int(port)];
        node.extend(id.map(bulk));
        Value::Array(vec![Value::Int(start), Value::Int(end), Value::Array(node)])
    }

    #[test]
    fn hash_slots_of_one_master_share_its_index_and_unserved_ones_have_none() {
        let reply = Value::Array(vec![
            entry(0, 99, "127.0.0.1", 7000, Some("a")),
            entry(200, 16_383, "127.0.0.1", 7001, Some("b")),
            entry(150, 199, "127.0.0.1", 7000, Some("a")),
        ]);
        let layout = ClusterLayout::of_reply(&reply).unwrap();
        assert_eq!(layout.master_of(0), layout.master_of(99));
        assert_eq!(layout.master_of(0), layout.master_of(150));
        assert_ne!(layout.master_of(0), layout.master_of(200));
        assert_eq!(layout.master_of(16_383), layout.master_of(200));
        assert_eq!(layout.master_of(100), None, "nobody serves 100..150");
        assert_eq!(layout.master_of(16_384), None, "no such hash slot");
    }

    #[test]
    fn masters_without_an_id_are_told_apart_by_address() {
        let reply = Value::Array(vec![
            entry(0, 10, "127.0.0.1", 7000, None),
            entry(11, 20, "127.0.0.1", 7001, None),
            entry(21, 30, "127.0.0.1", 7000, None),
        ]);
        let layout = ClusterLayout::of_reply(&reply).unwrap();
        assert_eq!(layout.master_of(0), layout.master_of(21));
        assert_ne!(layout.master_of(0), layout.master_of(11));
    }

    #[test]
    fn a_master_announced_without_a_host_is_the_answering_node() {
        let node = Value::Array(vec![Value::Nil, Value::Int(7000), bulk("a")]);
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16_383),
            node,
        ])]);
        let ranges = SlotRange::all_of_reply(&reply).unwrap();
        assert_eq!((ranges[0].host.as_str(), ranges[0].port), ("", 7000));
        assert!(ClusterLayout::of_reply(&reply).is_some());
    }

    #[test]
    fn a_reply_that_is_no_layout_is_refused() {
        assert_eq!(ClusterLayout::of_reply(&Value::Int(3)), None);
        let out_of_range = Value::Array(vec![entry(0, 16_384, "h", 1, Some("a"))]);
        assert_eq!(ClusterLayout::of_reply(&out_of_range), None);
        let backwards = Value::Array(vec![entry(9, 3, "h", 1, Some("a"))]);
        assert_eq!(ClusterLayout::of_reply(&backwards), None);
        let no_node = Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(1)])]);
        assert_eq!(ClusterLayout::of_reply(&no_node), None);
    }
}
