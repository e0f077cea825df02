//! Rendezvous (highest random weight) hashing: slot `s` belongs to the live
//! member with the highest `weight(member, s)`. Every member computes the
//! same answer from the same member list, and a join or leave moves only
//! the slots whose winner changes: on a join, exactly the slots the new
//! member wins; on a leave, exactly the slots the leaver held.

/// The slots of `0..slots` that `me` should own among `members`.
pub(crate) fn assign(members: &[String], slots: u32, me: &str) -> Vec<u32> {
    (0..slots)
        .filter(|&s| winner(members, s).is_some_and(|w| w == me))
        .collect()
}

fn winner(members: &[String], slot: u32) -> Option<&str> {
    members
        .iter()
        .max_by_key(|m| (weight(m, slot), m.as_str()))
        .map(|m| m.as_str())
}

/// FNV-1a over member and slot, then a SplitMix64 finalizer.
fn weight(member: &str, slot: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.as_bytes().iter().chain(&slot.to_le_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(members: &[String], slots: u32) -> Vec<String> {
        (0..slots)
            .map(|s| winner(members, s).unwrap().to_string())
            .collect()
    }

    #[test]
    fn every_slot_has_exactly_one_owner_and_the_split_is_fair() {
        let members: Vec<String> = (0..4).map(|i| format!("m{i}")).collect();
        let mut total = 0;
        for m in &members {
            let mine = assign(&members, 64, m);
            assert!((8..=24).contains(&mine.len()), "{m}: {}", mine.len());
            total += mine.len();
        }
        assert_eq!(total, 64);
    }

    #[test]
    fn a_join_or_leave_moves_only_the_slots_it_must() {
        let three: Vec<String> = (0..3).map(|i| format!("member-{i}")).collect();
        let mut four = three.clone();
        four.push("member-new".into());
        let before = owners(&three, 1024);
        let after = owners(&four, 1024);
        let moved: Vec<usize> = (0..1024).filter(|&s| before[s] != after[s]).collect();
        // Every moved slot went to the new member, and it got nothing else.
        assert!(moved.iter().all(|&s| after[s] == "member-new"));
        assert_eq!(
            moved.len(),
            after.iter().filter(|o| *o == "member-new").count()
        );
        // About a quarter moves (1024 / 4 = 256).
        assert!((180..=340).contains(&moved.len()), "{}", moved.len());
        // A leave moves exactly the leaver's slots.
        let back = owners(&three, 1024);
        assert_eq!(back, before);
    }
}
