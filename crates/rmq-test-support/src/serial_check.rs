//! The serial-mode check: what handlers of a consumer group logged, held
//! against what was sent. No two handlers of one slot overlapped in time,
//! fencing tokens only grew within a slot, and every entity's messages were
//! each handled once, in the order they were sent. Shared by the library's
//! serial tests and the HTTP ones (serial mode over HTTP).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// One handled delivery: slot, fence, payload (`<entity>#<seq>`), when the
/// handler started and when it was done (before its ack was sent).
pub type Handled = (u32, u64, Vec<u8>, Instant, Instant);

/// Panics unless `log` keeps serial mode's promises for `sent` (entity ->
/// the sequence numbers sent, in order).
pub fn check_serial_log(log: &[Handled], sent: &HashMap<Vec<u8>, Vec<u32>>) {
    let mut by_slot: BTreeMap<u32, Vec<(Instant, Instant, u64)>> = BTreeMap::new();
    let mut seen: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    for (slot, fence, payload, start, end) in log {
        by_slot
            .entry(*slot)
            .or_default()
            .push((*start, *end, *fence));
        let hash = payload
            .iter()
            .position(|&b| b == b'#')
            .unwrap_or_else(|| panic!("payload without '#': {payload:?}"));
        let (key, seq) = payload.split_at(hash);
        let seq: u32 = std::str::from_utf8(&seq[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("payload without a sequence: {payload:?}"));
        seen.entry(key.to_vec()).or_default().push(seq);
    }
    for (slot, mut iv) in by_slot {
        iv.sort();
        for w in iv.windows(2) {
            assert!(w[0].1 <= w[1].0, "slot {slot}: two handlers overlapped");
            assert!(w[0].2 <= w[1].2, "slot {slot}: fencing tokens only grow");
        }
    }
    for (key, seqs) in sent {
        let got = seen.get(key).cloned().unwrap_or_default();
        assert_eq!(
            &got,
            seqs,
            "key {:?}: every message once, in order",
            String::from_utf8_lossy(key)
        );
    }
}
