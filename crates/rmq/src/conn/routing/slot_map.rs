//! Which master serves each hash slot: the map asked of `CLUSTER SLOTS`,
//! mended at once by each `MOVED`, and the node addresses it names.

use std::sync::Arc;

use super::super::layout::{ClusterLayout, SlotRange, HASH_SLOTS};

/// A master's address, as the cluster announces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct NodeAddr {
    pub(super) host: String,
    pub(super) port: u16,
}

impl NodeAddr {
    /// `host:port` as a redirect names it (`[::1]:7000` or `::1:7000`
    /// alike); a redirect without a host (`:7000`, a cluster that
    /// announces no endpoint) means the host of `sent_to`.
    pub(super) fn of_redirect(addr: &str, sent_to: &NodeAddr) -> Option<NodeAddr> {
        let (host, port) = addr.rsplit_once(':')?;
        let host = match host.trim_start_matches('[').trim_end_matches(']') {
            "" | "?" => sent_to.host.as_str(),
            host => host,
        };
        Some(NodeAddr {
            host: host.to_string(),
            port: port.parse().ok()?,
        })
    }
}

/// Which master serves each hash slot, as last asked and mended since.
#[derive(Debug, Default)]
pub(super) struct SlotMap {
    /// Per hash slot: an index into `nodes`; empty until first asked.
    pub(super) owner: Vec<Option<u16>>,
    pub(super) nodes: Vec<Arc<NodeAddr>>,
    /// `owner` as a layout, made on first use after each change.
    pub(super) layout: Option<Arc<ClusterLayout>>,
    /// A call grouped by the layout found a key elsewhere: ask again
    /// before the next use of the layout.
    pub(super) stale: bool,
    /// How many times it was forgotten: an answer to a question asked
    /// before the last time may be what proved stale, and is kept stale.
    pub(super) forgotten: u64,
}

impl SlotMap {
    pub(super) fn of_ranges(ranges: Vec<SlotRange>, asked: &NodeAddr) -> SlotMap {
        let mut map = SlotMap {
            owner: vec![None; HASH_SLOTS],
            ..SlotMap::default()
        };
        for r in ranges {
            // An empty host is the answering node's own.
            let host = match r.host.as_str() {
                "" | "?" => asked.host.clone(),
                _ => r.host,
            };
            let index = map.index_of(NodeAddr { host, port: r.port });
            for hs in &mut map.owner[usize::from(r.start)..=usize::from(r.end)] {
                *hs = index;
            }
        }
        map
    }

    pub(super) fn index_of(&mut self, addr: NodeAddr) -> Option<u16> {
        let i = match self.nodes.iter().position(|n| **n == addr) {
            Some(i) => i,
            None => {
                self.nodes.push(Arc::new(addr));
                self.nodes.len() - 1
            }
        };
        u16::try_from(i).ok()
    }

    pub(super) fn master_of(&self, hash_slot: u16) -> Option<&Arc<NodeAddr>> {
        let i = (*self.owner.get(usize::from(hash_slot))?)?;
        self.nodes.get(usize::from(i))
    }

    /// A `MOVED` reply: the slot is served by `addr` now.
    pub(super) fn moved(&mut self, hash_slot: u16, addr: NodeAddr) {
        if self.owner.len() != HASH_SLOTS {
            return;
        }
        let index = self.index_of(addr);
        if let Some(hs) = self.owner.get_mut(usize::from(hash_slot)) {
            *hs = index;
        }
        self.layout = None;
    }

    /// The layout, unless never asked for or forgotten.
    pub(super) fn layout(&mut self) -> Option<Arc<ClusterLayout>> {
        if self.owner.is_empty() || self.stale {
            return None;
        }
        let owner = &self.owner;
        Some(
            self.layout
                .get_or_insert_with(|| Arc::new(ClusterLayout::of_owners(owner.clone())))
                .clone(),
        )
    }

    /// Takes a new answer, asked for when the forget count was `asked_at`.
    pub(super) fn answered(&mut self, mut new: SlotMap, asked_at: u64) {
        new.forgotten = self.forgotten;
        new.stale = self.forgotten != asked_at;
        *self = new;
    }
}
